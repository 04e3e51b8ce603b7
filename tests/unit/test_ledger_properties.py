"""The occurrence ledger's promise, as a property: drive the real SchedulerService and
JobService against MemoryStore and SqliteStore with a manual clock, through random schedules,
misfire policies, scheduler downtime (stopped while time passes, then a new instance), slow
ticks, pauses and resumes; then every occurrence the schedule implied up to the job's
next_run_at has exactly one record (its run, or one ledger range holding it), nothing else is
recorded, and the merged view lists no occurrence as `unknown`.

misfire fire_all hands the missed occurrences within its catchup_window to a catch-up backfill
(the paced lane runs beside the scheduler here): each of them is recorded once, by its
`catchup` run once the lane enqueued it, or by the running catch-up until then."""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork.clock import ManualClock
from tickwork.domain.backfills import BackfillKind, BackfillState
from tickwork.domain.jobs import (
    CronTrigger,
    EveryTrigger,
    JobState,
    MisfirePolicy,
    Schedule,
    WebhookTarget,
)
from tickwork.domain.runs import Fire, RunOrigin
from tickwork.scheduler.backfill_lane import BackfillLane, LaneConfig
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.services.jobs import JobService, JobSpec
from tickwork.services.rules import ANCHOR_AT_ACCEPT
from tickwork.store.base import ScheduleStore
from tickwork.store.memory import MemoryStore
from tickwork.store.sqlite import SqliteStore
from tickwork.timing.ledger import Outcome, merge_ledger, occurrences_of

# A fraction of a second past the minute, so no cron occurrence falls exactly on the creation
# instant; an hour before Berlin springs forward (01:00 UTC), so cron jobs there cross it.
START = datetime(2026, 3, 29, 0, 10, 17, 250_000, tzinfo=UTC)
TARGET = WebhookTarget(url="http://127.0.0.1:9/hook")
FAR = timedelta(days=2)
BIG = 100_000


@dataclass(frozen=True)
class Run:  # the scheduler runs for `seconds`, each tick `lag_ms` after the job comes due
    seconds: int
    lag_ms: int


@dataclass(frozen=True)
class Down:  # the scheduler is down for `seconds`, then a new instance starts
    seconds: int


@dataclass(frozen=True)
class Pause:
    pass


@dataclass(frozen=True)
class Resume:
    catch_up: bool


Step = Run | Down | Pause | Resume

triggers = st.one_of(
    st.builds(
        EveryTrigger,
        interval_ms=st.sampled_from([1000, 7000, 60_000]),
        anchor=st.just(ANCHOR_AT_ACCEPT),
    ),
    st.builds(
        CronTrigger,
        expr=st.sampled_from(["* * * * *", "*/5 * * * *", "*/2 1-3 * * *"]),
        timezone=st.sampled_from(["UTC", "Europe/Berlin"]),
    ),
)
schedules = st.builds(
    lambda trigger, misfire, grace_ms, end_s, max_runs: Schedule(
        trigger=trigger,
        misfire=misfire,
        misfire_grace_ms=grace_ms,
        end_at=None if end_s is None else START + timedelta(seconds=end_s),
        max_runs=max_runs,
    ),
    triggers,
    st.sampled_from(list(MisfirePolicy)),
    st.sampled_from([0, 1000, 30_000]),
    st.one_of(st.none(), st.integers(3 * 3600, 6 * 3600)),
    st.one_of(st.none(), st.integers(1, 30)),
)
steps = st.lists(
    st.one_of(
        st.builds(Run, st.integers(1, 900), st.sampled_from([0, 300, 1500, 40_000])),
        st.builds(Down, st.integers(1, 3600)),
        st.builds(Pause),
        st.builds(Resume, st.booleans()),
    ),
    min_size=1,
    max_size=8,
)


