"""Show the next fires of a schedule, explaining what a clock change did to each.

`preview_schedule` lists the fires of any schedule (cron, every, at) as the scheduler fires
them: the same `next_occurrence` steps, so start_at and end_at apply, and it stops where
max_runs completes the job. `preview_cron` lists a bare cron expression's fires with notes.

Notes are derived from the zone's real offsets, not from cronsim internals: an occurrence is
"moved" when it lands exactly on a forward jump and wall times inside the skipped stretch match
the expression; an occurrence is "repeated" when its local wall time exists twice. Ordinary
occurrences carry no note. A job's explicit DST choices (`gap`, `repeat`) are named in the notes
of the occurrences they touched ("skipped (dst gap: skip)", "as dst repeat: second"); a choice left
at `cron` keeps Debian's wording.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from enum import StrEnum

from tickwork.clock import utc_iso
from tickwork.domain.jobs import AtTrigger, CronTrigger, DstGap, DstRepeat, Schedule, Trigger
from tickwork.errors import InvalidInput
from tickwork.timing.cron import CronExpression, bisect_offset_change, first_offset_change
from tickwork.timing.triggers import count_occurrences, first_occurrence, next_occurrence

MAX_PREVIEW = 1000
_ONE_US = timedelta(microseconds=1)
_MAX_LISTED = 4  # skipped wall times spelled out in a note before "and N more"
_MAX_SCANNED = 100  # skipped wall times counted in a note (per-second expressions have 3600)


@dataclass(frozen=True, kw_only=True, slots=True)
class PreviewEntry:
    utc: datetime  # the fire instant
    local: datetime  # the same instant in the expression's zone; for display only (by PEP 495
    # an ambiguous local time never compares equal to an instant in another zone: compare .utc)
    note: str | None  # what a DST change did to this occurrence, if anything


def preview_cron(
    expr: str,
    timezone: str,
    after: datetime,
    count: int,
    *,
    gap: DstGap = DstGap.CRON,
    repeat: DstRepeat = DstRepeat.CRON,
) -> list[PreviewEntry]:
    """The first `count` (1..1000) fires strictly after `after`, with DST notes, for a job
    with these DST choices."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW:
        raise InvalidInput(
            "count", f"count must be a whole number from 1 to {MAX_PREVIEW}, got {count!r}"
        )
    if not isinstance(after, datetime) or after.utcoffset() is None:
        raise InvalidInput(
            "after", "needs a date-time with a UTC offset, e.g. '2026-05-01T09:00:00Z'"
        )
    cron = CronExpression.parse(expr, timezone, gap, repeat)
    debian = cron.gap is DstGap.CRON and cron.repeat is DstRepeat.CRON
    entries: list[PreviewEntry] = []
    previous = after.astimezone(UTC)
    for instant in itertools.islice(cron.iter_after(previous), count):
        local = instant.astimezone(cron.zone)
        if not debian:
            note = _choice_note(cron, previous, local)
        elif cron.fixed_time:
            note = _fixed_note(cron, local)
        else:
            note = _elapsed_note(cron, previous, local)
        entries.append(PreviewEntry(utc=instant, local=local, note=note))
        previous = instant
    return entries


def _fixed_note(cron: CronExpression, local: datetime) -> str | None:
    jump = _jump_landing_at(cron.zone, local)
    if jump is not None:
        gap_start, gap_end = jump
        moved = _matching_walls(cron, gap_start, gap_end)
        if moved:
            return _moved_note(cron, local, moved, gap_start, gap_end)
    if _is_repeated(local):
        return (
            f"{_hm(local)} happens twice on {local.date().isoformat()} in {cron.timezone} "
            f"({_fall_back_phrase(cron.zone, local)}); fires once, at the first "
            f"({local.tzname()})"
        )
    return None


def _moved_note(
    cron: CronExpression,
    local: datetime,
    moved: list[datetime],
    gap_start: datetime,
    gap_end: datetime,
) -> str:
    times = _list_walls(moved)
    verb = "does" if len(moved) == 1 else "do"
    note = (
        f"{times} {verb} not exist on {gap_start.date().isoformat()} in {cron.timezone} "
        f"({_change('jump', gap_start, gap_end)}); fires "
        f"{'' if len(moved) == 1 else 'once '}at {_hm(local)} {local.tzname()} instead"
    )
    if cron.next_matching_wall(gap_end - _ONE_US) == gap_end:
        note += f", together with the regular {_hm(gap_end)} run"
    return note


