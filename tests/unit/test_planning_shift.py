"""Planning a jittered or windowed job's claim (ADR 0022): the occurrence fires under its
nominal instant, lateness counts from the planned one, the compare-and-set names the stored
(planned) instant, and the next occurrence is planned in its turn; windows are placed against
the batch's load. Plus the range arithmetic of the scheduler's window load."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.jobs import CronTrigger, MisfirePolicy, Schedule
from tickwork.scheduler.planning import place_windows, plan_claim, window_ranges
from tickwork.scheduler.window_load import WindowLoad, merge_ranges, subtract_ranges
from tickwork.store.base import DueJob
from tickwork.store.memory import MemoryStore
from tickwork.timing.jitter import planned_instant
from tickwork.timing.window import LoadMap

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
JITTERED = Schedule(trigger=CronTrigger(expr="* * * * *"), jitter_ms=30_000)
WINDOWED = Schedule(trigger=CronTrigger(expr="* * * * *"), window_ms=10_000)


def planned(job_id: str, nominal: datetime) -> datetime:
    return planned_instant(job_id, nominal, 30_000, next_nominal=nominal + MINUTE)


def test_a_jittered_occurrence_fires_under_its_nominal_instant_at_its_planned_one() -> None:
    at = planned("j", T0)
    assert at > T0  # this id draws a delay, so the test tells the two instants apart
    plan = plan_claim(DueJob(job_id="j", fence_token=3, next_run_at=at, schedule=JITTERED), at)
    assert plan.scheduled_for == T0
    assert plan.expected_next_run_at == at
    assert plan.planned_for == at
    assert plan.new_next_run_at == planned("j", T0 + MINUTE)
    assert plan.coalesced == 0
    assert plan.plain


def test_lateness_counts_from_the_planned_instant_not_the_nominal_one() -> None:
    at = planned("j", T0)
    assert at - T0 > timedelta(seconds=2)  # well past the 1 s grace, measured from T0
    job = DueJob(job_id="j", fence_token=3, next_run_at=at, schedule=JITTERED)
    on_time = plan_claim(job, at + timedelta(milliseconds=900))
    assert (on_time.scheduled_for, on_time.coalesced, on_time.missed_first) == (T0, 0, None)
    late = plan_claim(job, T0 + 3 * MINUTE + timedelta(seconds=45))
    assert late.scheduled_for == T0 + 3 * MINUTE  # coalesce: the latest occurrence
    assert late.coalesced == 3
    assert late.missed_first == T0
    assert late.expected_next_run_at == at
    assert late.new_next_run_at == planned("j", T0 + 4 * MINUTE)


def test_skip_moves_a_jittered_job_to_its_next_planned_occurrence() -> None:
    schedule = Schedule(
        trigger=CronTrigger(expr="* * * * *"), jitter_ms=30_000, misfire=MisfirePolicy.SKIP
    )
    job = DueJob(job_id="j", fence_token=3, next_run_at=planned("j", T0), schedule=schedule)
    plan = plan_claim(job, T0 + 2 * MINUTE + timedelta(seconds=50))
    assert plan.scheduled_for is None
    assert plan.new_next_run_at == planned("j", T0 + 3 * MINUTE)


def test_a_window_is_left_nominal_by_plan_claim_and_placed_flat_by_place_windows() -> None:
    due = [
        DueJob(job_id=f"job-{n}", fence_token=1, next_run_at=T0, schedule=WINDOWED)
        for n in range(110)
    ]
    plans = [plan_claim(job, T0) for job in due]
    assert {plan.new_next_run_at for plan in plans} == {T0 + MINUTE}
    start = int((T0 + MINUTE).timestamp())
    assert window_ranges(plans, due) == [(start, start + 9)] * 110
    # Second 3 of the window is already busy: nothing more goes there.
    load = LoadMap({start + 3: 50})
    placed = place_windows(plans, due, load)
    seconds = [int(p.new_next_run_at.timestamp()) for p in placed if p.new_next_run_at]
    counts = [seconds.count(start + k) for k in range(10)]
    assert counts[3] == 0
    assert sum(counts) == 110
    assert max(counts) - min(c for k, c in enumerate(counts) if k != 3) <= 1
    assert all(
        T0 + MINUTE <= p.new_next_run_at < T0 + MINUTE + 10 * timedelta(seconds=1)
        for p in placed
        if p.new_next_run_at
    )


def test_place_windows_leaves_other_plans_alone() -> None:
    plain = DueJob(
        job_id="p",
        fence_token=1,
        next_run_at=T0,
        schedule=Schedule(trigger=CronTrigger(expr="* * * * *")),
    )
    plan = plan_claim(plain, T0)
    assert window_ranges([plan], [plain]) == []
    assert place_windows([plan], [plain], LoadMap()) == [plan]


@pytest.mark.parametrize(
    ("ranges", "merged"),
    [
        ([], []),
        ([(5, 9), (1, 3)], [(1, 3), (5, 9)]),
        ([(1, 3), (4, 6)], [(1, 6)]),  # adjacent seconds join
        ([(1, 10), (2, 3), (9, 12)], [(1, 12)]),
    ],
)
def test_merge_ranges(ranges: list[tuple[int, int]], merged: list[tuple[int, int]]) -> None:
    assert merge_ranges(ranges) == merged


@pytest.mark.parametrize(
    ("wanted", "have", "missing"),
    [
        ([(1, 10)], [], [(1, 10)]),
        ([(1, 10)], [(1, 10)], []),
        ([(1, 10)], [(3, 4)], [(1, 2), (5, 10)]),
        ([(1, 10)], [(0, 4), (8, 20)], [(5, 7)]),
        ([(1, 3), (20, 30)], [(2, 25)], [(1, 1), (26, 30)]),
    ],
)
def test_subtract_ranges(
    wanted: list[tuple[int, int]], have: list[tuple[int, int]], missing: list[tuple[int, int]]
) -> None:
    assert subtract_ranges(wanted, have) == missing


class CountingStore(MemoryStore):
    """The memory store, counting its planned_counts reads."""

    reads = 0

    async def planned_counts(self, first_s: int, last_s: int) -> dict[int, int]:
        self.reads += 1
        return await super().planned_counts(first_s, last_s)


async def test_window_load_reads_a_range_once_then_counts_in_memory_until_its_refresh() -> None:
    store = CountingStore()
    await store.open()
    mono = [0.0]
    windows = WindowLoad(store, refresh_s=1.0, monotonic=lambda: mono[0])
    due = [
        DueJob(job_id=f"job-{n}", fence_token=1, next_run_at=T0, schedule=WINDOWED)
        for n in range(30)
    ]
    placed = []
    for batch in (due[:10], due[10:20], due[20:]):  # three ticks of one herd
        plans = await windows.place([plan_claim(j, T0) for j in batch], batch, T0)
        placed += [p.new_next_run_at for p in plans]
    assert store.reads == 1
    seconds = Counter(int(p.timestamp()) for p in placed if p is not None)
    assert sorted(seconds.values()) == [3] * 10  # flat across the batches
    mono[0] = 1.5  # past the refresh: the counts are read again
    await windows.place([plan_claim(due[0], T0)], due[:1], T0)
    assert store.reads == 2
