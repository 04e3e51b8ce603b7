"""Token buckets of the per-key API limit (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.timing.rate_limit import Buckets, Limit, retry_after_header


def test_a_burst_then_the_rate() -> None:
    buckets = Buckets(Limit(rate=10, burst=5))
    assert [buckets.take("k", 0.0) for _ in range(5)] == [0.0] * 5
    assert buckets.take("k", 0.0) == 0.1  # one token every 0.1 s
    assert buckets.take("k", 0.05) == 0.05
    assert buckets.take("k", 0.1) == 0.0
    assert buckets.take("other", 0.1) == 0.0  # each name its own bucket


def test_refused_requests_take_nothing() -> None:
    buckets = Buckets(Limit(rate=1, burst=1))
    assert buckets.take("k", 0.0) == 0.0
    for _ in range(100):
        assert buckets.take("k", 0.5) == 0.5
    assert buckets.take("k", 1.0) == 0.0


def test_no_limit() -> None:
    buckets = Buckets(Limit(rate=0, burst=1))
    assert all(buckets.take("k", 0.0) == 0.0 for _ in range(10_000))


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert [retry_after_header(w) for w in (0.001, 1.0, 1.2, 59.9)] == ["1", "1", "2", "60"]


@settings(max_examples=200, deadline=None)
@given(
    rate=st.floats(min_value=0.5, max_value=1000),
    burst=st.integers(min_value=1, max_value=50),
    gaps=st.lists(st.floats(min_value=0, max_value=0.5), min_size=1, max_size=300),
)
def test_never_more_than_burst_plus_rate_times_time(
    rate: float, burst: int, gaps: list[float]
) -> None:
    buckets = Buckets(Limit(rate=rate, burst=burst))
    at, granted = 0.0, 0
    for gap in gaps:
        at += gap
        granted += buckets.take("k", at) == 0.0
    assert granted <= burst + rate * at + 1e-6
