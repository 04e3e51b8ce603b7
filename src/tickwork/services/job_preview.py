"""The next fires of an existing job, by its state (pure: the caller passes `now`).

- scheduled: from its next_run_at, inclusive, as the scheduler will fire them;
- paused: what would fire if it were resumed now (`resumed` re-arms it at the schedule's first
  occurrence from now);
- completed: nothing, with the reason it completed.

max_runs counts the job's `fired_count`. The preview assumes each fire is on time: a job
whose next_run_at is long past is fired by its misfire policy, which a preview does not
anticipate.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwork.domain.jobs import AtTrigger, Job, JobState
from tickwork.timing.preview import (
    EndReason,
    PreviewEnd,
    SchedulePreview,
    preview_schedule,
    schedule_end,
)
from tickwork.timing.shift import nominal_of
from tickwork.timing.triggers import first_occurrence

__all__ = ["preview_job"]

_ONE_US = timedelta(microseconds=1)


def preview_job(
    job: Job, now: datetime, count: int, *, after: datetime | None = None
) -> SchedulePreview:
    """The job's next `count` fires; with `after`, only those strictly after it (the ones
    passed over still count against max_runs)."""
    schedule = job.schedule
    if job.state is JobState.COMPLETED or (
        job.state is JobState.SCHEDULED and job.next_run_at is None
    ):
        return SchedulePreview(fires=[], ends=_completed(job))
    if job.state is JobState.PAUSED:
        first = first_occurrence(schedule, now)
        if after is None or first is None:
            # Resumed now: a preview from `now` lists exactly that, first and end alike.
            return preview_schedule(schedule, now, count, fired_count=job.fired_count)
    else:
        assert job.next_run_at is not None  # a scheduled job without one is answered above
        first = nominal_of(schedule, job.next_run_at)  # the stored instant is the planned one
    start = (first.astimezone(UTC) - _ONE_US) if after is None else after
    return preview_schedule(schedule, start, count, fired_count=job.fired_count, first=first)


def _completed(job: Job) -> PreviewEnd:
    """Why a completed job fires no more, as far as its record tells."""
    schedule = job.schedule
    if schedule.max_runs is not None and job.fired_count >= schedule.max_runs:
        message = f"the job is completed: it fired max_runs ({schedule.max_runs}) times"
        return PreviewEnd(reason=EndReason.MAX_RUNS, message=message)
    if isinstance(schedule.trigger, AtTrigger) or schedule.end_at is not None:
        end = schedule_end(schedule)
        return PreviewEnd(reason=end.reason, message=f"the job is completed: {end.message}")
    return PreviewEnd(reason=EndReason.COMPLETED, message="the job is completed")
