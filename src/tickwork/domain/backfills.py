"""Backfills: a range of a job's past occurrences replayed through the paced lane (no I/O).

A backfill names a job and a half-open range [from_at, to_at); the lane enqueues the
occurrences the job's schedule implies there, oldest first, at most `rate_per_s` a second,
each as a run of its own origin (`backfill`, or `catchup` for a misfire catch-up) whose key
never collides with the scheduled occurrence at the same instant.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from tickwork.domain.jobs import Schedule
from tickwork.domain.runs import RunOrigin

# The most occurrences one backfill may replay: a range implying more is refused up front.
MAX_BACKFILL_OCCURRENCES: Final = 1_000_000
DEFAULT_BACKFILL_RATE: Final = 50.0  # occurrences per second, per backfill, when none is asked
MAX_BACKFILL_RATE: Final = 10_000.0


class BackfillState(StrEnum):
    RUNNING = "running"  # the lane still has occurrences to enqueue
    COMPLETED = "completed"  # every occurrence of the range was enqueued (not necessarily run)
    CANCELLED = "cancelled"  # stopped by a user; what was enqueued before stays


class BackfillKind(StrEnum):
    BACKFILL = "backfill"  # asked for: POST /v1/jobs/{id}/backfill
    CATCHUP = "catchup"  # made by the scheduler for missed occurrences (misfire fire_all)

    @property
    def origin(self) -> RunOrigin:
        """The origin of the runs it enqueues (and the suffix of their keys)."""
        return RunOrigin.BACKFILL if self is BackfillKind.BACKFILL else RunOrigin.CATCHUP


TERMINAL_BACKFILL_STATES: Final = frozenset({BackfillState.COMPLETED, BackfillState.CANCELLED})


@dataclass(frozen=True, kw_only=True, slots=True)
class Backfill:
    id: int  # assigned by the store (0 before it is stored)
    job_id: str
    tenant: str
    kind: BackfillKind
    from_at: datetime  # inclusive
    to_at: datetime  # exclusive
    # The last occurrence enqueued; None before the first slice. The lane's compare-and-set.
    cursor_at: datetime | None
    total: int  # occurrences the range implies (the schedule as it was when created)
    done: int  # occurrences enqueued so far
    state: BackfillState
    rate_per_s: float
    created_at: datetime
    updated_at: datetime
    # The pacing clock: the lane may enqueue rate x (now - paced_at) more (paced_at is never
    # left more than a second behind, so an idle backfill does not bank a burst).
    paced_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class BackfillSlice:
    """One advance of one backfill, computed by the lane's pure planning and applied by the
    store in one transaction: a compare-and-set on `expected_cursor`, then the runs."""

    backfill_id: int
    job_id: str
    origin: RunOrigin
    expected_cursor: datetime | None
    occurrences: tuple[datetime, ...]  # oldest first; may be empty (a slice that completes)
    completes: bool  # the last occurrence of the range is in this slice
    paced_at: datetime
    # Overlap other than `allow`: advance only while the job has no pending run (one at a time).
    one_at_a_time: bool = False

    @property
    def new_cursor(self) -> datetime | None:
        return self.occurrences[-1] if self.occurrences else self.expected_cursor


@dataclass(frozen=True, kw_only=True, slots=True)
class RunningBackfill:
    """A running backfill as the lane reads it: with its job's schedule as it is now."""

    backfill: Backfill
    schedule: Schedule


def catchup_backfill(
    job_id: str, tenant: str, *, first: datetime, last: datetime, total: int, now: datetime
) -> Backfill:
    """The catch-up a late misfire fire_all claim creates for the missed occurrences
    first..last (inclusive): running, at the default rate, paced from `now`. The SQL stores
    insert the same row from their claim statements."""
    return Backfill(
        id=0,
        job_id=job_id,
        tenant=tenant,
        kind=BackfillKind.CATCHUP,
        from_at=first,
        to_at=last + timedelta(microseconds=1),
        cursor_at=None,
        total=total,
        done=0,
        state=BackfillState.RUNNING,
        rate_per_s=DEFAULT_BACKFILL_RATE,
        created_at=now,
        updated_at=now,
        paced_at=now,
    )
