"""The global fire ceiling in the scheduler (ADR 0025), against the in-memory store with an
injected clock: claims paced at the ceiling, in due order, every occurrence fired once, the
ceiling's lateness recorded as throttling and never folded by the misfire policy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from tickwork import metrics
from tickwork.clock import ManualClock, SystemClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.base import DueJob
from tickwork.store.memory import MemoryStore
from tickwork.timing.ledger import Outcome, merge_ledger

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)
S = timedelta(seconds=1)


def job(n: int, next_run_at: datetime, *, every: timedelta = 60 * S) -> Job:
    anchor = next_run_at - 3600 * S  # on the schedule's grid
    schedule = Schedule(trigger=EveryTrigger(interval_ms=every // MS, anchor=anchor))
    return Job(
        id=f"{n:032x}",
        name=f"j{n}",
        schedule=schedule,
        target=WebhookTarget(url="http://127.0.0.1:9/"),
        state=JobState.SCHEDULED,
        next_run_at=next_run_at,
        created_at=T0 - 3600 * S,
        updated_at=T0 - 3600 * S,
    )


class Collector:
    def __init__(self, clock: ManualClock | SystemClock) -> None:
        self.clock = clock
        self.fires: list[tuple[float, Fire]] = []  # (monotonic s of the claim, fire)
        self.expected = 0
        self.all_in = asyncio.Event()  # set once `expected` fires came

    def __call__(self, fires: Sequence[Fire]) -> None:
        self.fires.extend((self.clock.monotonic_s(), f) for f in fires)
        if self.expected and len(self.fires) >= self.expected:
            self.all_in.set()


async def drain(service: SchedulerService, clock: ManualClock, *, ticks: int = 1000) -> int:
    """Tick as `run()` would, moving the clock by the pace's wait while throttled; returns how
    many ticks it took until one left nothing due behind."""
    for tick in range(1, ticks + 1):
        result = await service.run_once()
        if not result.throttled and not result.full_batch:
            return tick
        if result.throttled:
            wait = service.pace_wait_s()
            assert wait > 0  # a throttled scheduler sleeps: no busy loop
            clock.advance(timedelta(seconds=wait))
    raise AssertionError("never drained")


async def test_fifty_due_jobs_under_a_ceiling_of_ten_go_out_paced_in_order_none_coalesced() -> None:
    store = MemoryStore()
    jobs = [await store.create_job(job(n, T0 + n * MS)) for n in range(50)]
    clock = ManualClock(T0 + 50 * MS)
    sink = Collector(clock)
    config = SchedulerConfig(node_id="n1", fire_ceiling=10.0)
    service = SchedulerService(store, clock, config, dispatch=sink)
    throttled_before = metrics.THROTTLED_FIRES._value.get()

    await drain(service, clock)

    # Every occurrence fired once, in scheduled order.
    assert [f.job_id for _, f in sink.fires] == [j.id for j in jobs]
    assert all(f.scheduled_for == j.next_run_at for (_, f), j in zip(sink.fires, jobs, strict=True))
    # Paced: at most the burst (200 ms of 10/s: 2) plus 10/s since the first claim.
    start = sink.fires[0][0]
    for count, (at, _) in enumerate(sink.fires, start=1):
        assert count <= 2 + 10 * (at - start) + 1e-6
    assert sink.fires[-1][0] - start == pytest.approx(4.8, abs=0.11)  # 48 after the burst
    # None coalesced or skipped although most were claimed past their 1 s misfire grace.
    runs = {j.id: (await store.list_runs(j.id))[0] for j in jobs}
    assert all(r.coalesced == 0 for r in runs.values())
    late = [r for r in runs.values() if r.created_at - r.scheduled_for > S]
    assert len(late) > 30
    for run in runs.values():
        lateness_ms = (run.created_at - run.scheduled_for) // MS
        if run.throttled_ms is not None:
            assert 0 < run.throttled_ms <= lateness_ms
    # Their lateness since the throttling began (the first tick, 50 ms after the first job).
    for run in late:
        assert run.throttled_ms is not None
        assert run.throttled_ms >= (run.created_at - run.scheduled_for) // MS - 50
    assert [await store.list_occurrences(j.id, T0, T0 + S, limit=9) for j in jobs] == [[]] * 50
    # The ledger shows them throttled, with their runs; and each job moved to its next.
    last = jobs[-1]
    entries = merge_ledger(
        await store.get_job(last.id), T0, T0 + S, runs=[runs[last.id]], ranges=[], limit=5
    )
    assert [(e.outcome, e.run_id) for e in entries] == [(Outcome.THROTTLED, runs[last.id].id)]
    after = [(await store.get_job(j.id)).next_run_at for j in jobs]
    assert after == [j.next_run_at + 60 * S for j in jobs if j.next_run_at is not None]
    throttled = sum(r.throttled_ms is not None for r in runs.values())
    assert metrics.THROTTLED_FIRES._value.get() - throttled_before == throttled
    assert metrics.CEILING_SHARE._value.get() == 10.0


async def test_the_last_jobs_a_throttled_scheduler_catches_up_with_are_throttled_too() -> None:
    """At 100/s a tick claims 5 (50 ms of tokens); of 223 jobs the last tick finds 3, fewer
    than it could claim: it catches up there, and those 3 waited for the ceiling as well."""
    store = MemoryStore()
    jobs = [await store.create_job(job(n, T0)) for n in range(223)]
    clock = ManualClock(T0)
    service = SchedulerService(
        store, clock, SchedulerConfig(node_id="n1", fire_ceiling=100.0), dispatch=Collector(clock)
    )
    await drain(service, clock)
    runs = [(await store.list_runs(j.id))[0] for j in jobs]
    assert runs[-1].created_at - T0 >= 2 * S
    assert all(r.throttled_ms is not None for r in runs if r.created_at - T0 > S)
    assert all(r.coalesced == 0 for r in runs)


async def test_an_interval_job_behind_the_ceiling_fires_each_occurrence_not_a_coalesced_one() -> (
    None
):
    """A job every 100 ms behind a ceiling of 5/s: the ceiling makes it fall behind, and each
    occurrence still fires once, in order, late, instead of being folded by coalesce."""
    store = MemoryStore()
    every = await store.create_job(job(1, T0, every=100 * MS))
    clock = ManualClock(T0)
    sink = Collector(clock)
    service = SchedulerService(
        store, clock, SchedulerConfig(node_id="n1", fire_ceiling=5.0), dispatch=sink
    )
    for _ in range(40):
        await service.run_once()
        clock.advance(timedelta(seconds=max(service.pace_wait_s(), 0.05)))
    instants = [f.scheduled_for for _, f in sink.fires]
    assert instants == [T0 + n * 100 * MS for n in range(len(instants))]  # no gap, no repeat
    runs = await store.list_runs(every.id, limit=100)
    assert all(r.coalesced == 0 for r in runs)
    assert max(r.throttled_ms or 0 for r in runs) > 1000  # well past its grace, not a miss


async def test_a_downtime_misfire_keeps_its_policy_under_the_ceiling() -> None:
    """Jobs already past their grace when the scheduler started (a downtime, not the ceiling)
    are coalesced by their policy, even those the ceiling then delays further."""
    store = MemoryStore()
    jobs = [await store.create_job(job(n, T0 - 10 * S, every=S)) for n in range(5)]
    clock = ManualClock(T0)
    sink = Collector(clock)
    service = SchedulerService(
        store, clock, SchedulerConfig(node_id="n1", fire_ceiling=10.0), dispatch=sink
    )
    await drain(service, clock)
    runs = [(await store.list_runs(j.id))[0] for j in jobs]
    assert all(r.coalesced >= 10 for r in runs)  # folded by coalesce, as without a ceiling
    assert all(r.throttled_ms is None for r in runs)


async def test_without_a_ceiling_nothing_is_paced_or_recorded() -> None:
    store = MemoryStore()
    jobs = [await store.create_job(job(n, T0)) for n in range(50)]
    clock = ManualClock(T0 + 5 * S)
    sink = Collector(clock)
    service = SchedulerService(store, clock, SchedulerConfig(node_id="n1"), dispatch=sink)
    result = await service.run_once()
    assert (result.claimed, result.throttled) == (50, False)
    runs = [(await store.list_runs(j.id))[0] for j in jobs]
    assert all(r.throttled_ms is None and r.coalesced == 0 for r in runs)


def test_a_ceiling_must_be_positive() -> None:
    with pytest.raises(ValueError, match="fire_ceiling"):
        SchedulerConfig(node_id="n", fire_ceiling=0.0)


class CountingStore(MemoryStore):
    """The memory store, counting the due scans (how many ticks the loop made)."""

    scans = 0

    async def due_jobs(
        self,
        until: datetime,
        limit: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        self.scans += 1
        return await super().due_jobs(until, limit, not_before=not_before, partitions=partitions)


async def test_the_loop_sleeps_for_tokens_instead_of_spinning() -> None:
    """`run()` under a ceiling of 100/s with 60 due jobs: about 0.4 s of claims (20 at once,
    then 5 every 50 ms), a dozen scans, not thousands."""
    store = CountingStore()
    clock = SystemClock()
    now = clock.now()
    for n in range(60):
        await store.create_job(job(n, now - S))
    sink = Collector(clock)
    sink.expected = 60
    service = SchedulerService(
        store, clock, SchedulerConfig(node_id="n1", fire_ceiling=100.0), dispatch=sink
    )
    stop = asyncio.Event()
    started = time.monotonic()
    loop = asyncio.create_task(service.run(stop))
    try:
        await asyncio.wait_for(sink.all_in.wait(), 10)
    finally:
        stop.set()
        await loop
    took = time.monotonic() - started
    assert 0.35 <= took < 3.0
    assert store.scans < 40
    assert len({f.job_id for _, f in sink.fires}) == 60
