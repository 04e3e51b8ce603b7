"""The Clock seam: what every clock promises, then what ManualClock adds for tests."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.clock import Clock, ManualClock, SystemClock, from_us, to_us

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

CLOCKS: dict[str, Callable[[], Clock]] = {
    "system": SystemClock,
    "manual": lambda: ManualClock(T0),
}


@pytest.fixture(params=sorted(CLOCKS), name="clock")
def clock_fixture(request: pytest.FixtureRequest) -> Clock:
    return CLOCKS[request.param]()


def jolt(clock: Clock, step: int) -> None:
    """Between readings, move a ManualClock forward and back (the system clock moves itself)."""
    if isinstance(clock, ManualClock):
        clock.advance(timedelta(milliseconds=-11 if step % 3 == 0 else 7))


# -- every clock ------------------------------------------------------------------------------


def test_now_is_aware_and_in_utc(clock: Clock) -> None:
    now = clock.now()
    assert now.tzinfo is UTC


def test_monotonic_never_decreases(clock: Clock) -> None:
    readings = []
    for step in range(300):
        jolt(clock, step)
        readings.append(clock.monotonic_s())
    assert all(later >= earlier for earlier, later in itertools.pairwise(readings))


def test_now_round_trips_through_microseconds(clock: Clock) -> None:
    for step in range(3):
        jolt(clock, step)
        now = clock.now()
        assert from_us(to_us(now)) == now


@given(st.datetimes(timezones=st.just(UTC)))
def test_any_aware_instant_round_trips_through_microseconds(when: datetime) -> None:
    assert from_us(to_us(when)) == when


def test_the_system_clocks_monotonic_reading_is_the_processs() -> None:
    before = time.monotonic()
    reading = SystemClock().monotonic_s()
    assert before <= reading <= time.monotonic()


# -- ManualClock ------------------------------------------------------------------------------


def test_a_manual_clock_starts_where_told_in_utc() -> None:
    start = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    clock = ManualClock(start)
    assert clock.now() == start
    assert clock.now().tzinfo is UTC


def test_a_manual_clock_refuses_a_naive_start() -> None:
    with pytest.raises(ValueError, match="aware"):
        ManualClock(datetime(2026, 3, 1, 12, 0))  # naive on purpose


def test_advance_moves_both_readings_by_the_same_amount() -> None:
    clock = ManualClock(T0)
    start_s = clock.monotonic_s()
    clock.advance(timedelta(seconds=90, milliseconds=250))
    assert clock.now() == T0 + timedelta(seconds=90, milliseconds=250)
    assert clock.monotonic_s() - start_s == 90.25


def test_set_forward_moves_the_monotonic_reading_by_the_same_amount() -> None:
    clock = ManualClock(T0)
    start_s = clock.monotonic_s()
    clock.set(T0 + timedelta(minutes=2))
    assert clock.monotonic_s() - start_s == 120


def test_set_backwards_moves_now_back_but_not_the_monotonic_reading() -> None:
    clock = ManualClock(T0)
    clock.advance(timedelta(seconds=10))
    ahead_s = clock.monotonic_s()
    clock.set(T0 - timedelta(hours=1))
    assert clock.now() == T0 - timedelta(hours=1)
    assert clock.monotonic_s() == ahead_s
    clock.advance(timedelta(milliseconds=-5))  # a negative advance is the same step back
    assert clock.monotonic_s() == ahead_s
    # Forward again, the monotonic reading moves on from where it stood, by the step taken.
    clock.set(T0 - timedelta(hours=1) + timedelta(seconds=3))
    assert clock.monotonic_s() - ahead_s == pytest.approx(3.005)
