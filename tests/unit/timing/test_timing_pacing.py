"""The fire ceiling's token bucket and its throttling rules (pure, ADR 0025)."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.timing.pacing import FireBucket, ceiling_share, held_back, throttled_ms

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)


def test_starts_full_with_200_ms_of_its_rate_then_refills_at_the_rate() -> None:
    bucket = FireBucket(rate=100.0)
    assert bucket.available(0.0) == 20
    bucket.take(20, 0.0)
    assert bucket.available(0.0) == 0
    assert bucket.wait_s(5, 0.0) == pytest.approx(0.05)
    assert bucket.available(0.05) == 5
    assert bucket.available(10.0) == 20  # never more than the burst, however long it idles


@pytest.mark.parametrize(
    ("rate", "capacity"),
    [(1000.0, 200.0), (100.0, 20.0), (10.0, 2.0), (2.0, 1.0), (0.5, 1.0), (0.0, 0.0)],
)
def test_capacity_is_200_ms_of_the_rate_and_at_least_one_fire(rate: float, capacity: float) -> None:
    assert FireBucket(rate=rate).capacity == capacity


def test_a_claim_beyond_the_tokens_is_a_debt_repaid_before_more_is_available() -> None:
    bucket = FireBucket(rate=10.0)  # capacity 2
    bucket.take(5, 0.0)  # 3 in debt
    assert bucket.available(0.2) == 0  # still 1 in debt
    assert bucket.wait_s(1, 0.2) == pytest.approx(0.2)
    assert bucket.available(0.4) == 1


def test_a_rate_change_keeps_what_accrued_up_to_the_new_capacity() -> None:
    bucket = FireBucket(rate=100.0)
    bucket.take(20, 0.0)
    bucket.set_rate(50.0, 0.1)  # 10 accrued at 100/s; capacity now 10
    assert bucket.available(0.1) == 10
    bucket.take(10, 0.1)
    assert bucket.available(0.2) == 5  # 50/s from then on
    bucket.set_rate(0.0, 0.2)
    assert bucket.available(5.0) == 0
    assert bucket.wait_s(1, 5.0) == math.inf


def test_a_clock_read_out_of_order_adds_nothing() -> None:
    bucket = FireBucket(rate=10.0)
    bucket.take(2, 1.0)
    assert bucket.available(0.5) == 0
    assert bucket.available(1.1) == 1


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="rate"):
        FireBucket(rate=-1.0)
    with pytest.raises(ValueError, match="burst_s"):
        FireBucket(rate=1.0, burst_s=0.0)
    with pytest.raises(ValueError, match="count"):
        FireBucket(rate=1.0).take(-1, 0.0)
    with pytest.raises(ValueError, match="ceiling"):
        ceiling_share(0.0, 1, 2)


@pytest.mark.parametrize(
    ("ceiling", "held", "partitions", "share"),
    [
        (200.0, 32, 64, 100.0),
        (200.0, 64, 64, 200.0),
        (200.0, 0, 64, 0.0),
        (90.0, 1, 3, 30.0),
        (50.0, 7, 0, 50.0),  # no partitions: all of it
    ],
)
def test_each_scheduler_paces_at_its_share_of_the_partitions(
    ceiling: float, held: int, partitions: int, share: float
) -> None:
    assert ceiling_share(ceiling, held, partitions) == pytest.approx(share)


@settings(max_examples=300, deadline=None)
@given(
    rate=st.floats(min_value=1.0, max_value=5000.0),
    steps=st.lists(st.floats(min_value=0.0, max_value=0.3), min_size=1, max_size=200),
)
def test_what_a_greedy_claimer_takes_never_exceeds_rate_times_window_plus_burst(
    rate: float, steps: list[float]
) -> None:
    """Taking everything available at arbitrary instants, the tokens taken over [0, t] are at
    most capacity + rate * t, and a claimer that waits `wait_s` always finds its tokens."""
    bucket = FireBucket(rate=rate)
    at, taken = 0.0, 0
    for step in steps:
        at += step
        got = bucket.available(at)
        bucket.take(got, at)
        taken += got
        assert taken <= bucket.capacity + rate * at + 1e-6
        probe = replace(bucket)  # looking ahead must not move the bucket's own clock
        assert probe.available(at + probe.wait_s(1, at) + 1e-9) >= 1


@settings(max_examples=100, deadline=None)
@given(rate=st.floats(min_value=5.0, max_value=5000.0), window_s=st.floats(1.0, 20.0))
def test_a_claimer_that_always_has_work_paces_within_5_percent_over_a_window(
    rate: float, window_s: float
) -> None:
    """The scheduler's loop: take what is there, sleep until a quarter of the bucket is back.
    Over `window_s` the fires stay within 5 % of the rate (the burst is 200 ms of it)."""
    bucket = FireBucket(rate=rate)
    at, taken = 0.0, 0
    step = max(1, int(bucket.capacity / 4))
    while at < window_s:
        got = bucket.available(at)
        bucket.take(got, at)
        taken += got
        at += bucket.wait_s(step, at)
    assert abs(taken - rate * window_s) <= 0.05 * rate * window_s + bucket.capacity


@pytest.mark.parametrize(
    ("due_ms", "since_ms", "grace_ms", "expected"),
    [
        (0, None, 1000, False),  # not throttled: the misfire policy decides
        (0, 0, 1000, True),
        (500, 0, 1000, True),  # came due while throttled
        (-1000, 0, 1000, True),  # on time (within its grace) when the throttling began
        (-1001, 0, 1000, False),  # already past its grace: a downtime's misfire
    ],
)
def test_held_back_is_due_no_earlier_than_the_throttling_minus_the_grace(
    due_ms: int, since_ms: int | None, grace_ms: int, expected: bool
) -> None:
    since = None if since_ms is None else T0 + since_ms * MS
    assert held_back(T0 + due_ms * MS, throttled_since=since, grace_ms=grace_ms) is expected


@pytest.mark.parametrize(
    ("due_ms", "now_ms", "since_ms", "expected"),
    [
        (0, 2500, 0, 2500),
        (1000, 2500, 0, 1500),  # came due after the throttling began: from its instant
        (-800, 2500, 0, 2500),  # due before: only the lateness since the throttling
        (3000, 2900, 0, None),  # claimed ahead (the look-ahead)
        (0, 0, 0, None),
    ],
)
def test_throttled_ms_is_the_lateness_the_ceiling_caused(
    due_ms: int, now_ms: int, since_ms: int, expected: int | None
) -> None:
    late = throttled_ms(T0 + due_ms * MS, T0 + now_ms * MS, throttled_since=T0 + since_ms * MS)
    assert late == expected
