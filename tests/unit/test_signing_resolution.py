"""Pure pieces of per-job/per-tenant signing and dead-letter alerts."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.jobs import AlertTarget, WebhookTarget
from tickwork.domain.runs import Fire, RunOutcome, RunStatus
from tickwork.domain.signing import SigningSource, resolve_secrets
from tickwork.domain.tenants import Tenant
from tickwork.errors import InvalidInput
from tickwork.services.rules import check_secrets
from tickwork.webhooks import fingerprint, generate_secret, parse_secret
from tickwork.worker.alerts import alert_body, alert_key

JOB, TENANT, PROCESS = ["whsec_job"], ["whsec_tenant"], ["whsec_process"]


@pytest.mark.parametrize(
    ("job", "tenant", "process", "expected"),
    [
        (JOB, TENANT, PROCESS, (SigningSource.JOB, tuple(JOB))),
        ([], TENANT, PROCESS, (SigningSource.TENANT, tuple(TENANT))),
        ([], [], PROCESS, (SigningSource.PROCESS, tuple(PROCESS))),
        ([], [], [], (SigningSource.NONE, ())),
        (JOB, [], [], (SigningSource.JOB, tuple(JOB))),
        ([*JOB, "whsec_next"], TENANT, [], (SigningSource.JOB, ("whsec_job", "whsec_next"))),
    ],
    ids=["job-wins", "tenant", "process", "unsigned", "job-alone", "job-rotation"],
)
def test_the_most_specific_level_signs_alone(
    job: list[str],
    tenant: list[str],
    process: list[str],
    expected: tuple[SigningSource, tuple[str, ...]],
) -> None:
    assert resolve_secrets(job=job, tenant=tenant, process=process) == expected


def test_a_fingerprint_is_8_hex_of_the_keys_sha256_and_ignores_the_prefix() -> None:
    secret = generate_secret()
    assert fingerprint(secret) == hashlib.sha256(parse_secret(secret)).hexdigest()[:8]
    assert fingerprint(secret.removeprefix("whsec_")) == fingerprint(secret)
    assert fingerprint(generate_secret()) != fingerprint(secret)


def test_records_never_show_secrets_in_their_repr() -> None:
    secret = generate_secret()
    target = WebhookTarget(url="https://example.com/", secrets=(secret,))
    now = datetime(2026, 3, 1, tzinfo=UTC)
    tenant = Tenant(tenant="acme", webhook_secrets=(secret,), created_at=now, updated_at=now)
    fire = _fire(target, tenant_secrets=(secret,))
    for record in (target, tenant, fire):
        assert secret not in repr(record)
        assert secret.removeprefix("whsec_") not in repr(record)


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        (["nope!"], "secret 1 of 1: expected 'whsec_' followed by base64"),
        ([generate_secret(), "whsec_c2hvcnQ="], "secret 2 of 2: decodes to 5 bytes"),
        ([generate_secret()] * 3, "give at most 2 secrets"),
    ],
)
def test_check_secrets_names_the_field_and_the_problem(secrets: list[str], message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_secrets("target.secrets", secrets)
    assert caught.value.field == "target.secrets"
    assert message in caught.value.message
    for secret in secrets:
        assert secret.removeprefix("whsec_") not in str(caught.value)


def test_the_alert_body_describes_the_dead_letter() -> None:
    fire = _fire(WebhookTarget(url="https://example.com/"))
    finished = fire.scheduled_for + timedelta(seconds=31, milliseconds=250)
    outcome = RunOutcome(
        run_id=fire.run_id,
        job_id=fire.job_id,
        attempt=5,
        fence_token=fire.fence_token,
        status=RunStatus.FAILED,
        started_at=finished - timedelta(seconds=1),
        finished_at=finished,
        http_status=None,
        error="timed out after 10 s",
    )
    assert alert_key(fire) == "j1:1772366400000:dead_letter"
    assert alert_body(replace(fire, attempt=5), outcome) == {
        "type": "run.dead_lettered",
        "job_id": "j1",
        "run_id": 7,
        "key": "j1:1772366400000",
        "scheduled_for": "2026-03-01T12:00:00Z",
        "dead_lettered_at": "2026-03-01T12:00:31.250Z",
        "attempts": 5,
        "last_error": "timed out after 10 s",
        "http_status": None,
    }


def _fire(target: WebhookTarget, tenant_secrets: tuple[str, ...] = ()) -> Fire:
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    return Fire(
        run_id=7,
        job_id="j1",
        key="j1:1772366400000",
        scheduled_for=at,
        fence_token=3,
        attempt=1,
        target=target,
        lease_until=at,
        tenant_secrets=tenant_secrets,
        on_failure=AlertTarget(url="https://example.com/alerts"),
    )
