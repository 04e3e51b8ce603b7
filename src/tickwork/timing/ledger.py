"""The occurrence ledger read back: what happened (or will happen) to each occurrence.

Pure: `merge_ledger` is a function of the job, the window, the job's runs and its ledger
ranges, so every outcome is a table test (tests/unit/test_ledger_merge.py) and the property
test can compare it with what the schedule implies.

Every occurrence the job's schedule implies in the window gets exactly one entry:

- its run (origin schedule or catchup, keyed by the nominal instant): `fired` (`throttled`
  when the global fire ceiling held it back: its run records `throttled_ms`), or
  `dead_lettered` / `cancelled` by the run's state;
- else the ledger range holding it (one entry per range, `count` occurrences from `at` to
  `last`): `skipped_overlap`, `skipped_misfire`, `coalesced_into` (`run_id` the run fired
  instead), `paused`;
- else the job's catch-up backfill holding it (misfire fire_all: missed within the
  catchup_window, not enqueued yet): `scheduled`, with a reason naming the catch-up, or
  `skipped_misfire` if that catch-up was cancelled;
- else, from the job's next_run_at on: `scheduled` (or `paused` while the job is paused: the
  resume records them, or, caught up, the misfire policy decides);
- else `unknown`: nothing recorded for a past occurrence. The ledger's promise is that this
  does not happen (the property test holds it to that) until history retention prunes it.

Manual and backfill runs are extra entries, listed with their origin.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from tickwork.domain.backfills import Backfill, BackfillKind, BackfillState
from tickwork.domain.jobs import (
    CronTrigger,
    EveryTrigger,
    Job,
    JobState,
    MisfirePolicy,
    Schedule,
)
from tickwork.domain.occurrences import LedgerRange, LedgerReason
from tickwork.domain.runs import Run, RunOrigin, RunStatus
from tickwork.timing.durations import format_duration_ms
from tickwork.timing.shift import nominal_of
from tickwork.timing.triggers import count_occurrences, latest_occurrence, next_occurrence

_ONE_US = timedelta(microseconds=1)
# A paused range's count stops here: counting a cron's occurrences walks them one by one (an
# interval's are counted by arithmetic), and a year paused at every second is 31 million.
_MAX_COUNTED = 1_000_000
# Origins of runs that stand for an occurrence of the schedule (the others are extra entries).
_OCCURRENCE_ORIGINS = frozenset({RunOrigin.SCHEDULE, RunOrigin.CATCHUP})


class Outcome(StrEnum):
    FIRED = "fired"
    CANCELLED = "cancelled"
    DEAD_LETTERED = "dead_lettered"
    SKIPPED_OVERLAP = "skipped_overlap"
    SKIPPED_MISFIRE = "skipped_misfire"
    COALESCED_INTO = "coalesced_into"
    PAUSED = "paused"
    THROTTLED = "throttled"
    SCHEDULED = "scheduled"
    UNKNOWN = "unknown"


REASONS: dict[Outcome, str] = {
    Outcome.FIRED: "the schedule fired it",
    Outcome.CANCELLED: "fired, then cancelled (overlap policy cancel_previous)",
    Outcome.DEAD_LETTERED: "fired, and every attempt failed",
    Outcome.SKIPPED_OVERLAP: "the previous run was still going (overlap policy skip)",
    Outcome.SKIPPED_MISFIRE: "missed past the misfire grace (misfire policy skip)",
    Outcome.COALESCED_INTO: "missed past the misfire grace; one run fired for the latest"
    " (misfire policy coalesce)",
    Outcome.PAUSED: "the job was paused",
    Outcome.THROTTLED: "fired late: the global fire ceiling held it back (throttling, not a miss)",
    Outcome.SCHEDULED: "the schedule will fire it",
    Outcome.UNKNOWN: "nothing is recorded for it (its history may have been pruned)",
}
_BY_ORIGIN = {
    RunOrigin.MANUAL: "triggered by hand",
    RunOrigin.BACKFILL: "a past occurrence replayed by a backfill",
    RunOrigin.CATCHUP: "a missed occurrence fired late (misfire policy fire_all)",
}


@dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    at: datetime  # the nominal instant (of the first occurrence, for a range)
    outcome: Outcome
    reason: str
    count: int = 1  # occurrences this entry stands for
    last: datetime | None = None  # a range's last occurrence
    run: Run | None = None  # the occurrence's run, or the run it was coalesced into
    run_id: int | None = None  # the run named by a ledger range (even if pruned)
    origin: RunOrigin | None = None  # the run's, for a run entry
    catchup_id: int | None = None  # the catch-up backfill that will fire it (`scheduled`)

    def covers(self, instant: datetime) -> bool:
        return self.at <= instant <= (self.last or self.at)


def run_outcome(run: Run) -> Outcome:
    if run.status.value == "cancelled":  # the overlap policy cancel_previous's state
        return Outcome.CANCELLED
    if run.status is RunStatus.FAILED and run.dead_lettered_at is not None:
        return Outcome.DEAD_LETTERED
    if run.throttled_ms is not None:  # fired, later than its instant because of the ceiling
        return Outcome.THROTTLED
    return Outcome.FIRED


def merge_ledger(
    job: Job,
    start: datetime,
    end: datetime,
    *,
    runs: Iterable[Run],
    ranges: Iterable[LedgerRange],
    limit: int,
    backfills: Iterable[Backfill] = (),
) -> list[Entry]:
    """Every occurrence of `job` in [start, end], one entry each (ranges collapsed), plus the
    manual and backfill runs there, in time order, at most `limit` entries. `backfills` are
    the job's (only its catch-ups are read: they hold missed occurrences not fired yet)."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    entries: list[Entry] = []
    by_instant: dict[datetime, Run] = {}
    for run in sorted(runs, key=lambda r: r.id):
        if run.origin in _OCCURRENCE_ORIGINS:
            by_instant.setdefault(run.scheduled_for, run)
        else:
            reason = _BY_ORIGIN.get(run.origin, REASONS[Outcome.FIRED])
            entries.append(_run_entry(run, reason))
    entries.extend(_run_entry(run, _run_reason(run)) for run in by_instant.values())
    spans = sorted(ranges, key=lambda r: (r.first, r.id or 0))
    entries.extend(_range_entry(job, r, by_instant) for r in spans)
    catchups = [b for b in backfills if b.kind is BackfillKind.CATCHUP]
    entries.extend(_unrecorded(job, start, end, by_instant, spans, catchups, limit))
    entries.sort(key=lambda e: (e.at, e.origin not in (None, *_OCCURRENCE_ORIGINS)))
    return entries[:limit]