def _elapsed_note(cron: CronExpression, previous: datetime, local: datetime) -> str | None:
    notes = [_skipped_note(cron, start, end) for start, end in _gaps(cron.zone, previous, local)]
    if _is_repeated(local):
        which = "second" if local.fold else "first"
        notes.append(
            f"{_hm(local)} happens twice on {local.date().isoformat()} in {cron.timezone} "
            f"({_fall_back_phrase(cron.zone, local)}); this expression follows elapsed time, "
            f"so it fires at both: this is the {which} ({local.tzname()})"
        )
    text = "; ".join(note for note in notes if note)
    return text or None


def _skipped_note(cron: CronExpression, gap_start: datetime, gap_end: datetime) -> str | None:
    skipped = _matching_walls(cron, gap_start, gap_end)
    if not skipped:
        return None
    last = gap_end - timedelta(minutes=1)
    return (
        f"{_hm(gap_start)}-{_hm(last)} does not exist on {gap_start.date().isoformat()} in "
        f"{cron.timezone} ({_change('jump', gap_start, gap_end)}); {_list_walls(skipped)} "
        f"in that stretch {'does' if len(skipped) == 1 else 'do'} not fire, because this "
        "expression follows elapsed time"
    )


def _choice_note(cron: CronExpression, previous: datetime, local: datetime) -> str | None:
    """Notes for a job with at least one explicit DST choice; the other keeps Debian's words."""
    gap, repeat = cron.rules
    notes: list[str | None] = []
    for gap_start, gap_end in _gaps(cron.zone, previous, local):
        walls = _matching_walls(cron, gap_start, gap_end)
        if not walls:
            continue
        if gap is DstGap.SKIP and cron.gap is DstGap.CRON:
            notes.append(_skipped_note(cron, gap_start, gap_end))
        elif gap is DstGap.SKIP:
            notes.append(
                f"{_list_walls(walls)} {'does' if len(walls) == 1 else 'do'} not exist on "
                f"{gap_start.date().isoformat()} in {cron.timezone} "
                f"({_change('jump', gap_start, gap_end)}); skipped (dst gap: skip)"
            )
        else:
            note = _moved_note(cron, local, walls, gap_start, gap_end)
            notes.append(note if cron.gap is DstGap.CRON else f"{note} (dst gap: shift)")
    if _is_repeated(local):
        notes.append(_repeat_note(cron, local, repeat))
    return "; ".join(note for note in notes if note) or None


def _repeat_note(cron: CronExpression, local: datetime, repeat: DstRepeat) -> str:
    head = (
        f"{_hm(local)} happens twice on {local.date().isoformat()} in {cron.timezone} "
        f"({_fall_back_phrase(cron.zone, local)})"
    )
    which = "second" if local.fold else "first"
    if cron.repeat is DstRepeat.CRON:  # Debian's words for the expression's kind
        if cron.fixed_time:
            return f"{head}; fires once, at the first ({local.tzname()})"
        return (
            f"{head}; this expression follows elapsed time, so it fires at both: this is the "
            f"{which} ({local.tzname()})"
        )
    if repeat is DstRepeat.SECOND:
        first = local.replace(fold=0).tzname()
        return f"{head}; fires at the second ({first}->{local.tzname()}), as dst repeat: second"
    if repeat is DstRepeat.FIRST:
        return f"{head}; fires once, at the first ({local.tzname()}), as dst repeat: first"
    return f"{head}; fires at both: this is the {which} ({local.tzname()}), as dst repeat: both"


# --- clock-change geometry -----------------------------------------------------------------


def _jump_landing_at(zone: tzinfo, local: datetime) -> tuple[datetime, datetime] | None:
    """If the clocks jump forward exactly at this instant: the skipped naive walls [start, end)."""
    instant = local.astimezone(UTC)
    before = (instant - _ONE_US).astimezone(zone).utcoffset()
    after = local.utcoffset()
    if before is None or after is None or after <= before:
        return None
    naive = instant.replace(tzinfo=None)
    return naive + before, naive + after


def _gaps(zone: tzinfo, previous: datetime, local: datetime) -> list[tuple[datetime, datetime]]:
    """Forward jumps in (previous, local], as skipped naive walls [start, end)."""
    gaps: list[tuple[datetime, datetime]] = []
    lo, hi = previous.astimezone(UTC), local.astimezone(UTC)
    offset = _offset(zone, lo)
    while (change := first_offset_change(zone, offset, lo, hi)) is not None:
        new_offset = _offset(zone, change)
        if new_offset > offset:
            naive = change.replace(tzinfo=None)
            gaps.append((naive + offset, naive + new_offset))
        lo, offset = change, new_offset
    return gaps


def _is_repeated(local: datetime) -> bool:
    return local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset()


