"""Issue 20's job-level fixes, through JobService on MemoryStore with a manual clock: the pause
note, resume with catch-up, max_runs, an `every` schedule anchored at its start_at, and manual
triggers that never merge."""

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
    MisfirePolicy,
    Schedule,
    WebhookTarget,
)
from tickwork.errors import InvalidInput
from tickwork.scheduler.planning import plan_claim
from tickwork.services.jobs import JobService, JobSpec
from tickwork.services.rules import ANCHOR_AT_ACCEPT
from tickwork.store.memory import MemoryStore

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
TARGET = WebhookTarget(url="https://example.com/hook")
MINUTE = timedelta(minutes=1)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
async def store(clock: ManualClock) -> AsyncIterator[MemoryStore]:
    store = MemoryStore(clock=clock)
    await store.open()
    yield store
    await store.close()


@pytest.fixture
def service(store: MemoryStore, clock: ManualClock) -> JobService:
    return JobService(store, clock)


def every_minute(**options: object) -> JobSpec:
    schedule = Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=NOW), **options)  # type: ignore[arg-type]
    return JobSpec(name="minutely", schedule=schedule, target=TARGET)


async def test_the_pause_note_is_kept_shown_and_cleared_on_resume(
    service: JobService, clock: ManualClock
) -> None:
    job = await service.create(every_minute())
    paused = await service.pause(job.id, "waiting for the vendor's fix")
    assert (paused.pause_note, paused.paused_at) == ("waiting for the vendor's fix", NOW)
    assert (await service.get(job.id)).pause_note == "waiting for the vendor's fix"
    clock.advance(MINUTE)
    renoted = await service.pause(job.id, "vendor says Friday")
    # A second pause only replaces the note: the job has been paused since the first.
    assert (renoted.pause_note, renoted.paused_at) == ("vendor says Friday", NOW)
    resumed = await service.resume(job.id)
    assert (resumed.state, resumed.pause_note, resumed.paused_at) == (
        JobState.SCHEDULED,
        None,
        None,
    )


async def test_a_pause_note_over_the_limit_names_the_field(service: JobService) -> None:
    job = await service.create(every_minute())
    with pytest.raises(InvalidInput) as caught:
        await service.pause(job.id, "x" * 1001)
    assert caught.value.field == "note"
    assert (await service.get(job.id)).state is JobState.SCHEDULED


async def test_resume_from_now_skips_and_catch_up_starts_where_it_was_paused(
    service: JobService, clock: ManualClock
) -> None:
    first = await service.create(every_minute())
    second = await service.create(every_minute())
    clock.advance(timedelta(seconds=30))
    for job in (first, second):
        await service.pause(job.id)
    clock.advance(timedelta(minutes=10))
    from_now = await service.resume(first.id)
    caught_up = await service.resume(second.id, catch_up=True)
    assert from_now.next_run_at == NOW + 11 * MINUTE
    # No scheduler ran here, so 12:00 was never claimed either: catch-up starts with it.
    assert caught_up.next_run_at == NOW


async def test_every_without_an_anchor_is_anchored_at_its_start_at(service: JobService) -> None:
    start = NOW + timedelta(hours=3, seconds=7)
    schedule = Schedule(
        trigger=EveryTrigger(interval_ms=3_600_000, anchor=ANCHOR_AT_ACCEPT), start_at=start
    )
    job = await service.create(JobSpec(name="hourly", schedule=schedule, target=TARGET))
    assert job.next_run_at == start
    assert isinstance(job.schedule.trigger, EveryTrigger)
    assert job.schedule.trigger.anchor == start


async def test_max_runs_completes_the_job_with_its_last_scheduled_fire(
    service: JobService, store: MemoryStore, clock: ManualClock
) -> None:
    job = await service.create(every_minute(max_runs=2))
    await service.trigger(job.id)  # a manual run does not count
    fired = []
    for _ in range(3):
        due = await store.due_jobs(clock.now(), 10)
        if not due:
            break
        claimed = await store.claim(
            [plan_claim(d, clock.now()) for d in due],
            owner="t",
            lease_until=clock.now() + MINUTE,
            now=clock.now(),
        )
        fired += [f.scheduled_for for f in claimed]
        clock.advance(MINUTE)
    assert fired == [NOW, NOW + MINUTE]
    done = await service.get(job.id)
    assert (done.state, done.fired_count) == (JobState.COMPLETED, 2)


async def test_a_misfire_skip_does_not_count_towards_max_runs(clock: ManualClock) -> None:
    from tickwork.store.base import DueJob

    schedule = Schedule(
        trigger=EveryTrigger(interval_ms=60_000, anchor=NOW),
        misfire=MisfirePolicy.SKIP,
        max_runs=1,
    )
    due = DueJob(job_id="j", fence_token=0, next_run_at=NOW, schedule=schedule, fired_count=0)
    skipped = plan_claim(due, NOW + 10 * MINUTE)
    assert skipped.scheduled_for is None
    assert skipped.new_next_run_at is not None  # still armed: nothing fired yet
    fired = plan_claim(replace(due, next_run_at=skipped.new_next_run_at), skipped.new_next_run_at)
    assert (fired.scheduled_for, fired.new_next_run_at) == (skipped.new_next_run_at, None)


async def test_two_manual_triggers_in_the_same_millisecond_are_two_runs(
    service: JobService,
) -> None:
    job = await service.create(
        JobSpec(name="n", schedule=Schedule(trigger=CronTrigger(expr="0 2 * * *")), target=TARGET)
    )
    first = await service.trigger(job.id)
    second = await service.trigger(job.id)  # the manual clock has not moved
    assert first.id != second.id
    assert first.key != second.key
    assert first.scheduled_for == second.scheduled_for


async def test_a_resume_with_catch_up_records_nothing_in_the_ledger(
    service: JobService, store: MemoryStore, clock: ManualClock
) -> None:
    # A resume from now records what it passed over as `paused`; with catch-up the misfire
    # policy decides those occurrences later, so the resume itself records nothing.
    from_now, caught_up = await service.create(every_minute()), await service.create(every_minute())
    for job in (from_now, caught_up):
        await service.pause(job.id)
    clock.advance(timedelta(minutes=10, seconds=30))
    await service.resume(from_now.id)
    await service.resume(caught_up.id, catch_up=True)
    window = (NOW - MINUTE, NOW + 20 * MINUTE)
    [passed] = await store.list_occurrences(from_now.id, *window, limit=10)
    assert (passed.first, passed.last, passed.count) == (NOW, NOW + 10 * MINUTE, 11)
    assert await store.list_occurrences(caught_up.id, *window, limit=10) == []


async def test_a_one_shot_paused_past_its_instant_fires_once_at_resume(
    service: JobService, store: MemoryStore, clock: ManualClock
) -> None:
    # docs/api.md, resume: a one-shot whose instant passed while paused has not fired yet.
    at = NOW + MINUTE
    job = await service.create(
        JobSpec(name="once", schedule=Schedule(trigger=AtTrigger(at=at)), target=TARGET)
    )
    await service.pause(job.id)
    clock.advance(timedelta(hours=1))
    resumed = await service.resume(job.id)
    assert (resumed.state, resumed.next_run_at) == (JobState.SCHEDULED, at)
    [due] = await store.due_jobs(clock.now(), 10)
    plan = plan_claim(due, clock.now())
    [fire] = await store.claim([plan], owner="t", lease_until=clock.now(), now=clock.now())
    assert fire.scheduled_for == at
    assert (await service.get(job.id)).state is JobState.COMPLETED
    assert await store.due_jobs(clock.now() + timedelta(days=1), 10) == []
