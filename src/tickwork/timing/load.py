"""Pure: a forecast of planned fires per time bucket (the answer of `GET /v1/load`).

Given the instants the scheduler plans to fire at, count them in buckets of `bucket_s`
seconds from `start` (inclusive) to `end` (exclusive): the total, the peak (most fires in one
bucket), every non-empty bucket in time order and the busiest buckets, most fires first.
`forecast_by_tenant` does the same for (tenant, instant) pairs: one forecast for all and one
per tenant, so an operator sees who makes a peak.

Buckets are aligned on `start`, not on the epoch: the caller chooses the grid by choosing
`start` (a whole minute, say); the last bucket is cut short at `end` when the range is not a
whole number of buckets. Instants outside [start, end) are not counted.

No I/O, no clock: instants come in as aware datetimes.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwork.clock import to_us

__all__ = [
    "DEFAULT_BUSIEST",
    "BucketLoad",
    "LoadForecast",
    "LoadTally",
    "TenantLoadForecast",
    "forecast",
    "forecast_by_tenant",
]

DEFAULT_BUSIEST = 10  # busiest buckets listed; a peak is rarely more than a few buckets wide

_US_PER_S = 1_000_000


@dataclass(frozen=True, slots=True)
class BucketLoad:
    start: datetime  # the bucket is [start, start + bucket_s)
    fires: int


@dataclass(frozen=True, slots=True)
class LoadForecast:
    start: datetime
    end: datetime
    bucket_s: int
    total: int  # fires in [start, end)
    peak: int  # the most fires in one bucket; 0 when there are none
    buckets: tuple[BucketLoad, ...]  # the non-empty buckets, in time order
    busiest: tuple[BucketLoad, ...]  # the busiest non-empty buckets: most fires, then earliest


@dataclass(frozen=True, slots=True)
class TenantLoadForecast:
    overall: LoadForecast
    tenants: Mapping[str, LoadForecast]  # only tenants with a fire in range, by name


def forecast(
    instants: Iterable[datetime],
    *,
    start: datetime,
    end: datetime,
    bucket_s: int = 1,
    busiest: int = DEFAULT_BUSIEST,
) -> LoadForecast:
    """Fires per bucket of `bucket_s` seconds in [start, end)."""
    grid = _Grid(start, end, bucket_s, busiest)
    counts: Counter[int] = Counter()
    for instant in instants:
        bucket = grid.bucket_of(instant)
        if bucket is not None:
            counts[bucket] += 1
    return grid.forecast(counts)


def forecast_by_tenant(
    fires: Iterable[tuple[str, datetime]],
    *,
    start: datetime,
    end: datetime,
    bucket_s: int = 1,
    busiest: int = DEFAULT_BUSIEST,
) -> TenantLoadForecast:
    """`forecast` over all pairs, and one per tenant that has a fire in [start, end)."""
    tally = LoadTally(start=start, end=end, bucket_s=bucket_s, busiest=busiest)
    for tenant, instant in fires:
        tally.add(tenant, instant)
    return tally.result()


class LoadTally:
    """`forecast_by_tenant` fed one fire at a time: for a caller that produces the fires in
    steps (pages of jobs read from a store) and should not hold them all."""

    def __init__(
        self, *, start: datetime, end: datetime, bucket_s: int = 1, busiest: int = DEFAULT_BUSIEST
    ) -> None:
        self._grid = _Grid(start, end, bucket_s, busiest)
        self._overall: Counter[int] = Counter()
        self._by_tenant: defaultdict[str, Counter[int]] = defaultdict(Counter)

    def add(self, tenant: str, instant: datetime) -> None:
        bucket = self._grid.bucket_of(instant)
        if bucket is not None:
            self._overall[bucket] += 1
            self._by_tenant[tenant][bucket] += 1

    def result(self) -> TenantLoadForecast:
        grid = self._grid
        return TenantLoadForecast(
            overall=grid.forecast(self._overall),
            tenants={
                name: grid.forecast(self._by_tenant[name]) for name in sorted(self._by_tenant)
            },
        )


class _Grid:
    """The buckets of one forecast: which bucket an instant falls in, and the summary."""

    def __init__(self, start: datetime, end: datetime, bucket_s: int, busiest: int) -> None:
        if bucket_s < 1:
            raise ValueError(f"bucket_s must be 1 or more, got {bucket_s}")
        if busiest < 0:
            raise ValueError(f"busiest must be 0 or more, got {busiest}")
        self.start, self.end = start, end
        self.start_us, self.end_us = to_us(start), to_us(end)
        if self.end_us <= self.start_us:
            raise ValueError("end must be after start")
        self.bucket_s = bucket_s
        self.bucket_us = bucket_s * _US_PER_S
        self.busiest = busiest

    def bucket_of(self, instant: datetime) -> int | None:
        us = to_us(instant)
        if not self.start_us <= us < self.end_us:
            return None
        return (us - self.start_us) // self.bucket_us

    def forecast(self, counts: Mapping[int, int]) -> LoadForecast:
        def load(bucket: int) -> BucketLoad:
            at = self.start + timedelta(seconds=bucket * self.bucket_s)
            return BucketLoad(start=at, fires=counts[bucket])

        busiest = sorted(counts, key=lambda bucket: (-counts[bucket], bucket))[: self.busiest]
        return LoadForecast(
            start=self.start,
            end=self.end,
            bucket_s=self.bucket_s,
            total=sum(counts.values()),
            peak=max(counts.values(), default=0),
            buckets=tuple(load(bucket) for bucket in sorted(counts)),
            busiest=tuple(load(bucket) for bucket in busiest),
        )