def _run_reason(run: Run) -> str:
    if run.origin is RunOrigin.CATCHUP:
        return _BY_ORIGIN[RunOrigin.CATCHUP]
    if run.coalesced:
        return f"fired for itself and {run.coalesced} missed before it (misfire policy coalesce)"
    if run.throttled_ms is not None and run_outcome(run) is Outcome.THROTTLED:
        return (
            f"fired {run.throttled_ms} ms late: the global fire ceiling held it back"
            " (throttling, not a miss)"
        )
    return REASONS[run_outcome(run)]


def _run_entry(run: Run, reason: str) -> Entry:
    return Entry(
        at=run.scheduled_for,
        outcome=run_outcome(run),
        reason=reason,
        run=run,
        run_id=run.id,
        origin=run.origin,
    )


def _range_entry(job: Job, span: LedgerRange, runs: dict[datetime, Run]) -> Entry:
    outcome = Outcome(span.reason.value)
    into = next((r for r in runs.values() if r.id == span.run_id), None)
    reason = REASONS[outcome]
    if outcome is Outcome.SKIPPED_MISFIRE and job.schedule.misfire is MisfirePolicy.FIRE_ALL:
        reason = beyond_catchup_window(job.schedule)
    return Entry(
        at=span.first,
        outcome=outcome,
        reason=reason,
        count=span.count,
        last=span.last,
        run=into,
        run_id=span.run_id,
    )


def _unrecorded(
    job: Job,
    start: datetime,
    end: datetime,
    runs: dict[datetime, Run],
    spans: Sequence[LedgerRange],
    catchups: Sequence[Backfill],
    limit: int,
) -> list[Entry]:
    """The occurrences in [start, end] that neither a run nor a range holds; none before the
    job was created (a cron job created at 10:00:30 starts with 10:01)."""
    pending_from = _nominal_next(job) if job.state is not JobState.COMPLETED else None
    found: list[Entry] = []
    instant = next_occurrence(job.schedule, _implied_after(job, start))
    while instant is not None and instant <= end and len(found) < limit:
        span = next((s for s in spans if s.first <= instant <= s.last), None)
        if span is not None:
            instant = next_occurrence(job.schedule, span.last)
            continue
        if instant not in runs:
            catchup = _catching_up(catchups, instant)
            if catchup is not None:
                found.append(_caught_up(catchup, instant))
            elif pending_from is not None and instant >= pending_from:
                found.append(_pending(job, instant))
            elif job.state is JobState.COMPLETED and _after_completion(job, instant):
                break
            else:
                unknown = REASONS[Outcome.UNKNOWN]
                found.append(Entry(at=instant, outcome=Outcome.UNKNOWN, reason=unknown))
        instant = next_occurrence(job.schedule, instant)
    return found