def _fall_back_phrase(zone: tzinfo, local: datetime) -> str:
    first = local.replace(fold=0).astimezone(UTC)
    second = local.replace(fold=1).astimezone(UTC)
    change = bisect_offset_change(zone, first, second)
    naive = change.replace(tzinfo=None)
    before, after = _offset(zone, first), _offset(zone, change)
    return _change("go back", naive + before, naive + after)


def _matching_walls(cron: CronExpression, start: datetime, end: datetime) -> list[datetime]:
    """Naive wall times in [start, end) the expression matches (at most _MAX_SCANNED)."""
    walls: list[datetime] = []
    wall = cron.next_matching_wall(start - _ONE_US)
    while wall is not None and wall < end and len(walls) < _MAX_SCANNED:
        walls.append(wall)
        wall = cron.next_matching_wall(wall)
    return walls


def _offset(zone: tzinfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _hm(wall: datetime) -> str:
    return wall.strftime("%H:%M:%S" if wall.second else "%H:%M")


def _change(verb: str, old_wall: datetime, new_wall: datetime) -> str:
    """'clocks jump 02:00->03:00'; with dates when the change crosses midnight."""
    if old_wall.date() == new_wall.date():
        return f"clocks {verb} {_hm(old_wall)}->{_hm(new_wall)}"
    old, new = old_wall.date().isoformat(), new_wall.date().isoformat()
    return f"clocks {verb} {old} {_hm(old_wall)}->{new} {_hm(new_wall)}"


def _list_walls(walls: list[datetime]) -> str:
    shown = [_hm(wall) for wall in walls[:_MAX_LISTED]]
    if len(walls) > _MAX_LISTED:
        more = f"{len(walls) - _MAX_LISTED}{'+' if len(walls) >= _MAX_SCANNED else ''}"
        return ", ".join(shown) + f" and {more} more"
    if len(shown) == 1:
        return shown[0]
    return ", ".join(shown[:-1]) + " and " + shown[-1]


# --- any schedule, as the scheduler fires it -----------------------------------------------

# With max_runs, fires a preview passes over (a job's fires up to `after`) count against it;
# counting a cron schedule walks them one by one, so no further than this.
MAX_PASSED_OVER = 10_000


class EndReason(StrEnum):
    """Why a schedule has no fire after the last one listed."""

    MAX_RUNS = "max_runs"  # that fire is the max_runs-th: the job then completes
    END_AT = "end_at"  # the next occurrence would lie after end_at
    ONE_SHOT = "one_shot"  # an `at` schedule fires once
    HORIZON = "horizon"  # cron: no further match within cronsim's 50-year search
    COMPLETED = "completed"  # a job that is completed for none of the reasons above


@dataclass(frozen=True, kw_only=True, slots=True)
class PreviewEnd:
    reason: EndReason
    message: str


@dataclass(frozen=True, kw_only=True, slots=True)
class SchedulePreview:
    fires: list[PreviewEntry]
    # Set when the schedule has no fire after the last one listed (or none at all): why.
    # None: more fires follow.
    ends: PreviewEnd | None


def preview_schedule(
    schedule: Schedule,
    after: datetime,
    count: int,
    *,
    fired_count: int = 0,
    first: datetime | None = None,
) -> SchedulePreview:
    """The next `count` (1..1000) fires of `schedule`, each the `next_occurrence` of the one
    before (what the scheduler does when every fire is on time), stopping at the one that
    reaches `max_runs` (`fired_count` fires already made) or where the schedule ends.

    - `first` None: the fires of a job created (or resumed) at `after`, the first being
      `first_occurrence(schedule, after)`; a one-shot whose `at` has passed still fires once.
    - `first` given (a job's next_run_at): the fires from `first` on, inclusive; those at or
      before `after` are not listed but do count against max_runs.

    Cron fires carry the DST notes of `preview_cron`; every and at fires carry none.
    """
    _check_preview(after, count)
    after = after.astimezone(UTC)
    remaining = None if schedule.max_runs is None else max(schedule.max_runs - fired_count, 0)
    passed = 0
    if first is None:
        start = first_occurrence(schedule, after)
    else:
        start, passed = _first_listed(schedule, first.astimezone(UTC), after, remaining)
    instants: list[datetime] = []
    following = start
    while following is not None and len(instants) < count:
        if remaining is not None and passed + len(instants) >= remaining:
            break
        instants.append(following)
        following = next_occurrence(schedule, following)
    runs_out = remaining is not None and passed + len(instants) >= remaining
    ends = None
    if runs_out:
        ends = _max_runs_end(schedule, bool(instants))
    elif following is None:
        ends = schedule_end(schedule)
    # A new job's first cron fire is the first after `after`: its notes then also tell of a
    # clock change between the two, as preview_cron's do.
    from_after = first is None and (schedule.start_at is None or schedule.start_at <= after)
    fires = _entries(schedule, after, instants, notes_from=after if from_after else None)
    return SchedulePreview(fires=fires, ends=ends)


def schedule_end(schedule: Schedule) -> PreviewEnd:
    """Why a schedule with no further occurrence (max_runs aside) has none."""
    if isinstance(schedule.trigger, AtTrigger):
        return PreviewEnd(reason=EndReason.ONE_SHOT, message="a one-shot schedule fires once")
    if schedule.end_at is not None:
        return PreviewEnd(
            reason=EndReason.END_AT,
            message=f"no further occurrence falls at or before end_at ({utc_iso(schedule.end_at)})",
        )
    return PreviewEnd(
        reason=EndReason.HORIZON,
        message="the expression matches no instant in the next 50 years",
    )


def _max_runs_end(schedule: Schedule, listed: bool) -> PreviewEnd:
    limit = schedule.max_runs
    message = (
        f"the last fire listed is fire number {limit} (max_runs {limit}): the job then completes"
        if listed
        else f"max_runs {limit} is reached: no fire is left"
    )
    return PreviewEnd(reason=EndReason.MAX_RUNS, message=message)


def _first_listed(
    schedule: Schedule, first: datetime, after: datetime, remaining: int | None
) -> tuple[datetime | None, int]:
    """The first fire after `after` of the fires from `first` on, and how many it passed."""
    if first > after:
        return first, 0
    passed = 0
    if remaining is not None:
        cap = min(remaining, MAX_PASSED_OVER + 1)
        passed = 1 + count_occurrences(schedule, after=first, until=after, cap=cap)
        if passed > MAX_PASSED_OVER:
            raise InvalidInput(
                "after",
                f"more than {MAX_PASSED_OVER} fires lie between the job's next fire "
                f"({utc_iso(first)}) and after, and with max_runs each must be counted; "
                "give an earlier after",
                code="after_too_far",
            )
    return next_occurrence(schedule, after), passed


def _entries(
    schedule: Schedule,
    after: datetime,
    instants: list[datetime],
    *,
    notes_from: datetime | None,
) -> list[PreviewEntry]:
    trigger = schedule.trigger
    if isinstance(trigger, CronTrigger):
        return _cron_entries(schedule, trigger, instants, notes_from)
    return [
        _entry(schedule, instant, instant, _late_note(trigger, instant, after))
        for instant in instants
    ]


def _cron_entries(
    schedule: Schedule, trigger: CronTrigger, instants: list[datetime], notes_from: datetime | None
) -> list[PreviewEntry]:
    """The cron fires with their local times and DST notes.

    The one place a schedule's cron fires get their notes, with the schedule's DST choices
    (`schedule.dst_gap`, `schedule.dst_repeat`). The instants stay those `next_occurrence`
    gave; a note attaches only to an instant `preview_cron` lists too."""
    if not instants:
        return []
    start = instants[0] - _ONE_US if notes_from is None else notes_from
    listed = preview_cron(
        trigger.expr,
        trigger.timezone,
        start,
        len(instants),
        gap=schedule.dst_gap,
        repeat=schedule.dst_repeat,
    )
    noted = {e.utc: e for e in listed}
    zone = CronExpression.parse(trigger.expr, trigger.timezone).zone
    entries = []
    for instant in instants:
        found = noted.get(instant)
        local = found.local if found else instant.astimezone(zone)
        entries.append(_entry(schedule, instant, local, found.note if found else None))
    return entries


def _entry(
    schedule: Schedule, nominal: datetime, local: datetime, note: str | None
) -> PreviewEntry:
    """One listed fire. Hook for jitter and fire windows (a later issue): a schedule that
    spreads its fires would say here over which stretch this occurrence may start. `utc`
    stays the nominal instant, which is what run keys and the occurrence ledger use."""
    del schedule  # read by that hook only
    return PreviewEntry(utc=nominal, local=local, note=note)


def _late_note(trigger: Trigger, instant: datetime, after: datetime) -> str | None:
    if isinstance(trigger, AtTrigger) and instant <= after:
        return f"already past at {utc_iso(after)}: a one-shot that is late fires once, at once"
    return None


def _check_preview(after: datetime, count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PREVIEW:
        raise InvalidInput(
            "count", f"count must be a whole number from 1 to {MAX_PREVIEW}, got {count!r}"
        )
    if not isinstance(after, datetime) or after.utcoffset() is None:
        raise InvalidInput(
            "after", "needs a date-time with a UTC offset, e.g. '2026-05-01T09:00:00Z'"
        )
