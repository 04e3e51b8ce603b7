"""Reading the occurrence ledger: a job's occurrences in a window, and one occurrence explained.

The store gives the job's runs and ledger ranges; `timing.ledger.merge_ledger` (pure) turns
them, with the schedule, into one entry per occurrence. `explain` adds what a person asks
about one occurrence: the rule that produced it, what a clock change did to it, the job's
policies and pause, the run and its attempts, and a one-line summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

from tickwork.clock import Clock, utc_iso
from tickwork.domain.jobs import CronTrigger, Job, MisfirePolicy
from tickwork.domain.runs import AttemptRecord, Run, RunOrigin, RunStatus
from tickwork.errors import InvalidInput, NotFound
from tickwork.store.base import ScheduleStore
from tickwork.timing.durations import format_duration_ms
from tickwork.timing.ledger import Entry, Outcome, merge_ledger
from tickwork.timing.preview import preview_cron
from tickwork.timing.shift import known_planned, shift_note
from tickwork.timing.triggers import next_occurrence

MAX_WINDOW: Final = timedelta(days=366)
MAX_ENTRIES: Final = 1000
_ONE_US = timedelta(microseconds=1)
# The newest backfills of a job read for its ledger (its running catch-ups are among them: a
# claim creates at most one per downtime).
_BACKFILLS_READ: Final = 100


@dataclass(frozen=True, kw_only=True, slots=True)
class Explanation:
    job: Job
    asked: datetime  # the instant asked about
    occurrence: datetime | None  # the job's occurrence at or after it; None: there is none
    entry: Entry | None  # what happened or will happen to it
    run: Run | None  # its run, or the run it was coalesced into
    attempts: list[AttemptRecord]
    dst_note: str | None  # what a clock change did to it (cron schedules)
    summary: str
    # When a jittered or windowed occurrence fires (did, or will): its run's planned instant,
    # or as planned now (timing.shift.known_planned); None: at its instant, or not placed yet.
    planned_for: datetime | None = None
    shift_note: str | None = None  # how the schedule's jitter or window moves occurrences


class OccurrenceService:
    def __init__(self, store: ScheduleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def window(self, job: Job, start: datetime, end: datetime, limit: int) -> list[Entry]:
        """The job's occurrences in [start, end], oldest first, at most `limit` entries (a
        ledger range is one entry). Raises InvalidInput for a window that is backwards or
        longer than MAX_WINDOW, or a limit outside 1..MAX_ENTRIES."""
        check_window(start, end, limit)
        runs = await self._store.runs_scheduled_between(job.id, start, end, limit=limit)
        ranges = await self._store.list_occurrences(job.id, start, end, limit=limit)
        # Only a fire_all job has catch-ups (the policy may have changed since: read anyway).
        backfills = await self._store.list_backfills(job.id, limit=_BACKFILLS_READ)
        return merge_ledger(
            job, start, end, runs=runs, ranges=ranges, limit=limit, backfills=backfills
        )

    async def explain(self, job: Job, at: datetime) -> Explanation:
        """The occurrence of `job` at or after `at`, and what happened or will happen to it."""
        occurrence = next_occurrence(job.schedule, at.astimezone(UTC) - _ONE_US)
        if occurrence is None:
            return Explanation(
                job=job,
                asked=at,
                occurrence=None,
                entry=None,
                run=None,
                attempts=[],
                dst_note=None,
                summary=f"the schedule has no occurrence at or after {utc_iso(at)}",
            )
        entries = await self.window(job, occurrence, occurrence, MAX_ENTRIES)
        entry = next((e for e in entries if _stands_for_occurrence(e)), None)
        run = None if entry is None else await self._run_of(entry)
        attempts = [] if run is None else await self._attempts(run)
        return Explanation(
            job=job,
            asked=at,
            occurrence=occurrence,
            entry=entry,
            run=run,
            attempts=attempts,
            dst_note=dst_note(job, occurrence),
            summary=summary(job, occurrence, entry, run, attempts),
            planned_for=(
                run.planned_for
                if run is not None and run.scheduled_for == occurrence
                else known_planned(job.id, job.schedule, occurrence, job.next_run_at)
            ),
            shift_note=shift_note(job.schedule),
        )

    async def _run_of(self, entry: Entry) -> Run | None:
        if entry.run is not None or entry.run_id is None:
            return entry.run
        try:
            return await self._store.get_run(entry.run_id)
        except NotFound:
            return None  # pruned with the history

    async def _attempts(self, run: Run) -> list[AttemptRecord]:
        try:
            return await self._store.list_attempts(run.id)
        except NotFound:
            return []


def check_window(start: datetime, end: datetime, limit: int) -> None:
    if end < start:
        raise InvalidInput("to", "must not be before `from`; swap them", code="invalid_window")
    if end - start > MAX_WINDOW:
        raise InvalidInput(
            "to",
            f"the window from `from` to `to` is at most {MAX_WINDOW.days} days; ask for a"
            " shorter one (page with a later `from`)",
            code="window_too_long",
        )
    if not 1 <= limit <= MAX_ENTRIES:
        raise InvalidInput("limit", f"give a limit from 1 to {MAX_ENTRIES}", code="invalid_limit")


def _stands_for_occurrence(entry: Entry) -> bool:
    """A scheduled occurrence's entry, not a manual or backfill run at the same instant."""
    return entry.origin in (None, RunOrigin.SCHEDULE, RunOrigin.CATCHUP)


