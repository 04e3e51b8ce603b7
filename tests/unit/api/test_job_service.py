"""JobService rules against the in-memory store and a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import (
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    JobState,
    Schedule,
    WebhookTarget,
)
from tickwork.domain.runs import RunOrigin, RunStatus
from tickwork.errors import Conflict, InvalidInput, NotFound
from tickwork.jobs import ANCHOR_AT_ACCEPT, JobPatch, JobService, JobSpec
from tickwork.store.base import JobQuery
from tickwork.store.memory import MemoryStore

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
TARGET = WebhookTarget(url="https://example.com/hook")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    await store.open()
    yield store
    await store.close()


@pytest.fixture
def service(store: MemoryStore, clock: ManualClock) -> JobService:
    return JobService(store, clock)


def spec(trigger: CronTrigger | EveryTrigger | AtTrigger, **schedule: object) -> JobSpec:
    return JobSpec(name="nightly", schedule=Schedule(trigger=trigger, **schedule), target=TARGET)  # type: ignore[arg-type]


async def test_create_arms_a_cron_job_at_its_first_local_occurrence(service: JobService) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *", timezone="Europe/Berlin")))
    assert job.state is JobState.SCHEDULED
    assert job.next_run_at == datetime(2026, 1, 16, 1, 0, tzinfo=UTC)  # 02:00 CET
    assert (job.created_at, job.updated_at, job.fence_token) == (NOW, NOW, 0)
    assert len(job.id) == 32


async def test_every_without_anchor_is_anchored_at_acceptance(service: JobService) -> None:
    job = await service.create(spec(EveryTrigger(interval_ms=30_000, anchor=ANCHOR_AT_ACCEPT)))
    assert job.schedule.trigger == EveryTrigger(interval_ms=30_000, anchor=NOW)
    assert job.next_run_at == NOW  # an interval starts at its anchor


async def test_at_in_the_past_is_accepted_and_due_at_once(service: JobService) -> None:
    past = NOW - timedelta(hours=1)
    job = await service.create(spec(AtTrigger(at=past)))
    assert job.next_run_at == past


async def test_schedule_that_ended_is_refused_naming_end_at(service: JobService) -> None:
    ended = spec(CronTrigger(expr="* * * * *"), end_at=NOW - timedelta(days=1))
    with pytest.raises(InvalidInput) as caught:
        await service.create(ended)
    assert caught.value.field == "schedule.end_at"
    assert "never fires after now" in caught.value.message


async def test_bad_cron_is_refused_naming_the_field(service: JobService) -> None:
    with pytest.raises(InvalidInput) as caught:
        await service.create(spec(CronTrigger(expr="0 25 * * *")))
    assert caught.value.field == "schedule.cron"


@pytest.mark.parametrize(
    ("target", "field"),
    [
        (WebhookTarget(url="ftp://example.com"), "target.url"),
        (WebhookTarget(url="https://example.com", method="TRACE"), "target.method"),
        (WebhookTarget(url="https://example.com", timeout_s=301), "target.timeout"),
    ],
)
async def test_bad_targets_are_refused(
    service: JobService, target: WebhookTarget, field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await service.create(replace(spec(AtTrigger(at=NOW)), target=target))
    assert caught.value.field == field


async def test_ids_list_in_creation_order(service: JobService) -> None:
    created = [await service.create(spec(AtTrigger(at=NOW))) for _ in range(20)]
    listed = await service.list(JobQuery(limit=100))
    assert [j.id for j in listed] == [j.id for j in created]


async def test_pause_keeps_next_run_and_resume_skips_what_was_missed(
    service: JobService, clock: ManualClock
) -> None:
    job = await service.create(spec(EveryTrigger(interval_ms=60_000, anchor=NOW)))
    paused = await service.pause(job.id)
    assert (paused.state, paused.next_run_at) == (JobState.PAUSED, job.next_run_at)
    assert await service.pause(job.id) == paused  # idempotent
    clock.advance(timedelta(minutes=10, seconds=30))
    resumed = await service.resume(job.id)
    assert resumed.state is JobState.SCHEDULED
    assert resumed.next_run_at == NOW + timedelta(minutes=11)
    assert resumed.updated_at == clock.now()


async def test_resume_past_the_end_completes_the_job(
    service: JobService, clock: ManualClock
) -> None:
    job = await service.create(spec(CronTrigger(expr="0 * * * *"), end_at=NOW + timedelta(hours=2)))
    await service.pause(job.id)
    clock.advance(timedelta(hours=3))
    resumed = await service.resume(job.id)
    assert (resumed.state, resumed.next_run_at) == (JobState.COMPLETED, None)


async def _complete(store: MemoryStore, job_id: str) -> None:
    job = await store.get_job(job_id)
    await store.update_job(replace(job, state=JobState.COMPLETED, next_run_at=None))


async def test_completed_job_cannot_be_paused_or_resumed(
    service: JobService, store: MemoryStore
) -> None:
    job = await service.create(spec(AtTrigger(at=NOW + timedelta(hours=1))))
    await _complete(store, job.id)
    with pytest.raises(Conflict):
        await service.pause(job.id)
    with pytest.raises(Conflict):
        await service.resume(job.id)


async def test_update_changes_only_given_fields(service: JobService, clock: ManualClock) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    clock.advance(timedelta(hours=1))
    renamed = await service.update(job.id, JobPatch(name="renamed"))
    assert renamed.name == "renamed"
    assert (renamed.schedule, renamed.target) == (job.schedule, job.target)
    assert renamed.next_run_at == job.next_run_at
    assert renamed.updated_at == clock.now()


async def test_update_of_the_schedule_recomputes_from_now_and_rearms(
    service: JobService, store: MemoryStore, clock: ManualClock
) -> None:
    job = await service.create(spec(AtTrigger(at=NOW + timedelta(minutes=5))))
    await _complete(store, job.id)
    clock.advance(timedelta(hours=1))
    new = Schedule(trigger=EveryTrigger(interval_ms=10_000, anchor=ANCHOR_AT_ACCEPT))
    edited = await service.update(job.id, JobPatch(schedule=new))
    assert edited.state is JobState.SCHEDULED
    assert edited.next_run_at == clock.now()


async def test_update_revalidates(service: JobService) -> None:
    job = await service.create(spec(AtTrigger(at=NOW + timedelta(minutes=5))))
    with pytest.raises(InvalidInput) as caught:
        await service.update(job.id, JobPatch(target=WebhookTarget(url="file:///etc/passwd")))
    assert caught.value.field == "target.url"
    assert (await service.get(job.id)).target == TARGET


async def test_trigger_records_a_pending_manual_run_now(service: JobService) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    run = await service.trigger(job.id)
    assert (run.origin, run.status, run.scheduled_for) == (RunOrigin.MANUAL, RunStatus.PENDING, NOW)
    assert await service.runs(job.id) == [run]


async def test_delete_then_everything_is_not_found(service: JobService) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    await service.delete(job.id)
    for call in (service.get, service.pause, service.resume, service.trigger, service.delete):
        with pytest.raises(NotFound):
            await call(job.id)


async def test_an_edit_racing_a_claim_is_reapplied_and_keeps_the_claim() -> None:
    from tickwork.domain.jobs import EveryTrigger, Job, Schedule, WebhookTarget
    from tickwork.jobs import JobService, JobSpec
    from tickwork.store.base import ClaimPlan
    from tickwork.store.memory import MemoryStore

    class ClaimsDuringEdit(MemoryStore):
        """Lets a scheduler claim the job between the service's read and its write, once."""

        raced = False

        async def update_job(self, job: Job) -> Job:
            if not self.raced:
                self.raced = True
                current = await self.get_job(job.id)
                assert current.next_run_at is not None
                plan = ClaimPlan(
                    job_id=job.id,
                    expected_fence=current.fence_token,
                    expected_next_run_at=current.next_run_at,
                    scheduled_for=current.next_run_at,
                    coalesced=0,
                    new_next_run_at=current.next_run_at + timedelta(seconds=30),
                )
                await self.claim(
                    [plan], owner="sched", lease_until=current.next_run_at, now=current.next_run_at
                )
            return await super().update_job(job)

    start = datetime(2026, 1, 1, tzinfo=UTC)
    store = ClaimsDuringEdit()
    service = JobService(store, ManualClock(start))
    job = await service.create(
        JobSpec(
            name="racy",
            schedule=Schedule(trigger=EveryTrigger(interval_ms=30_000, anchor=start)),
            target=WebhookTarget(url="http://127.0.0.1:9/"),
        )
    )
    paused = await service.pause(job.id)
    assert store.raced
    assert paused.state is JobState.PAUSED
    assert paused.fence_token == 1  # the claim's fence survived the edit
    assert paused.next_run_at == start + timedelta(seconds=30)  # and so did its advance
