"""Helpers shared by the ScheduleStore conformance suite (tests/contract/test_store_*.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwork.domain.jobs import (
    AlertTarget,
    EveryTrigger,
    Job,
    JobState,
    Schedule,
    WebhookTarget,
)
from tickwork.domain.runs import Envelope, RunOutcome, RunStatus
from tickwork.store.base import ClaimPlan, ScheduleStore
from tickwork.webhooks import generate_secret

T0 = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
SEC = timedelta(seconds=1)
TARGET = WebhookTarget(
    url="http://127.0.0.1:9/hook",
    method="PUT",
    headers={"x-team": "ops"},
    body={"n": 1, "tags": ["a"]},
    timeout_s=2.5,
)


def make_job(
    n: int, *, next_run_at: datetime = T0, state: JobState = JobState.SCHEDULED, **kw: object
) -> Job:
    fields: dict[str, object] = {
        "id": f"{n:032x}",
        "name": f"job-{n}",
        "schedule": Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0)),
        "target": TARGET,
        "state": state,
        "next_run_at": next_run_at,
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(kw)
    return Job(**fields)  # type: ignore[arg-type]


def plan_for(
    job: Job, *, fire: datetime | None = None, new_next: datetime | None = None, coalesced: int = 0
) -> ClaimPlan:
    assert job.next_run_at is not None
    return ClaimPlan(
        job_id=job.id,
        expected_fence=job.fence_token,
        expected_next_run_at=job.next_run_at,
        scheduled_for=job.next_run_at if fire is None else fire,
        coalesced=coalesced,
        new_next_run_at=new_next,
    )


async def claim(store: ScheduleStore, plans: list[ClaimPlan], owner: str = "node-a") -> list:  # type: ignore[type-arg]
    return await store.claim(plans, owner=owner, lease_until=T0 + 60 * SEC, now=T0)


def outcome(
    fire,
    *,
    status: RunStatus = RunStatus.SUCCEEDED,
    fence: int | None = None,
    retry_at: datetime | None = None,
) -> RunOutcome:  # type: ignore[no-untyped-def]
    return RunOutcome(
        run_id=fire.run_id,
        job_id=fire.job_id,
        attempt=fire.attempt,
        fence_token=fire.fence_token if fence is None else fence,
        worker="w1",
        retry_at=retry_at,
        status=status,
        started_at=T0 + timedelta(milliseconds=3),
        finished_at=T0 + timedelta(milliseconds=40),
        http_status=200 if status is RunStatus.SUCCEEDED else 503,
        error=None if status is RunStatus.SUCCEEDED else "HTTP 503",
    )


SECRET_A, SECRET_B, SECRET_T = generate_secret(), generate_secret(), generate_secret()


ALERT = AlertTarget(url="http://127.0.0.1:9/alert", headers={"x-pager": "ops"})


async def hand_off(store: ScheduleStore, count: int, *, at: datetime = T0) -> list[Envelope]:
    """`count` runs claimed for other processes (unowned, leasable at `at`), one per job."""
    jobs = [make_job(n, next_run_at=at) for n in range(1, count + 1)]
    for job in jobs:
        await store.create_job(job)
    plans = [plan_for(job, new_next=at + SEC) for job in jobs]
    envelopes = await store.claim_hand_off(plans, owner="s", now=T0)
    return sorted(envelopes, key=lambda e: e.job_id)