async def _drive(
    store: ScheduleStore, schedule: Schedule, plan: list[Step], *, hand_off: bool
) -> None:
    """Run `plan`; the scheduler fires in process, or hands its fires off (`hand_off`: the
    other claim statement)."""
    clock = ManualClock(START)
    jobs = JobService(store, clock)
    job = await jobs.create(JobSpec(name="p", schedule=schedule, target=TARGET))

    def dispatch(fires: object) -> None:
        assert all(isinstance(f, Fire) for f in fires)  # type: ignore[attr-defined]

    def new_scheduler() -> SchedulerService:
        executor = None if hand_off else dispatch
        return SchedulerService(store, clock, SchedulerConfig(node_id="n"), dispatch=executor)

    lane = BackfillLane(store, clock, LaneConfig())
    scheduler = new_scheduler()
    for step in plan:
        if isinstance(step, Run):
            end = clock.now() + timedelta(seconds=step.seconds)
            for _ in range(10_000):
                due = await store.next_due_at()
                if due is None or due > end:
                    break
                clock.set(max(due + timedelta(milliseconds=step.lag_ms), clock.now()))
                await scheduler.run_once()
                await lane.run_once()
            clock.set(max(end, clock.now()))
        elif isinstance(step, Down):
            clock.advance(timedelta(seconds=step.seconds))
            scheduler = new_scheduler()  # a restart: nothing carried over but the store
            lane = BackfillLane(store, clock, LaneConfig())
        elif isinstance(step, Pause):
            if (await store.get_job(job.id)).state is JobState.SCHEDULED:
                await jobs.pause(job.id, "maintenance")
        elif (await store.get_job(job.id)).state is JobState.PAUSED:
            await jobs.resume(job.id, catch_up=step.catch_up)
    await _check(store, job.id, clock.now())


async def _check(store: ScheduleStore, job_id: str, now: datetime) -> None:
    job = await store.get_job(job_id)
    runs = await store.runs_scheduled_between(job_id, START - FAR, now + FAR, limit=BIG)
    ranges = await store.list_occurrences(job_id, START - FAR, now + FAR, limit=BIG)
    backfills = await store.list_backfills(job_id, limit=BIG)
    recorded: Counter[datetime] = Counter()
    for run in runs:
        assert run.origin in (RunOrigin.SCHEDULE, RunOrigin.CATCHUP)
        recorded[run.scheduled_for] += 1
    for backfill in backfills:  # only fire_all makes them; what the lane has yet to enqueue
        assert backfill.kind is BackfillKind.CATCHUP
        assert job.schedule.misfire is MisfirePolicy.FIRE_ALL
        if backfill.state is BackfillState.RUNNING:
            after = backfill.cursor_at or backfill.from_at - timedelta(microseconds=1)
            last = backfill.to_at - timedelta(microseconds=1)
            recorded.update(t for t in occurrences_of(job.schedule, after, last) if t > after)
    for span in ranges:
        inside = occurrences_of(job.schedule, span.first, span.last)
        assert len(inside) == span.count, span
        assert (inside[0], inside[-1]) == (span.first, span.last), span
        recorded.update(inside)
    # Up to the job's next occurrence: everything it passed, claimed ahead or not; a job that
    # completed at max_runs implies nothing after its last fire.
    horizon = now + FAR if job.state is JobState.COMPLETED else job.next_run_at
    max_runs = job.schedule.max_runs
    if max_runs is not None and job.fired_count >= max_runs:
        assert job.state is JobState.COMPLETED
        assert job.last_fired_at is not None
        horizon = job.last_fired_at + timedelta(microseconds=1)
    assert horizon is not None
    implied = occurrences_of(job.schedule, job.created_at, horizon - timedelta(microseconds=1))
    doubled = {t: n for t, n in recorded.items() if n > 1}
    assert not doubled, f"recorded twice: {doubled}"
    assert set(recorded) == set(implied), (
        f"missing {sorted(set(implied) - set(recorded))[:5]}, "
        f"extra {sorted(set(recorded) - set(implied))[:5]}"
    )
    merged = merge_ledger(job, START, now, runs=runs, ranges=ranges, limit=BIG, backfills=backfills)
    assert [e for e in merged if e.outcome is Outcome.UNKNOWN] == []
    assert sum(e.count for e in merged if e.at <= now) >= len([t for t in implied if t <= now])


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(schedule=schedules, plan=steps, hand_off=st.booleans())
def test_every_implied_occurrence_has_one_record_in_memory(
    schedule: Schedule, plan: list[Step], hand_off: bool
) -> None:
    store = MemoryStore(clock=ManualClock(START))
    asyncio.run(_drive(store, schedule, plan, hand_off=hand_off))


@settings(SETTINGS, max_examples=25)
@given(schedule=schedules, plan=steps, hand_off=st.booleans())
def test_every_implied_occurrence_has_one_record_in_sqlite(
    schedule: Schedule, plan: list[Step], hand_off: bool
) -> None:
    async def on_sqlite() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = SqliteStore(Path(tmp) / "ledger.db")
            await store.open()
            try:
                await _drive(store, schedule, plan, hand_off=hand_off)
            finally:
                await store.close()

    asyncio.run(on_sqlite())
