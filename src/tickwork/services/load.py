"""The planned load: how many fires the scheduled jobs will make per time bucket in a window
(`GET /v1/load`, `tickwork load`), overall and per tenant, so an operator sees a herd coming.

The jobs are read page by page (scheduled jobs only: a paused job plans nothing), and each
one's occurrences in [start, end) are walked from its `next_run_at` with the same timing code
the scheduler uses, bounds and `max_runs` included. A job already overdue is counted at its
next occurrence from `start` on, as the scheduler will fire it. The counting itself is pure
(timing/load.py).

The walk is bounded: at most MAX_PLANNED occurrences per answer (a million every-second jobs
over an hour would be 3.6 billion); past it the answer says `truncated` and counts what it
walked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from tickwork.domain.jobs import Job, JobState
from tickwork.errors import InvalidInput
from tickwork.store.base import JobQuery, ScheduleStore
from tickwork.timing.load import LoadTally, TenantLoadForecast
from tickwork.timing.shift import nominal_of, planned_of
from tickwork.timing.triggers import next_occurrence
from tickwork.timing.window import LoadMap

__all__ = ["MAX_BUCKETS", "MAX_LOAD_SPAN", "MAX_PLANNED", "PlannedLoad", "planned_load"]

MAX_LOAD_SPAN: Final = timedelta(days=7)
MAX_BUCKETS: Final = 86_400  # a day of one-second buckets
MAX_PLANNED: Final = 2_000_000
_PAGE: Final = 1000
_ONE_US: Final = timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class PlannedLoad:
    forecast: TenantLoadForecast
    jobs: int  # scheduled jobs looked at
    truncated: bool  # MAX_PLANNED reached: the counts are a lower bound


def check_window(start: datetime, end: datetime, bucket_s: int) -> None:
    """InvalidInput naming the field unless [start, end) in buckets of bucket_s is answerable."""
    if end <= start:
        raise InvalidInput("to", "must be later than `from`", code="invalid_window")
    if end - start > MAX_LOAD_SPAN:
        raise InvalidInput(
            "to", "the window may span at most 7 days: narrow `from`..`to`", code="window_too_long"
        )
    if not 1 <= bucket_s <= 86_400:
        raise InvalidInput("bucket", "must be a whole number of seconds from 1 to 86400")
    if (end - start).total_seconds() / bucket_s > MAX_BUCKETS:
        raise InvalidInput(
            "bucket",
            f"the window holds more than {MAX_BUCKETS} buckets of {bucket_s} s:"
            " use a larger bucket or a shorter window",
            code="too_many_buckets",
        )


async def planned_load(
    store: ScheduleStore,
    *,
    start: datetime,
    end: datetime,
    bucket_s: int,
    tenant: str | None,
    max_planned: int = MAX_PLANNED,
) -> PlannedLoad:
    check_window(start, end, bucket_s)
    tally = LoadTally(start=start, end=end, bucket_s=bucket_s)
    jobs = planned = 0
    windows = LoadMap()  # the forecast's own count of windowed placements
    async for job in _scheduled_jobs(store, tenant):
        jobs += 1
        for instant in _planned_instants(job, start, end, windows):
            if planned >= max_planned:
                return PlannedLoad(forecast=tally.result(), jobs=jobs, truncated=True)
            tally.add(job.tenant, instant)
            planned += 1
    return PlannedLoad(forecast=tally.result(), jobs=jobs, truncated=False)


async def _scheduled_jobs(store: ScheduleStore, tenant: str | None) -> AsyncIterator[Job]:
    after: str | None = None
    while True:
        page = await store.list_jobs(
            JobQuery(state=JobState.SCHEDULED, tenant=tenant, after_id=after, limit=_PAGE)
        )
        for job in page:
            yield job
        if len(page) < _PAGE:
            return
        after = page[-1].id


def _planned_instants(
    job: Job, start: datetime, end: datetime, windows: LoadMap
) -> Iterator[datetime]:
    """The job's fires in [start, end), at the instants they fire: from its next_run_at (or,
    overdue, its next occurrence from `start` on), within its bounds, at most its remaining
    max_runs. A jittered occurrence is counted at its drawn instant (exact: the scheduler
    draws the same); a windowed one after the stored next is placed as the scheduler would,
    against `windows`, the forecast's own count of placements so far (the scheduler also
    counts what the store holds, so its placements may differ, never leaving the window)."""
    schedule = job.schedule
    planned = job.next_run_at
    if planned is None:
        return
    nominal: datetime | None = nominal_of(schedule, planned)
    if planned < start:
        nominal = next_occurrence(schedule, start - _ONE_US)
        planned = None if nominal is None else planned_of(job.id, schedule, nominal, load=windows)
    elif schedule.window_ms:
        windows.add(planned)
    remaining = None if schedule.max_runs is None else schedule.max_runs - job.fired_count
    while nominal is not None and nominal < end and (remaining is None or remaining > 0):
        assert planned is not None
        if start <= planned < end:
            yield planned
        if remaining is not None:
            remaining -= 1
        nominal = next_occurrence(schedule, nominal)
        planned = None if nominal is None else planned_of(job.id, schedule, nominal, load=windows)
