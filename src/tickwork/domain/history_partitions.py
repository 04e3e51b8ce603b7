"""Which daily partitions of the attempt history to create and which to drop (pure).

On PostgreSQL `tw_attempts` is range-partitioned by `finished_us` into UTC days (ADR 0007), with
a DEFAULT partition that catches every row no daily partition covers. `plan_partitions` decides,
from `now`, the retention and the partitions that exist, what the store should change:

- create the partitions of today and the next `days_ahead` days that are still missing, so rows
  land in a daily partition (cheap to drop) rather than in DEFAULT (deleted row by row);
- drop every partition whose whole range has expired (upper bound <= now - retention). A
  partition that has only partly expired stays until its last row has: dropping early would
  lose history still inside the retention, so rows live at most one day longer than it.

It lives in domain/ because the PostgreSQL store applies it (the store may not import
maintenance/); it reads no clock and does no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

DAY_US = 86_400_000_000
DAYS_AHEAD = 3  # today + 3: a scheduler may be down over a weekend without rows going to DEFAULT
NAME_PREFIX = "tw_attempts_p"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True, slots=True)
class Partition:
    """One range partition: rows with from_us <= finished_us < to_us."""

    name: str
    from_us: int
    to_us: int

    def overlaps(self, from_us: int, to_us: int) -> bool:
        return self.from_us < to_us and from_us < self.to_us


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionPlan:
    create: tuple[Partition, ...]  # oldest first
    drop: tuple[Partition, ...]  # oldest first

    @property
    def empty(self) -> bool:
        return not self.create and not self.drop


def day_partition(day_start_us: int) -> Partition:
    """The daily partition starting at `day_start_us` (a UTC midnight), named by its date."""
    day = _EPOCH + timedelta(microseconds=day_start_us)
    return Partition(
        name=f"{NAME_PREFIX}{day:%Y%m%d}", from_us=day_start_us, to_us=day_start_us + DAY_US
    )


def plan_partitions(
    *,
    now_us: int,
    retention: timedelta,
    existing: Sequence[Partition],
    days_ahead: int = DAYS_AHEAD,
) -> PartitionPlan:
    """What to create and drop so that today .. today + days_ahead are covered and nothing
    wholly older than the retention is kept. `existing` excludes the DEFAULT partition."""
    if retention <= timedelta(0):
        raise ValueError("retention must be positive")
    if days_ahead < 0:
        raise ValueError("days_ahead must be >= 0")
    cutoff_us = now_us - retention // timedelta(microseconds=1)
    drop = sorted((p for p in existing if p.to_us <= cutoff_us), key=lambda p: p.from_us)
    kept = [p for p in existing if p.to_us > cutoff_us]
    today_us = now_us - now_us % DAY_US  # floor, also before 1970 (Python's % is non-negative)
    create = []
    for n in range(days_ahead + 1):
        wanted = day_partition(today_us + n * DAY_US)
        # A range someone already covers (ours, or an operator's wider partition) would make
        # CREATE fail on the overlap; it needs no daily partition anyway.
        if not any(p.overlaps(wanted.from_us, wanted.to_us) for p in kept):
            create.append(wanted)
    return PartitionPlan(create=tuple(create), drop=tuple(drop))
