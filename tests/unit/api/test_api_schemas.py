"""Request models to domain records and domain records to response models."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from tickwork.api.schemas import (
    AttemptOut,
    JobCreate,
    JobOut,
    JobUpdate,
    RetryIn,
    RetryOut,
    RunDetailOut,
    RunOut,
    ScheduleOut,
    parse_delay_ms,
)
from tickwork.domain.jobs import (
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    Job,
    JobState,
    MisfirePolicy,
    Schedule,
    WebhookTarget,
)
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import AttemptRecord, AttemptStatus, Run, RunOrigin, RunStatus
from tickwork.errors import InvalidInput
from tickwork.services.jobs import JobPatch, RunDetail
from tickwork.services.rules import ANCHOR_AT_ACCEPT

T0 = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def test_create_body_maps_to_a_job_spec() -> None:
    body = JobCreate.model_validate(
        {
            "name": "n",
            "schedule": {"every": "PT1.5S", "misfire": "skip", "misfire_grace": 5},
            "target": {"url": "https://x.test", "method": "delete", "timeout": "PT1M"},
        }
    )
    spec = body.to_domain()
    assert spec.tenant == "default"
    assert spec.schedule == Schedule(
        trigger=EveryTrigger(interval_ms=1500, anchor=ANCHOR_AT_ACCEPT),
        misfire=MisfirePolicy.SKIP,
        misfire_grace_ms=5000,
    )
    assert spec.target == WebhookTarget(url="https://x.test", method="DELETE", timeout_s=60.0)


def test_instants_are_normalised_to_utc() -> None:
    body = JobCreate.model_validate(
        {
            "name": "n",
            "schedule": {"at": "2026-12-24T19:00:00+01:00"},
            "target": {"url": "https://x.test"},
        }
    )
    trigger = body.to_domain().schedule.trigger
    assert trigger == AtTrigger(at=datetime(2026, 12, 24, 18, 0, tzinfo=UTC))
    assert isinstance(trigger, AtTrigger)
    assert trigger.at.tzinfo is UTC


def test_bad_duration_names_its_field() -> None:
    body = JobCreate.model_validate(
        {
            "name": "n",
            "schedule": {"cron": "* * * * *"},
            "target": {"url": "https://x.test", "timeout": "soon"},
        }
    )
    with pytest.raises(InvalidInput) as caught:
        body.to_domain()
    assert caught.value.field == "target.timeout"


def test_schedule_needs_exactly_one_kind() -> None:
    with pytest.raises(ValidationError) as caught:
        JobCreate.model_validate(
            {
                "name": "n",
                "schedule": {"at": "2026-01-01T00:00:00Z", "every": 5},
                "target": {"url": "https://x.test"},
            }
        )
    assert caught.value.errors()[0]["loc"] == ("schedule",)


def test_empty_patch_changes_nothing() -> None:
    assert JobUpdate.model_validate({}).to_domain() == JobPatch()


@pytest.mark.parametrize(
    ("trigger", "kind"),
    [
        (
            CronTrigger(expr="0 2 * * *", timezone="Europe/Berlin"),
            {
                "cron": "0 2 * * *",
                "timezone": "Europe/Berlin",
                "dst": {"gap": "cron", "repeat": "cron"},
            },
        ),
        (
            EveryTrigger(interval_ms=90_000, anchor=T0),
            {"every": "PT1M30S", "anchor": "2026-01-15T12:00:00Z"},
        ),
        (AtTrigger(at=T0), {"at": "2026-01-15T12:00:00Z"}),
    ],
)
def test_schedule_out_carries_only_its_own_kind(trigger: object, kind: dict[str, str]) -> None:
    out = ScheduleOut.of(Schedule(trigger=trigger))  # type: ignore[arg-type]
    assert out.model_dump() == {
        **kind,
        "start_at": None,
        "end_at": None,
        "misfire": "coalesce",
        "misfire_grace": "PT1S",
        "catchup_window": "P1D",
        "jitter": None,
        "window": None,
    }


def test_job_out_renders_times_in_utc_with_z() -> None:
    job = Job(
        id="0" * 32,
        name="n",
        schedule=Schedule(trigger=AtTrigger(at=T0)),
        target=WebhookTarget(url="https://x.test", timeout_s=0.25),
        state=JobState.COMPLETED,
        next_run_at=None,
        created_at=datetime(2026, 1, 15, 12, 0, 0, 123456, tzinfo=UTC),
        updated_at=T0,
        last_fired_at=T0,
    )
    out = JobOut.of(job).model_dump(mode="json")
    assert out["created_at"] == "2026-01-15T12:00:00.123Z"
    assert out["last_fired_at"] == "2026-01-15T12:00:00Z"
    assert out["next_run_at"] is None
    assert out["target"]["timeout"] == "PT0.25S"


# -- retry policy -----------------------------------------------------------------------------


def test_retry_body_maps_to_a_policy_with_defaults_for_what_is_absent() -> None:
    assert RetryIn.model_validate({}).to_domain() == RetryPolicy()
    given = {"max_attempts": 3, "backoff": "PT0.5S", "max_backoff": 90, "multiplier": 1.5}
    assert RetryIn.model_validate(given).to_domain() == RetryPolicy(
        max_attempts=3, base_delay_ms=500, max_delay_ms=90_000, multiplier=1.5
    )


def test_create_without_retry_leaves_it_to_the_service() -> None:
    body = {"name": "n", "schedule": {"every": 5}, "target": {"url": "https://x.test"}}
    assert JobCreate.model_validate(body).to_domain().retry is None
    with_retry = JobCreate.model_validate(body | {"retry": {"max_attempts": 1}}).to_domain()
    assert with_retry.retry == RetryPolicy(max_attempts=1)
    assert JobUpdate.model_validate({"retry": {}}).to_domain() == JobPatch(retry=RetryPolicy())


@pytest.mark.parametrize(
    ("value", "ms"),
    [(0, 0), (0.0, 0), ("PT0S", 0), ("P0D", 0), ("PT0.0001S", 0), ("PT1S", 1000), (2.5, 2500)],
)
def test_delays_may_be_zero(value: str | float, ms: int) -> None:
    assert parse_delay_ms(value, "retry.backoff") == ms


@pytest.mark.parametrize("value", [-1, -0.5, float("-inf"), "-PT1S", "soon", True])
def test_bad_delays_name_their_field(value: str | float) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_delay_ms(value, "retry.max_backoff")
    assert caught.value.field == "retry.max_backoff"


def test_retry_out_formats_durations() -> None:
    policy = RetryPolicy(max_attempts=2, base_delay_ms=0, max_delay_ms=90_000, multiplier=1.0)
    assert RetryOut.of(policy).model_dump() == {
        "max_attempts": 2,
        "backoff": "PT0S",
        "max_backoff": "PT1M30S",
        "multiplier": 1.0,
    }


# -- runs and attempts ------------------------------------------------------------------------


def _run(**changes: object) -> Run:
    run = Run(
        id=7,
        job_id="j",
        key="j:1",
        origin=RunOrigin.SCHEDULE,
        scheduled_for=T0,
        status=RunStatus.FAILED,
        attempt=2,
        fence_token=4,
        coalesced=0,
        created_at=T0,
        started_at=T0,
        finished_at=T0,
        http_status=500,
        error="HTTP 500",
        dead_lettered_at=datetime(2026, 1, 15, 12, 0, 0, 5000, tzinfo=UTC),
        last_error="HTTP 500",
    )
    return replace(run, **changes)  # type: ignore[arg-type]


def _attempt(status: AttemptStatus) -> AttemptRecord:
    return AttemptRecord(
        id=1,
        run_id=7,
        job_id="j",
        attempt=1,
        fence_token=3,
        worker=None,
        started_at=T0,
        finished_at=T0,
        status=status,
        http_status=None,
        error="timed out",
    )


def test_run_out_has_the_dead_letter_fields() -> None:
    out = RunOut.of(_run(), T0).model_dump()
    assert (out["dead_lettered_at"], out["last_error"]) == ("2026-01-15T12:00:00.005Z", "HTTP 500")
    assert (out["state"], out["status"]) == ("dead_lettered", "failed")
    purged = RunOut.of(_run(dead_lettered_at=None), T0).model_dump()
    assert (purged["dead_lettered_at"], purged["state"]) == (None, "failed")


def test_a_leased_run_shows_running_with_its_worker_until_its_lease_ends() -> None:
    leased = _run(
        status=RunStatus.PENDING,
        dead_lettered_at=None,
        finished_at=None,
        lease_owner="host-a:42",
        lease_until=T0 + timedelta(seconds=5),
    )
    fields = ("state", "status", "worker", "lease_until", "started_at")
    running = RunOut.of(leased, T0 + timedelta(seconds=4)).model_dump()
    assert [running[f] for f in fields] == [
        "running",
        "pending",
        "host-a:42",
        "2026-01-15T12:00:05Z",
        "2026-01-15T12:00:00Z",
    ]
    expired = RunOut.of(leased, T0 + timedelta(seconds=5)).model_dump()
    assert [expired[f] for f in fields[:3]] == ["retrying", "pending", None]


@pytest.mark.parametrize(
    ("status", "shown"),
    [
        (AttemptStatus.RETRIED, "retry"),
        (AttemptStatus.FAILED, "failed"),
        (AttemptStatus.SUCCEEDED, "succeeded"),
        (AttemptStatus.LOST, "lost"),
    ],
)
def test_attempt_status_says_retry_for_a_retried_attempt(status: AttemptStatus, shown: str) -> None:
    assert AttemptOut.of(_attempt(status)).status == shown


def test_run_detail_is_the_run_plus_its_attempts() -> None:
    detail = RunDetail(run=_run(), attempts=[_attempt(AttemptStatus.RETRIED)], as_of=T0)
    out = RunDetailOut.of_detail(detail).model_dump()
    assert {k: v for k, v in out.items() if k != "attempts"} == RunOut.of(_run(), T0).model_dump()
    assert out["attempts"] == [
        {
            "attempt": 1,
            "fence_token": 3,
            "worker": None,
            "started_at": "2026-01-15T12:00:00Z",
            "finished_at": "2026-01-15T12:00:00Z",
            "status": "retry",
            "http_status": None,
            "error": "timed out",
        }
    ]