def _catching_up(catchups: Sequence[Backfill], instant: datetime) -> Backfill | None:
    """The catch-up that holds `instant` and has not enqueued it (running, or cancelled
    before it did), if any."""
    for backfill in catchups:
        if (
            backfill.state is not BackfillState.COMPLETED
            and backfill.from_at <= instant < backfill.to_at
            and (backfill.cursor_at is None or instant > backfill.cursor_at)
        ):
            return backfill
    return None


def _caught_up(catchup: Backfill, instant: datetime) -> Entry:
    if catchup.state is BackfillState.CANCELLED:
        reason = (
            f"missed while the scheduler was down; its catch-up {catchup.id} was cancelled"
            " before firing it (misfire policy fire_all)"
        )
        outcome = Outcome.SKIPPED_MISFIRE
    else:
        reason = (
            f"missed while the scheduler was down; catch-up {catchup.id} will fire it late,"
            " paced (misfire policy fire_all)"
        )
        outcome = Outcome.SCHEDULED
    return Entry(at=instant, outcome=outcome, reason=reason, catchup_id=catchup.id)


def beyond_catchup_window(schedule: Schedule) -> str:
    """Why a fire_all job skipped a missed occurrence: too old to catch up."""
    window = format_duration_ms(schedule.catchup_window_ms)
    return (
        f"missed past the misfire grace and older than catchup_window ({window}) when the job"
        " was found late: not caught up (misfire policy fire_all)"
    )


def _implied_after(job: Job, start: datetime) -> datetime:
    """The instant after which the job's occurrences from `start` on count: not before it
    was created, as `first_fire` armed it (a cron job's first fire is strictly after its
    creation, an interval's may be at it; a one-shot's instant always counts)."""
    after = start - _ONE_US
    created = job.created_at.astimezone(UTC)
    if isinstance(job.schedule.trigger, CronTrigger):
        return max(after, created)
    if isinstance(job.schedule.trigger, EveryTrigger):
        return max(after, created - _ONE_US)
    return after


def _pending(job: Job, instant: datetime) -> Entry:
    if job.state is JobState.PAUSED:
        note = f" (note: {job.pause_note})" if job.pause_note else ""
        return Entry(at=instant, outcome=Outcome.PAUSED, reason=f"the job is paused{note}")
    return Entry(at=instant, outcome=Outcome.SCHEDULED, reason=REASONS[Outcome.SCHEDULED])


def _after_completion(job: Job, instant: datetime) -> bool:
    """A completed job implies nothing after its last fire (max_runs reached)."""
    return job.last_fired_at is None or instant > job.last_fired_at


def _nominal_next(job: Job) -> datetime | None:
    """The nominal instant of the job's next occurrence (its next_run_at is the planned one,
    moved by a jitter or window: ADR 0022)."""
    return None if job.next_run_at is None else nominal_of(job.schedule, job.next_run_at)


def paused_range(job: Job, resumed: Job, now: datetime) -> LedgerRange | None:
    """What resuming `job` (paused) as `resumed` passed over: the occurrences from the one it
    was due to fire next up to, not including, the resumed job's next (up to `now` if it
    completed), as one `paused` range; None when the schedule implied none."""
    first = _nominal_next(job)
    if job.state is not JobState.PAUSED or first is None:
        return None
    until = now if resumed.next_run_at is None else resumed.next_run_at.astimezone(UTC) - _ONE_US
    if first > until:
        return None
    last = latest_occurrence(job.schedule, at_or_before=until, not_before=first)
    if last is None:
        return None
    count = 1 + count_occurrences(job.schedule, after=first, until=last, cap=_MAX_COUNTED)
    return LedgerRange(
        job_id=job.id,
        first=first,
        last=last,
        count=count,
        reason=LedgerReason.PAUSED,
        run_id=None,
        recorded_at=now,
    )


def occurrences_of(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    """Every occurrence in [start, end] (for tests and small windows)."""
    found: list[datetime] = []
    instant = next_occurrence(schedule, start.astimezone(UTC) - _ONE_US)
    while instant is not None and instant <= end:
        found.append(instant)
        instant = next_occurrence(schedule, instant)
    return found
