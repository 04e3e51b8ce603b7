"""Jitter and flexible windows end to end (ADR 0022): jobs created through the job service, the
real SchedulerService handing its fires off, and a worker leasing from the table queue, on
every store, with a manual clock.

- jitter: every occurrence runs once, under its nominal instant, at the instant drawn from it
  (the same one any scheduler computes), never leased before that instant, never a misfire;
  and a herd at one instant is spread over the jitter.
- window: a herd at one instant is placed flat over the window's seconds, both where the job
  service places the first occurrence and where the scheduler places the next ones."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import CronTrigger, Schedule, WebhookTarget
from tickwork.domain.runs import RunOutcome, RunStatus
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.services.jobs import JobService, JobSpec
from tickwork.store.base import ScheduleStore
from tickwork.store.memory import MemoryStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore
from tickwork.timing.jitter import planned_instant

START = datetime(2026, 3, 2, 0, 0, 30, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
TARGET = WebhookTarget(url="http://127.0.0.1:9/")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> ScheduleStore:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "shift.db")
    return PostgresStore(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def store(new_store: ScheduleStore) -> AsyncIterator[ScheduleStore]:
    await new_store.open()
    try:
        yield new_store
    finally:
        await new_store.close()


class World:
    """A scheduler handing its fires off (look-ahead 200 ms, as deployed) and a worker."""

    def __init__(self, store: ScheduleStore, clock: ManualClock) -> None:
        self.store, self.clock = store, clock
        config = SchedulerConfig(node_id="s")
        self.scheduler = SchedulerService(store, clock, config, dispatch=None)
        self.leased_at: dict[int, datetime] = {}

    async def work(self) -> None:
        now = self.clock.now()
        fires = await self.store.lease_runs(
            now=now, owner="w", lease_until=now + MINUTE, limit=1000
        )
        for fire in fires:
            self.leased_at[fire.run_id] = now
        outcomes = [
            RunOutcome(
                run_id=f.run_id,
                job_id=f.job_id,
                attempt=f.attempt,
                fence_token=f.fence_token,
                status=RunStatus.SUCCEEDED,
                started_at=now,
                finished_at=now,
                worker="w",
            )
            for f in fires
        ]
        if outcomes:
            await self.store.finish_runs(outcomes)

    async def run_until(self, end: datetime) -> None:
        """Tick 200 ms before each due instant (the look-ahead), then work at each instant a
        run becomes leasable, up to `end`."""
        while (due := await self.store.next_due_at()) is not None and due <= end:
            self.clock.set(max(due - timedelta(milliseconds=200), self.clock.now()))
            await self.scheduler.run_once()
            await self.work()  # what is leasable now: nothing planned later than now
            self.clock.set(max(due, self.clock.now()))
            await self.work()
        self.clock.set(max(end, self.clock.now()))
        await self.work()


async def create(store: ScheduleStore, clock: ManualClock, schedule: Schedule, n: int) -> list[str]:
    jobs = JobService(store, clock)
    made = [
        await jobs.create(JobSpec(name=f"j{i}", schedule=schedule, target=TARGET)) for i in range(n)
    ]
    return [job.id for job in made]


async def test_jittered_occurrences_run_once_at_their_drawn_instant_never_early(
    store: ScheduleStore,
) -> None:
    clock = ManualClock(START)
    schedule = Schedule(trigger=CronTrigger(expr="* * * * *"), jitter_ms=30_000)
    ids = await create(store, clock, schedule, 40)
    world = World(store, clock)
    end = START + 3 * MINUTE
    await world.run_until(end)

    first = datetime(2026, 3, 2, 0, 1, tzinfo=UTC)
    nominals = [first, first + MINUTE, first + 2 * MINUTE]
    delays = []
    for job_id in ids:
        runs = sorted(await store.list_runs(job_id), key=lambda r: r.scheduled_for)
        expected = [
            n
            for n in nominals
            if planned_instant(job_id, n, 30_000, next_nominal=n + MINUTE) <= end
        ]
        assert [r.scheduled_for for r in runs] == expected  # each once, under its nominal
        for run in runs:
            drawn = planned_instant(
                job_id, run.scheduled_for, 30_000, next_nominal=run.scheduled_for + MINUTE
            )
            assert (run.planned_for or run.scheduled_for) == drawn
            assert run.coalesced == 0
            assert run.status is RunStatus.SUCCEEDED
            assert world.leased_at[run.id] >= drawn  # never leased before its planned instant
            delays.append(drawn - run.scheduled_for)
    # 40 jobs at one instant spread over the 30 s jitter, not piled up.
    assert len({int(d.total_seconds()) for d in delays[:40]}) >= 15
    assert max(delays) <= timedelta(seconds=30)
    job = await store.get_job(ids[0])
    assert job.next_run_at is not None
    assert job.next_run_at > end


async def test_a_windowed_herd_is_placed_flat_at_creation_and_by_the_scheduler(
    store: ScheduleStore,
) -> None:
    clock = ManualClock(START)
    schedule = Schedule(trigger=CronTrigger(expr="* * * * *"), window_ms=10_000)
    ids = await create(store, clock, schedule, 110)

    def per_second(instants: list[datetime], minute: datetime) -> list[int]:
        counted = Counter(int((i - minute).total_seconds()) for i in instants)
        return [counted.get(k, 0) for k in range(10)]

    first = datetime(2026, 3, 2, 0, 1, tzinfo=UTC)
    created = [(await store.get_job(i)).next_run_at for i in ids]
    assert all(c is not None and first <= c < first + timedelta(seconds=10) for c in created)
    counts = per_second([c for c in created if c is not None], first)
    assert counts == [11] * 10  # [first, first + 10 s): 11 per second

    world = World(store, clock)
    await world.run_until(first + timedelta(seconds=11))  # every first occurrence runs
    placed = [(await store.get_job(i)).next_run_at for i in ids]
    counts = per_second([p for p in placed if p is not None], first + MINUTE)
    assert counts == [11] * 10
    for job_id in ids:
        [run] = await store.list_runs(job_id)
        assert run.scheduled_for == first
        assert run.planned_for is None or first <= run.planned_for < first + timedelta(seconds=10)