def dst_note(job: Job, occurrence: datetime) -> str | None:
    trigger = job.schedule.trigger
    if not isinstance(trigger, CronTrigger):
        return None
    # With the job's own DST choices: the defaults could place the occurrence elsewhere (a
    # repeated hour fired at its second pass) and the note would be lost.
    schedule = job.schedule
    found = preview_cron(
        trigger.expr,
        trigger.timezone,
        occurrence - _ONE_US,
        1,
        gap=schedule.dst_gap,
        repeat=schedule.dst_repeat,
    )
    return found[0].note if found and found[0].utc == occurrence else None


def local_time(job: Job, occurrence: datetime) -> str | None:
    """The occurrence on the wall clock of a cron schedule's zone."""
    trigger = job.schedule.trigger
    if not isinstance(trigger, CronTrigger):
        return None
    return occurrence.astimezone(ZoneInfo(trigger.timezone)).isoformat()


def summary(
    job: Job,
    occurrence: datetime,
    entry: Entry | None,
    run: Run | None,
    attempts: list[AttemptRecord],
) -> str:
    """One line saying what happened or will happen to the occurrence, and why."""
    when = utc_iso(occurrence)
    outcome = Outcome.UNKNOWN if entry is None else entry.outcome
    if outcome is Outcome.THROTTLED and run is not None:
        return (
            f"fired {run.throttled_ms} ms after {when}: the global fire ceiling held it back"
            f" (run {run.id}, {_run_state(run, attempts)}; throttling, not a miss)"
        )
    if outcome in (Outcome.FIRED, Outcome.DEAD_LETTERED, Outcome.CANCELLED) and run is not None:
        if run.origin is RunOrigin.CATCHUP:
            return (
                f"fired late by a catch-up after downtime (run {run.id},"
                f" {_run_state(run, attempts)}; misfire policy fire_all)"
            )
        return f"fired at {when} (run {run.id}, {_run_state(run, attempts)})"
    if outcome is Outcome.COALESCED_INTO and entry is not None:
        into = f"run {entry.run_id}" if entry.run_id is not None else "a run since pruned"
        return (
            f"coalesced into {into} after downtime: missed past the misfire grace, one of"
            f" {entry.count} folded into the latest"
        )
    if outcome is Outcome.SKIPPED_MISFIRE and entry is not None and entry.catchup_id is not None:
        return f"skipped: its catch-up {entry.catchup_id} was cancelled before firing it"
    if outcome is Outcome.SKIPPED_MISFIRE and job.schedule.misfire is MisfirePolicy.FIRE_ALL:
        window = format_duration_ms(job.schedule.catchup_window_ms)
        return (
            f"skipped: missed while the scheduler was down and older than catchup_window"
            f" ({window}), so not caught up (misfire policy fire_all)"
        )
    if outcome is Outcome.SKIPPED_MISFIRE:
        grace = format_duration_ms(job.schedule.misfire_grace_ms)
        return f"skipped: missed by more than the misfire grace ({grace}), misfire policy skip"
    if outcome is Outcome.SKIPPED_OVERLAP and entry is not None:
        return f"skipped: run {entry.run_id} was still going (overlap policy skip)"
    if outcome is Outcome.PAUSED:
        if entry is not None and entry.last is None:  # not a recorded range: paused now
            note = f" (note: {job.pause_note})" if job.pause_note else ""
            return f"will not fire at {when} while the job is paused{note}"
        return "skipped: the job was paused, and resumed without catching up"
    if outcome is Outcome.SCHEDULED and entry is not None and entry.catchup_id is not None:
        return (
            f"missed while the scheduler was down; catch-up {entry.catchup_id} will fire it"
            " late, paced (misfire policy fire_all, within catchup_window)"
        )
    if outcome is Outcome.SCHEDULED:
        local = local_time(job, occurrence)
        return f"will fire at {when}" + (f" ({local} local)" if local else "")
    return f"nothing is recorded for {when} (its history may have been pruned)"


def _run_state(run: Run, attempts: list[AttemptRecord]) -> str:
    tries = max(len(attempts), run.attempt)
    plural = "s" if tries != 1 else ""
    if run.status.value == "cancelled":
        return "cancelled"
    if run.status is RunStatus.SUCCEEDED:
        return f"succeeded after {tries} attempt{plural}"
    if run.status is RunStatus.FAILED:
        verb = "dead-lettered" if run.dead_lettered_at is not None else "failed"
        return f"{verb} after {tries} attempt{plural}"
    return "pending" if tries == 0 else f"in progress, attempt {tries}"
