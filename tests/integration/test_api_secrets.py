"""Write-only signing secrets and on_failure alerts through the HTTP API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tickwork.domain.jobs import WebhookTarget
from tickwork.domain.masking import MASK
from tickwork.services.tenants import TenantService
from tickwork.store.memory import MemoryStore
from tickwork.webhooks import fingerprint, generate_secret

from .test_api import Api, error_of, job_body, serve

OLD, NEW = generate_secret(), generate_secret()
ALERT = {"url": "https://example.com/alerts", "headers": {"x-pager": "ops"}}


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


class Recorder:
    """Every response body the test saw, so it can assert no secret ever left the API."""

    def __init__(self) -> None:
        self.bodies: list[str] = []

    def __call__(self, response: httpx.Response) -> httpx.Response:
        self.bodies.append(response.text)
        return response

    def assert_never_shown(self, *secrets: str) -> None:
        assert self.bodies
        for secret in secrets:
            bare = secret.removeprefix("whsec_")
            assert not any(bare in body for body in self.bodies)


@pytest.fixture
def seen() -> Recorder:
    return Recorder()


def with_secrets(secrets: Any, **target: Any) -> dict[str, Any]:
    body = job_body()
    body["target"] = {**body["target"], **target, "secrets": secrets}
    return body


async def test_job_secrets_are_never_echoed_only_fingerprinted(api: Api, seen: Recorder) -> None:
    created = seen(await api.client.post("/v1/jobs", json=with_secrets([OLD, NEW])))
    assert created.status_code == 201
    job = created.json()
    assert job["signing"] == {"source": "job", "fingerprints": [fingerprint(OLD), fingerprint(NEW)]}
    assert "secrets" not in job["target"]
    seen(await api.client.get(f"/v1/jobs/{job['id']}"))
    seen(await api.client.get("/v1/jobs"))
    seen(await api.client.post(f"/v1/jobs/{job['id']}/pause"))
    seen(await api.client.patch(f"/v1/jobs/{job['id']}", json={"name": "renamed"}))
    seen(await api.client.post(f"/v1/jobs/{job['id']}/trigger"))
    seen(await api.client.get("/openapi.json"))
    seen.assert_never_shown(OLD, NEW)
    stored = await api.store.get_job(job["id"])
    assert stored.target.secrets == (OLD, NEW)  # type: ignore[union-attr]


async def test_a_job_without_secrets_inherits(api: Api) -> None:
    job = (await api.client.post("/v1/jobs", json=job_body())).json()
    assert job["signing"] == {"source": "inherit", "fingerprints": []}


@pytest.mark.parametrize(
    ("secrets", "expected"),
    [
        (["whsec_not base64!"], "secret 1 of 1: expected 'whsec_' followed by base64"),
        (["whsec_c2hvcnQ="], "secret 1 of 1: decodes to 5 bytes"),
        ([OLD, NEW, generate_secret()], "give at most 2 secrets"),
    ],
    ids=["not-base64", "too-short", "three"],
)
async def test_bad_secrets_are_refused_naming_the_field_without_repeating_them(
    api: Api, secrets: list[str], expected: str
) -> None:
    response = await api.client.post("/v1/jobs", json=with_secrets(secrets))
    error = error_of(response, 422)
    assert error["field"] == "target.secrets"
    assert expected in error["message"]
    assert "generate" in error["message"] or "rotation" in error["message"]
    for secret in secrets:
        assert secret.removeprefix("whsec_") not in response.text


async def test_a_mistyped_real_secret_is_not_echoed(api: Api) -> None:
    mistyped = OLD[:-3] + "!!="  # one typo in a real secret must not leak the rest of it
    response = await api.client.post("/v1/jobs", json=with_secrets([mistyped]))
    assert error_of(response, 422)["field"] == "target.secrets"
    assert OLD[6:30] not in response.text


async def test_secrets_belong_to_webhook_targets_only(api: Api) -> None:
    body = job_body(target={"type": "task", "name": "reports.build", "secrets": [OLD]})
    response = await api.client.post("/v1/jobs", json=body)
    assert error_of(response, 422)["field"] == "target.secrets"
    assert OLD not in response.text


async def test_patch_keeps_secrets_unless_given_and_clears_them_with_null_or_empty(
    api: Api, seen: Recorder
) -> None:
    job = seen(await api.client.post("/v1/jobs", json=with_secrets([OLD]))).json()
    path = f"/v1/jobs/{job['id']}"
    new_target = {"url": "https://example.com/other"}
    kept = seen(await api.client.patch(path, json={"target": new_target})).json()
    assert kept["target"]["url"] == "https://example.com/other"
    assert kept["signing"] == {"source": "job", "fingerprints": [fingerprint(OLD)]}
    rotated = seen(
        await api.client.patch(path, json={"target": {**new_target, "secrets": [OLD, NEW]}})
    ).json()
    assert rotated["signing"]["fingerprints"] == [fingerprint(OLD), fingerprint(NEW)]
    for empty in (None, []):
        seen(await api.client.patch(path, json={"target": {**new_target, "secrets": [NEW]}}))
        cleared = seen(
            await api.client.patch(path, json={"target": {**new_target, "secrets": empty}})
        ).json()
        assert cleared["signing"] == {"source": "inherit", "fingerprints": []}
        stored = await api.store.get_job(job["id"])
        assert stored.target.secrets == ()  # type: ignore[union-attr]
    seen.assert_never_shown(OLD, NEW)


async def test_on_failure_is_shown_masked_kept_replaced_and_removed(api: Api) -> None:
    masked = {**ALERT, "headers": {"x-pager": MASK}}
    job = (await api.client.post("/v1/jobs", json=job_body(on_failure=ALERT))).json()
    assert job["on_failure"] == masked
    path = f"/v1/jobs/{job['id']}"
    assert (await api.client.patch(path, json={"name": "x"})).json()["on_failure"] == masked
    # the answer sent back as it came keeps the stored header value
    resent = await api.client.patch(path, json={"on_failure": job["on_failure"]})
    assert resent.json()["on_failure"] == masked
    stored = await api.store.get_job(job["id"])
    assert stored.on_failure is not None
    assert stored.on_failure.headers == ALERT["headers"]
    other = {"url": "https://example.com/pager", "headers": {}}
    assert (await api.client.patch(path, json={"on_failure": other})).json()["on_failure"] == other
    assert (await api.client.patch(path, json={"on_failure": None})).json()["on_failure"] is None


@pytest.mark.parametrize(
    ("on_failure", "field"),
    [
        ({"url": "ftp://example.com/x"}, "on_failure.url"),
        ({"url": "https://example.com/x", "headers": {"bad name": "v"}}, "on_failure.headers"),
        ({"headers": {}}, "on_failure.url"),
        ({"url": "https://example.com/x", "secret": "x"}, "on_failure.secret"),
    ],
    ids=["scheme", "header", "missing-url", "unknown-field"],
)
async def test_bad_on_failure_is_refused_naming_the_field(
    api: Api, on_failure: dict[str, Any], field: str
) -> None:
    response = await api.client.post("/v1/jobs", json=job_body(on_failure=on_failure))
    assert error_of(response, 422)["field"] == field


# -- tenants ------------------------------------------------------------------------------------


async def test_tenant_secrets_are_set_shown_as_fingerprints_and_cleared(
    api: Api, seen: Recorder
) -> None:
    path = "/v1/tenants/acme/webhook-secrets"
    empty = seen(await api.client.get(path))
    assert empty.status_code == 200
    assert empty.json() == {
        "tenant": "acme",
        "signing": "inherit",
        "fingerprints": [],
        "updated_at": None,
    }
    put = seen(await api.client.put(path, json={"secrets": [OLD, NEW]}))
    assert put.status_code == 200, put.text
    assert put.json() == {
        "tenant": "acme",
        "signing": "tenant",
        "fingerprints": [fingerprint(OLD), fingerprint(NEW)],
        "updated_at": "2026-01-15T12:00:00Z",
    }
    assert seen(await api.client.get(path)).json() == put.json()
    assert (await api.store.get_tenant("acme")).webhook_secrets == (OLD, NEW)  # type: ignore[union-attr]
    deleted = seen(await api.client.delete(path))
    assert deleted.status_code == 204
    assert seen(await api.client.get(path)).json()["fingerprints"] == []
    assert (await api.client.delete(path)).status_code == 204  # idempotent
    seen.assert_never_shown(OLD, NEW)


@pytest.mark.parametrize(
    ("body", "field", "expected"),
    [
        ({"secrets": ["whsec_c2hvcnQ="]}, "secrets", "decodes to 5 bytes"),
        ({"secrets": []}, "secrets", "DELETE"),
        ({"secrets": [OLD, NEW, OLD]}, "secrets", "at most 2"),
        ({}, "secrets", "required"),
        ({"secret": [OLD]}, "secrets", "required"),
    ],
    ids=["short", "empty", "three", "missing", "misspelt"],
)
async def test_bad_tenant_secrets_are_refused(
    api: Api, body: dict[str, Any], field: str, expected: str
) -> None:
    response = await api.client.put("/v1/tenants/acme/webhook-secrets", json=body)
    error = error_of(response, 422)
    assert error["field"] == field
    assert expected in error["message"]
    assert OLD.removeprefix("whsec_") not in response.text


async def test_an_overlong_tenant_name_is_refused(api: Api) -> None:
    response = await api.client.get(f"/v1/tenants/{'t' * 101}/webhook-secrets")
    assert error_of(response, 422)["field"] == "tenant"


# -- secret headers and URL passwords -----------------------------------------------------------

SECRET_HEADERS = {"Authorization": "Bearer tw-canary-tok-1", "X-Api-Key": "key-canary-2"}
PASSWORD_URL = "https://bob:tw-canary-pw-3@example.com/hook"


async def test_secret_headers_and_url_passwords_are_masked_and_kept_on_resend(
    api: Api, seen: Recorder
) -> None:
    target = {"url": PASSWORD_URL, "headers": {**SECRET_HEADERS, "accept": "text/plain"}}
    job = seen(await api.client.post("/v1/jobs", json=job_body(target=target))).json()
    assert job["target"]["url"] == f"https://bob:{MASK}@example.com/hook"
    assert job["target"]["headers"] == {
        "Authorization": MASK,
        "X-Api-Key": MASK,
        "accept": "text/plain",
    }
    path = f"/v1/jobs/{job['id']}"
    # read-modify-write with the masked answer: only the edited header changes
    edited = {**job["target"], "headers": {**job["target"]["headers"], "X-Api-Key": "key-new"}}
    seen(await api.client.patch(path, json={"target": edited}))
    stored = (await api.store.get_job(job["id"])).target
    assert isinstance(stored, WebhookTarget)
    assert stored.url == PASSWORD_URL
    assert stored.headers == {
        "Authorization": "Bearer tw-canary-tok-1",
        "X-Api-Key": "key-new",
        "accept": "text/plain",
    }
    seen(await api.client.get(path))
    seen(await api.client.get("/v1/jobs"))
    for canary in ("tw-canary-tok-1", "key-new", "tw-canary-pw-3"):
        assert not any(canary in body for body in seen.bodies)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            job_body(target={"url": "https://example.com/h", "headers": {"Authorization": MASK}}),
            "target.headers.Authorization",
        ),
        (job_body(target={"url": f"https://u:{MASK}@example.com/h"}), "target.url"),
        (
            job_body(on_failure={"url": "https://example.com/a", "headers": {"x-pager": MASK}}),
            "on_failure.headers.x-pager",
        ),
    ],
    ids=["header", "url-password", "alert-header"],
)
async def test_a_mask_with_nothing_stored_behind_it_is_refused(
    api: Api, body: dict[str, Any], field: str
) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=body), 422)
    assert error["code"] == "masked_value"
    assert error["field"] == field


# -- signed by default --------------------------------------------------------------------------


async def test_a_new_tenant_gets_a_signing_secret_shown_once(api: Api, seen: Recorder) -> None:
    created = await api.client.post("/v1/tenants", json={"name": "payments"})
    assert created.status_code == 201, created.text
    secret = created.json()["webhook_secret"]
    assert created.json()["fingerprints"] == [fingerprint(secret)]
    shown = seen(await api.client.get("/v1/tenants/payments/webhook-secrets")).json()
    assert shown["signing"] == "tenant"
    assert shown["fingerprints"] == [fingerprint(secret)]
    seen(await api.client.get("/v1/tenants/payments"))
    seen(await api.client.get("/v1/tenants"))
    seen.assert_never_shown(secret)


async def test_rotation_signs_with_both_until_the_previous_is_retired(
    api: Api, seen: Recorder
) -> None:
    first = (await api.client.post("/v1/tenants", json={"name": "billing"})).json()
    old = first["webhook_secret"]
    path = "/v1/tenants/billing/webhook-secrets"
    rotated = await api.client.post(path + "/rotate")
    assert rotated.status_code == 200, rotated.text
    new = rotated.json()["secret"]
    assert new != old
    assert rotated.json()["fingerprints"] == [fingerprint(new), fingerprint(old)]
    assert (await api.store.get_tenant("billing")).webhook_secrets == (new, old)  # type: ignore[union-attr]
    retired = seen(await api.client.delete(path + "/previous"))
    assert retired.json()["fingerprints"] == [fingerprint(new)]
    again = seen(await api.client.delete(path + "/previous"))
    assert again.json()["fingerprints"] == [fingerprint(new)]
    seen.assert_never_shown(old, new)
    assert (await api.client.post("/v1/tenants/nope/webhook-secrets/rotate")).status_code == 404


async def test_tenants_never_configured_get_a_secret_and_cleared_ones_stay_unsigned(
    api: Api,
) -> None:
    tenants = TenantService(api.store, api.clock)
    await api.store.create_tenant("cleared", now=api.clock.now())
    await api.store.set_tenant_secrets("cleared", (), now=api.clock.now() + timedelta(seconds=1))
    signed = await tenants.sign_unconfigured()
    assert "default" in signed
    assert "cleared" not in signed
    assert await tenants.sign_unconfigured() == []  # once


async def test_a_job_may_opt_out_of_signing(api: Api) -> None:
    body = job_body(target={"url": "https://example.com/h", "signed": False})
    job = (await api.client.post("/v1/jobs", json=body)).json()
    assert job["target"]["signed"] is False
    assert job["signing"] == {"source": "unsigned", "fingerprints": []}
    task = job_body(target={"type": "task", "name": "t", "signed": False})
    assert error_of(await api.client.post("/v1/jobs", json=task), 422)["field"] == "target.signed"
