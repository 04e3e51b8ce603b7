"""The paced lane's pure logic: which occurrences a backfill's next slice holds, how many it
may hold now, and where its pacing clock goes (no I/O, no clock: `now` is passed in).

Pacing is kept in the backfill's row (`paced_at`), not in a process: a slice of n occurrences
moves paced_at by n / rate, and a backfill may take rate x (now - paced_at) more. So the rate
holds for a backfill whichever scheduler advances it, and however many race for it (the
cursor's compare-and-set lets one of them win each slice). paced_at is never taken as more
than `PACE_WINDOW` behind now: a backfill that waited (its job busy, the process down) resumes
at its rate with at most a window's burst, not with everything it missed at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from tickwork.domain.backfills import Backfill, BackfillSlice, RunningBackfill
from tickwork.domain.jobs import OverlapPolicy, Schedule
from tickwork.timing.triggers import count_occurrences, next_occurrence

PACE_WINDOW: Final = timedelta(seconds=1)
_ONE_US: Final = timedelta(microseconds=1)


def occurrences_in(
    schedule: Schedule,
    *,
    after: datetime | None,
    from_at: datetime,
    to_at: datetime,
    limit: int,
) -> tuple[list[datetime], bool]:
    """Up to `limit` occurrences in [from_at, to_at) after `after` (None: from from_at on),
    oldest first, and whether they are the last ones of the range."""
    start = from_at.astimezone(UTC) - _ONE_US if after is None else after
    found: list[datetime] = []
    at = next_occurrence(schedule, start)
    while at is not None and at < to_at and len(found) < limit:
        found.append(at)
        at = next_occurrence(schedule, at)
    return found, at is None or at >= to_at


def count_in_range(schedule: Schedule, from_at: datetime, to_at: datetime, cap: int) -> int:
    """How many occurrences lie in [from_at, to_at), counting no further than `cap`."""
    return count_occurrences(schedule, after=from_at - _ONE_US, until=to_at - _ONE_US, cap=cap)


def _pace_start(backfill: Backfill, now: datetime) -> datetime:
    return max(backfill.paced_at, now - PACE_WINDOW)


def allowance(backfill: Backfill, now: datetime) -> int:
    """How many occurrences the backfill may enqueue at `now` under its own rate."""
    elapsed_s = max((now - _pace_start(backfill, now)).total_seconds(), 0.0)
    return math.floor(elapsed_s * backfill.rate_per_s + 1e-9)


def paced_after(backfill: Backfill, now: datetime, enqueued: int) -> datetime:
    """The pacing clock after a slice of `enqueued` occurrences (never past `now`)."""
    moved = _pace_start(backfill, now) + timedelta(seconds=enqueued / backfill.rate_per_s)
    return min(moved, now)


@dataclass(frozen=True, kw_only=True, slots=True)
class SliceLimits:
    budget: int  # what the process may still enqueue in this round, for every backfill together
    max_slice: int  # the most occurrences one slice (one statement) holds


def plan_slice(
    running: RunningBackfill, now: datetime, limits: SliceLimits
) -> BackfillSlice | None:
    """The backfill's next slice at `now`, or None when it may enqueue nothing yet.

    A job whose overlap policy is not `allow` gets one occurrence at a time: the store applies
    it only while the job has no pending run, so its backfill runs one after another, in order
    ("wait your turn"), and never beside a run of the job."""
    backfill, schedule = running.backfill, running.schedule
    one_at_a_time = schedule.overlap is not OverlapPolicy.ALLOW
    cap = 1 if one_at_a_time else limits.max_slice
    n = min(allowance(backfill, now), limits.budget, cap)
    if n <= 0:
        return None
    found, last = occurrences_in(
        schedule,
        after=backfill.cursor_at,
        from_at=backfill.from_at,
        to_at=backfill.to_at,
        limit=n,
    )
    return BackfillSlice(
        backfill_id=backfill.id,
        job_id=backfill.job_id,
        origin=backfill.kind.origin,
        expected_cursor=backfill.cursor_at,
        occurrences=tuple(found),
        completes=last,
        paced_at=paced_after(backfill, now, len(found)),
        one_at_a_time=one_at_a_time,
    )
