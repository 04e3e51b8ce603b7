"""The paced lane's pure planning: which occurrences a slice holds, and how many it may."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.domain.backfills import Backfill, BackfillKind, BackfillState, RunningBackfill
from tickwork.domain.jobs import CronTrigger, EveryTrigger, OverlapPolicy, Schedule
from tickwork.domain.runs import RunOrigin
from tickwork.scheduler.backfill_plan import (
    PACE_WINDOW,
    SliceLimits,
    allowance,
    count_in_range,
    occurrences_in,
    paced_after,
    plan_slice,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)
MIN = timedelta(minutes=1)
SEC = timedelta(seconds=1)
EVERY_MINUTE = Schedule(trigger=CronTrigger(expr="* * * * *"))
WIDE = SliceLimits(budget=10_000, max_slice=10_000)


def backfill(**kw: object) -> Backfill:
    fields: dict[str, object] = {
        "id": 1,
        "job_id": "j" * 32,
        "tenant": "default",
        "kind": BackfillKind.BACKFILL,
        "from_at": T0,
        "to_at": T0 + 60 * MIN,
        "cursor_at": None,
        "total": 60,
        "done": 0,
        "state": BackfillState.RUNNING,
        "rate_per_s": 10.0,
        "created_at": T0,
        "updated_at": T0,
        "paced_at": T0,
    }
    fields.update(kw)
    return Backfill(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("after", "limit", "expected", "last"),
    [
        (None, 3, [T0, T0 + MIN, T0 + 2 * MIN], False),  # `from` is included
        (T0 + 57 * MIN, 5, [T0 + 58 * MIN, T0 + 59 * MIN], True),  # `to` is excluded
        (T0 + 58 * MIN, 1, [T0 + 59 * MIN], True),  # the last one, exactly
        (T0 + 59 * MIN, 5, [], True),
        (None, 0, [], False),
    ],
)
def test_occurrences_in_a_half_open_range(
    after: datetime | None, limit: int, expected: list[datetime], last: bool
) -> None:
    found, done = occurrences_in(
        EVERY_MINUTE, after=after, from_at=T0, to_at=T0 + 60 * MIN, limit=limit
    )
    assert (found, done) == (expected, last)


@given(
    interval_s=st.integers(1, 600),
    anchor_s=st.integers(-3600, 3600),
    from_s=st.integers(0, 7200),
    length_s=st.integers(1, 7200),
)
def test_count_matches_the_occurrences_listed(
    interval_s: int, anchor_s: int, from_s: int, length_s: int
) -> None:
    schedule = Schedule(
        trigger=EveryTrigger(interval_ms=interval_s * 1000, anchor=T0 + anchor_s * SEC)
    )
    from_at, to_at = T0 + from_s * SEC, T0 + (from_s + length_s) * SEC
    found, last = occurrences_in(schedule, after=None, from_at=from_at, to_at=to_at, limit=10**6)
    assert last
    assert count_in_range(schedule, from_at, to_at, cap=10**6) == len(found)
    assert all(from_at <= t < to_at for t in found)
    assert found == sorted(set(found))


def test_a_day_of_an_every_minute_job_is_1440() -> None:
    assert count_in_range(EVERY_MINUTE, T0, T0 + timedelta(days=1), cap=10**6) == 1440
    assert count_in_range(EVERY_MINUTE, T0, T0 + timedelta(days=1), cap=100) == 100


@pytest.mark.parametrize(
    ("paced_ago_s", "rate", "expected"),
    [
        (0.0, 10.0, 0),
        (0.2, 10.0, 2),
        (0.25, 10.0, 2),  # whole occurrences only; the rest stays on the pacing clock
        (0.5, 1.0, 0),
        (1.0, 1.0, 1),
        (60.0, 10.0, 10),  # idle for a minute: at most one window's worth, no flood
        (0.2, 50.0, 10),
    ],
)
def test_allowance_is_rate_times_time_since_the_pacing_clock(
    paced_ago_s: float, rate: float, expected: int
) -> None:
    now = T0 + timedelta(seconds=100)
    b = backfill(rate_per_s=rate, paced_at=now - timedelta(seconds=paced_ago_s))
    assert allowance(b, now) == expected


@given(
    rate=st.floats(0.1, 1000),
    steps_ms=st.lists(st.integers(0, 3000), min_size=1, max_size=50),
)
def test_the_rate_holds_over_any_sequence_of_rounds(rate: float, steps_ms: list[int]) -> None:
    """Whenever the lane looks and however often: what was enqueued by t never exceeds
    rate x (t - start) plus one window's burst."""
    b = backfill(rate_per_s=rate, paced_at=T0)
    now, enqueued = T0, 0
    for step in steps_ms:
        now += timedelta(milliseconds=step)
        n = allowance(b, now)
        b = replace(b, paced_at=paced_after(b, now, n))
        assert b.paced_at <= now
        enqueued += n
        bound = rate * ((now - T0).total_seconds() + PACE_WINDOW.total_seconds())
        assert enqueued <= bound + 1e-6


def test_a_slice_takes_the_smallest_of_allowance_budget_and_size() -> None:
    running = RunningBackfill(backfill=backfill(paced_at=T0 - 10 * SEC), schedule=EVERY_MINUTE)
    now = T0 + 10 * SEC
    plan = plan_slice(running, now, WIDE)
    assert plan is not None
    assert len(plan.occurrences) == 10  # a window's worth at 10/s
    assert plan.origin is RunOrigin.BACKFILL
    assert plan.paced_at == now
    budgeted = plan_slice(running, now, SliceLimits(budget=4, max_slice=100))
    assert budgeted is not None
    assert len(budgeted.occurrences) == 4
    assert budgeted.paced_at == now - SEC + timedelta(seconds=0.4)  # the rest is kept
    small = plan_slice(running, now, SliceLimits(budget=100, max_slice=3))
    assert small is not None
    assert small.occurrences == (T0, T0 + MIN, T0 + 2 * MIN)
    assert plan_slice(running, now, SliceLimits(budget=0, max_slice=3)) is None


def test_a_slice_continues_after_the_cursor_and_the_last_one_completes() -> None:
    b = backfill(cursor_at=T0 + 55 * MIN, paced_at=T0, rate_per_s=100.0)
    plan = plan_slice(RunningBackfill(backfill=b, schedule=EVERY_MINUTE), T0 + 10 * SEC, WIDE)
    assert plan is not None
    assert plan.expected_cursor == T0 + 55 * MIN
    assert plan.occurrences == tuple(T0 + m * MIN for m in range(56, 60))
    assert plan.completes
    assert plan.new_cursor == T0 + 59 * MIN


def test_overlap_other_than_allow_goes_one_at_a_time() -> None:
    schedule = replace(EVERY_MINUTE, overlap=OverlapPolicy.BUFFER_ONE)
    b = backfill(paced_at=T0 - 10 * SEC)
    plan = plan_slice(RunningBackfill(backfill=b, schedule=schedule), T0 + 10 * SEC, WIDE)
    assert plan is not None
    assert (plan.occurrences, plan.one_at_a_time) == ((T0,), True)


def test_a_catchup_enqueues_catchup_runs() -> None:
    b = backfill(kind=BackfillKind.CATCHUP, paced_at=T0 - 10 * SEC)
    plan = plan_slice(RunningBackfill(backfill=b, schedule=EVERY_MINUTE), T0 + 10 * SEC, WIDE)
    assert plan is not None
    assert plan.origin is RunOrigin.CATCHUP
