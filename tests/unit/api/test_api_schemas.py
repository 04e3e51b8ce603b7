"""Request models to domain records and domain records to response models."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from tickwork.api.schemas import JobCreate, JobOut, JobUpdate, ScheduleOut
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
from tickwork.errors import InvalidInput
from tickwork.jobs import ANCHOR_AT_ACCEPT, JobPatch

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
            {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
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
