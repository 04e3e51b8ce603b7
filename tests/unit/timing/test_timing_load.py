"""forecast / forecast_by_tenant against a naive oracle, plus a worked example."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork.timing.load import BucketLoad, forecast, forecast_by_tenant

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
START = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)

# Instants from 10 s before the range to 10 s after its longest end, to the microsecond.
offsets_us = st.integers(min_value=-10_000_000, max_value=130_000_000)
spans_s = st.integers(min_value=1, max_value=120)
bucket_sizes = st.sampled_from([1, 2, 5, 7, 60])
tenants = st.sampled_from(["acme", "globex", "initech"])


def naive_counts(
    instants: list[datetime], start: datetime, end: datetime, bucket_s: int
) -> Counter[datetime]:
    """Each instant's bucket start, found by walking the buckets one by one (the last bucket
    may be cut short by the end of the range)."""
    counts: Counter[datetime] = Counter()
    for instant in instants:
        if not start <= instant < end:
            continue
        bucket_start = start
        while bucket_start < end:
            if bucket_start <= instant < bucket_start + timedelta(seconds=bucket_s):
                counts[bucket_start] += 1
                break
            bucket_start += timedelta(seconds=bucket_s)
    return counts


@FAST
@given(
    offsets=st.lists(offsets_us, max_size=200),
    span_s=spans_s,
    bucket_s=bucket_sizes,
    busiest=st.integers(min_value=0, max_value=12),
)
def test_forecast_matches_a_naive_count(
    offsets: list[int], span_s: int, bucket_s: int, busiest: int
) -> None:
    instants = [START + timedelta(microseconds=us) for us in offsets]
    end = START + timedelta(seconds=span_s)
    expected = naive_counts(instants, START, end, bucket_s)
    result = forecast(instants, start=START, end=end, bucket_s=bucket_s, busiest=busiest)

    assert result.total == sum(START <= instant < end for instant in instants)
    assert result.peak == max(expected.values(), default=0)
    assert result.buckets == tuple(
        BucketLoad(start=at, fires=fires) for at, fires in sorted(expected.items())
    )
    ranked = sorted(expected.items(), key=lambda item: (-item[1], item[0]))[:busiest]
    assert result.busiest == tuple(BucketLoad(start=at, fires=fires) for at, fires in ranked)
    assert (result.start, result.end, result.bucket_s) == (START, end, bucket_s)


@FAST
@given(
    fires=st.lists(st.tuples(tenants, offsets_us), max_size=200),
    span_s=spans_s,
    bucket_s=bucket_sizes,
)
def test_per_tenant_forecasts_add_up_to_the_overall_one(
    fires: list[tuple[str, int]], span_s: int, bucket_s: int
) -> None:
    pairs = [(tenant, START + timedelta(microseconds=us)) for tenant, us in fires]
    end = START + timedelta(seconds=span_s)
    result = forecast_by_tenant(pairs, start=START, end=end, bucket_s=bucket_s)

    assert result.overall == forecast(
        [instant for _, instant in pairs], start=START, end=end, bucket_s=bucket_s
    )
    in_range = {tenant for tenant, instant in pairs if START <= instant < end}
    assert list(result.tenants) == sorted(in_range)
    for tenant, tenant_forecast in result.tenants.items():
        assert tenant_forecast == forecast(
            [instant for name, instant in pairs if name == tenant],
            start=START,
            end=end,
            bucket_s=bucket_s,
        )
    assert sum(f.total for f in result.tenants.values()) == result.overall.total


def test_a_worked_example() -> None:
    """Minute buckets over 3 minutes: the end is excluded, ties rank the earlier bucket first."""
    at = [
        START - timedelta(microseconds=1),  # before the range
        START,
        START + timedelta(seconds=59, microseconds=999_999),
        START + timedelta(minutes=1, seconds=30),
        START + timedelta(minutes=2),
        START + timedelta(minutes=2, seconds=1),
        START + timedelta(minutes=3),  # the end: excluded
    ]
    result = forecast(at, start=START, end=START + timedelta(minutes=3), bucket_s=60, busiest=2)
    assert result.total == 5
    assert result.peak == 2
    assert [(b.start - START, b.fires) for b in result.buckets] == [
        (timedelta(0), 2),
        (timedelta(minutes=1), 1),
        (timedelta(minutes=2), 2),
    ]
    assert [(b.start - START, b.fires) for b in result.busiest] == [
        (timedelta(0), 2),
        (timedelta(minutes=2), 2),
    ]


def test_no_fires_is_an_empty_forecast() -> None:
    result = forecast([], start=START, end=START + timedelta(hours=1))
    assert (result.total, result.peak, result.buckets, result.busiest) == (0, 0, (), ())


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="bucket_s"):
        forecast([], start=START, end=START + timedelta(hours=1), bucket_s=0)
    with pytest.raises(ValueError, match="end"):
        forecast([], start=START, end=START)
    with pytest.raises(ValueError, match="busiest"):
        forecast([], start=START, end=START + timedelta(hours=1), busiest=-1)
    with pytest.raises(ValueError, match="naive"):
        forecast([START.replace(tzinfo=None)], start=START, end=START + timedelta(hours=1))
