"""Pure: an occurrence's planned instant under its schedule's jitter or window, and back.

A job's stored `next_run_at` (the indexed instant the scheduler claims by) is the PLANNED
instant of its next occurrence: the nominal instant moved by `schedule.jitter` (a delay drawn
from the occurrence) or placed inside `schedule.window` (the least loaded second, ADR 0022).
The nominal instant is the occurrence's identity (its key, `scheduled_for`, the ledger), and
it is not stored: both shifts keep the planned instant in [nominal, next occurrence), so the
nominal one is the latest occurrence at or before the planned one (`nominal_of`). That keeps
the claim's statements unchanged for shifted jobs: they advance `next_run_at` as for any job.

A schedule without jitter or window is not shifted: every function here returns its input
unchanged without computing anything, so plain jobs pay nothing for this module.

No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta

from tickwork.clock import to_us
from tickwork.domain.jobs import Schedule
from tickwork.timing.durations import format_duration_ms
from tickwork.timing.jitter import planned_instant
from tickwork.timing.triggers import latest_occurrence, next_occurrence
from tickwork.timing.window import LoadMap, place_in_window

__all__ = [
    "is_shifted",
    "known_planned",
    "nominal_of",
    "planned_of",
    "shift_ms",
    "shift_note",
    "window_seconds",
]

_ONE_MS = timedelta(milliseconds=1)


def shift_ms(schedule: Schedule) -> int:
    """How far past its nominal instant an occurrence may be planned (0: not shifted)."""
    return schedule.jitter_ms or schedule.window_ms


def is_shifted(schedule: Schedule) -> bool:
    return bool(schedule.jitter_ms or schedule.window_ms)


def nominal_of(schedule: Schedule, planned: datetime) -> datetime:
    """The nominal instant of the occurrence planned at `planned`: the latest occurrence at or
    before it, no further back than the schedule's shift. `planned` itself when the schedule
    is not shifted or nothing is found (a row written before the schedule had a shift)."""
    shift = shift_ms(schedule)
    if not shift:
        return planned
    planned = planned.astimezone(UTC)
    found = latest_occurrence(
        schedule,
        at_or_before=planned,
        not_before=planned - timedelta(milliseconds=shift) - _ONE_MS,
    )
    return planned if found is None else found


def planned_of(
    job_id: str,
    schedule: Schedule,
    nominal: datetime,
    *,
    load: Mapping[int, int] | None = None,
) -> datetime:
    """The instant the occurrence at `nominal` fires at: nominal plus its jitter delay, or its
    place in the window (a least loaded second by `load`, epoch second -> fires already
    planned; a `LoadMap` is also counted the placement, so a planner placing many in a row
    spreads them). Strictly before the next occurrence either way (ADR 0022)."""
    if not is_shifted(schedule):
        return nominal
    following = next_occurrence(schedule, nominal)
    if schedule.jitter_ms:
        return planned_instant(job_id, nominal, schedule.jitter_ms, next_nominal=following)
    placed = place_in_window(
        job_id, nominal, schedule.window_ms, next_nominal=following, load=load or {}
    )
    if isinstance(load, LoadMap):
        load.add(placed)
    return placed


def known_planned(
    job_id: str, schedule: Schedule, occurrence: datetime, next_planned: datetime | None
) -> datetime | None:
    """The instant `occurrence` (nominal) fires at as far as is known before it fires: the
    job's stored `next_planned` if it is that occurrence's, else its jitter's draw (the same
    on every scheduler); None for a windowed occurrence not placed yet (placed when the one
    before it is claimed) and for an unshifted schedule (it fires at its instant)."""
    if not is_shifted(schedule):
        return None
    if next_planned is not None and nominal_of(schedule, next_planned) == occurrence:
        return next_planned
    if schedule.jitter_ms:
        return planned_of(job_id, schedule, occurrence)
    return None


def shift_note(schedule: Schedule) -> str | None:
    """One line saying how the schedule moves its occurrences; None if it does not."""
    if schedule.jitter_ms:
        return (
            f"jitter {format_duration_ms(schedule.jitter_ms)}: fires a delay drawn from the"
            " occurrence after its instant"
        )
    if schedule.window_ms:
        return (
            f"window {format_duration_ms(schedule.window_ms)}: fires in the least loaded second"
            " of its window, chosen when the occurrence before it is claimed"
        )
    return None


def window_seconds(schedule: Schedule, nominal: datetime) -> tuple[int, int] | None:
    """The epoch seconds [first, last] a window placement of `nominal` reads the load of;
    None when the schedule has no window (jitter reads no load)."""
    if not schedule.window_ms:
        return None
    start_us = to_us(nominal)
    return start_us // 1_000_000, (start_us + schedule.window_ms * 1_000 - 1) // 1_000_000
