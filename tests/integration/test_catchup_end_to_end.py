"""misfire fire_all after a downtime, end to end: the real SchedulerService, the paced lane
and a worker leasing from the table queue, on SQLite (and PostgreSQL), with a manual clock.

A job every five minutes, catchup_window PT1H, fires on time for half an hour; the scheduler
is down for three hours; the new one fires the latest occurrence on time and creates one
catch-up; the lane replays the missed occurrences of the last hour, each once, as `catchup`
runs, and none older; the ledger says why for each of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.backfills import BackfillKind, BackfillState
from tickwork.domain.jobs import CronTrigger, MisfirePolicy, Schedule, WebhookTarget
from tickwork.domain.runs import Fire, RunOrigin, RunOutcome, RunStatus
from tickwork.scheduler.backfill_lane import BackfillLane, LaneConfig
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.services.jobs import JobService, JobSpec
from tickwork.services.occurrences import OccurrenceService
from tickwork.store.base import ScheduleStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore
from tickwork.timing.ledger import Outcome

START = datetime(2026, 3, 2, 0, 0, 30, tzinfo=UTC)
FIVE = timedelta(minutes=5)
ROUND = timedelta(milliseconds=200)  # the lane's interval
SCHEDULE = Schedule(
    trigger=CronTrigger(expr="*/5 * * * *"),
    misfire=MisfirePolicy.FIRE_ALL,
    catchup_window_ms=3_600_000,  # PT1H
)


def at(hh: int, mm: int) -> datetime:
    return datetime(2026, 3, 2, hh, mm, tzinfo=UTC)


def every_five(first: datetime, last: datetime) -> list[datetime]:
    return [first + n * FIVE for n in range((last - first) // FIVE + 1)]


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> ScheduleStore:
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "catchup.db")
    return PostgresStore(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def store(new_store: ScheduleStore) -> AsyncIterator[ScheduleStore]:
    await new_store.open()
    try:
        yield new_store
    finally:
        await new_store.close()


class World:
    """A scheduler (handing its fires off), the lane and a worker, on one manual clock."""

    def __init__(self, store: ScheduleStore, clock: ManualClock) -> None:
        self.store, self.clock = store, clock
        self.leased: list[Fire] = []
        self.restart()

    def restart(self) -> None:  # nothing carried over but the store
        config = SchedulerConfig(node_id="s", lookahead_ms=0)
        self.scheduler = SchedulerService(self.store, self.clock, config, dispatch=None)
        self.lane = BackfillLane(self.store, self.clock, LaneConfig())

    async def work(self) -> None:
        """Lease every run that is free now and finish it, as a worker does."""
        now = self.clock.now()
        fires = await self.store.lease_runs(
            now=now, owner="w", lease_until=now + timedelta(minutes=1), limit=1000
        )
        self.leased += fires
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
        """Tick at each due instant up to `end`, the lane and the worker after each tick."""
        while (due := await self.store.next_due_at()) is not None and due <= end:
            self.clock.set(max(due, self.clock.now()))
            await self.scheduler.run_once()
            await self.lane.run_once()
            await self.work()
        self.clock.set(max(end, self.clock.now()))


async def test_after_downtime_the_last_hour_is_caught_up_once_paced_and_nothing_older(
    store: ScheduleStore,
) -> None:
    clock = ManualClock(START)
    jobs = JobService(store, clock)
    job = await jobs.create(
        JobSpec(name="five", schedule=SCHEDULE, target=WebhookTarget(url="http://127.0.0.1:9/"))
    )
    world = World(store, clock)
    await world.run_until(at(0, 31))  # 00:05 .. 00:30 on time
    clock.set(at(3, 32) + timedelta(seconds=10))  # down three hours
    world.restart()

    down_at = clock.now()
    await world.scheduler.run_once()  # finds the job late: 03:30 fires, one catch-up
    [catchup] = await store.list_backfills(job.id)
    assert (catchup.kind, catchup.total) == (BackfillKind.CATCHUP, 11)  # 02:35 .. 03:25
    assert (catchup.from_at, catchup.to_at) == (at(2, 35), at(3, 25) + timedelta(microseconds=1))

    # Before the lane runs, the ledger says what will happen and why.
    ledger = OccurrenceService(store, clock)
    pending = await ledger.explain(job, at(2, 40))
    assert pending.entry is not None
    assert pending.entry.outcome is Outcome.SCHEDULED
    assert f"catch-up {catchup.id}" in pending.entry.reason
    assert f"catch-up {catchup.id} will fire it" in pending.summary
    old = await ledger.explain(job, at(1, 0))
    assert old.entry is not None
    assert old.entry.outcome is Outcome.SKIPPED_MISFIRE
    assert "older than catchup_window (PT1H)" in old.entry.reason
    assert "older than catchup_window (PT1H)" in old.summary

    for _ in range(50):  # 10 s of lane rounds, at most; the catch-up needs well under one
        clock.advance(ROUND)
        await world.lane.run_once()
        await world.work()
        if (await store.get_backfill(catchup.id)).state is BackfillState.COMPLETED:
            break
    assert (await store.get_backfill(catchup.id)).done == 11
    await world.run_until(at(3, 36))  # 03:35 on time, as usual

    runs = await store.list_runs(job.id, limit=1000)
    by_origin: dict[RunOrigin, list[datetime]] = {}
    for run in sorted(runs, key=lambda r: r.id):
        by_origin.setdefault(run.origin, []).append(run.scheduled_for)
    assert by_origin[RunOrigin.SCHEDULE] == [*every_five(at(0, 5), at(0, 30)), at(3, 30), at(3, 35)]
    assert by_origin[RunOrigin.CATCHUP] == every_five(at(2, 35), at(3, 25))  # in order, once
    assert set(by_origin) == {RunOrigin.SCHEDULE, RunOrigin.CATCHUP}
    # Every run ran once; the catch-up was not enqueued before the scheduler found the job.
    assert Counter(f.key for f in world.leased) == Counter(r.key for r in runs)
    assert all(r.status is RunStatus.SUCCEEDED for r in runs)
    caught_up = [r for r in runs if r.origin is RunOrigin.CATCHUP]
    assert all(r.created_at >= down_at for r in caught_up)
    # Paced at the default 50/s: ten in the first 200 ms round, the eleventh in the next.
    made = Counter(r.created_at for r in caught_up)
    assert sorted(made.values()) == [1, 10]
    assert (await store.get_job(job.id)).fired_count == 8  # the catch-up runs do not count

    # The ledger: the missed occurrences of the last hour fired late by the catch-up, the 24
    # before them skipped as older than the window, nothing unknown.
    entries = await ledger.window(job, at(0, 0), at(3, 35), 1000)
    assert [e.outcome for e in entries if e.outcome is Outcome.UNKNOWN] == []
    skipped = [e for e in entries if e.outcome is Outcome.SKIPPED_MISFIRE]
    assert [(e.at, e.last, e.count) for e in skipped] == [(at(0, 35), at(2, 30), 24)]
    caught = [e.at for e in entries if e.origin is RunOrigin.CATCHUP]
    assert caught == every_five(at(2, 35), at(3, 25))
    assert all(e.outcome is Outcome.FIRED for e in entries if e.origin is RunOrigin.CATCHUP)
    fired = await ledger.explain(job, at(3, 0))
    assert "fired late by a catch-up" in fired.summary


async def test_a_resume_with_catch_up_goes_through_the_same_catch_up(
    store: ScheduleStore,
) -> None:
    clock = ManualClock(START)
    jobs = JobService(store, clock)
    job = await jobs.create(
        JobSpec(name="five", schedule=SCHEDULE, target=WebhookTarget(url="http://127.0.0.1:9/"))
    )
    world = World(store, clock)
    await world.run_until(at(0, 11))  # 00:05, 00:10
    await jobs.pause(job.id)
    clock.set(at(2, 2))
    await jobs.resume(job.id, catch_up=True)
    await world.scheduler.run_once()  # found late: 02:00 fires, 01:05 .. 01:55 caught up
    [catchup] = await store.list_backfills(job.id)
    assert (catchup.from_at, catchup.total) == (at(1, 5), 11)
    skipped = await store.list_occurrences(job.id, at(0, 0), at(2, 0), limit=100)
    assert [(s.first, s.last, s.count) for s in skipped] == [(at(0, 15), at(1, 0), 10)]
    assert (await store.get_job(job.id)).next_run_at == at(2, 5)
