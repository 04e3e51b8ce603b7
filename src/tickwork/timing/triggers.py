"""Occurrences of a `Schedule`: when a job fires, given the instants the caller passes in.

An occurrence is an instant the trigger produces that also lies inside the schedule's bounds,
both ends inclusive: `start_at <= occurrence <= end_at`.

- cron: the fire instants of `CronExpression.parse(expr, timezone, dst_gap, dst_repeat)`.
- every: `anchor + k * interval_ms` for k = 0, 1, 2, ...; the anchor is the first occurrence,
  nothing is extrapolated before it. Computed with integer microseconds, never by looping.
- at: the single instant `at`.

These run on the scheduler's hot path, once per fired job: cron expressions come from the parse
cache, intervals are pure integer arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from tickwork.clock import from_us, to_us
from tickwork.domain.jobs import (
    MAX_CATCHUP_WINDOW_MS,
    MAX_SHIFT_MS,
    MIN_CATCHUP_WINDOW_MS,
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    Schedule,
)
from tickwork.errors import InvalidInput
from tickwork.timing.cron import CronExpression
from tickwork.timing.durations import MAX_INTERVAL_MS, format_duration_ms, parse_duration_ms

_ONE_US = timedelta(microseconds=1)


def _just_before(instant: datetime) -> datetime:
    """The instant one microsecond earlier, in UTC. Subtracting from a datetime in a DST zone
    is wall-clock arithmetic: 03:00 on a spring-forward day minus 1 us is 02:59:59.999999, a
    local time that does not exist and maps an hour off. UTC has no such gaps."""
    return instant.astimezone(UTC) - _ONE_US


def validate_schedule(schedule: Schedule) -> None:
    """Raise InvalidInput (naming the field) unless the schedule is well formed and can fire.

    "Can fire" is judged without a clock: there must be at least one occurrence inside
    [start_at, end_at]. A window that is entirely in the past passes here; the job simply has
    no first occurrence and is completed when created.
    """
    _check_bounds(schedule)
    trigger = schedule.trigger
    if isinstance(trigger, CronTrigger):
        _cron(schedule)
    elif isinstance(trigger, EveryTrigger):
        _check_every(trigger)
    else:
        _require_aware(trigger.at, "schedule.at")
    if schedule.misfire_grace_ms < 0:
        raise InvalidInput(
            "schedule.misfire_grace_ms", "misfire grace must be 0 ms or more", code="invalid"
        )
    _check_catchup_window(schedule.catchup_window_ms)
    _check_shift(schedule)
    _check_can_fire(schedule)


_SHIFT_FIX = (
    "give an ISO-8601 duration up to P1D, e.g. 'PT30S' or 'PT5M', or null (or 'PT0S') for none"
)


def parse_shift_ms(value: str | int | float, field: str) -> int:
    """`schedule.jitter` or `schedule.window` (ISO-8601 or seconds) in milliseconds, 0 .. P1D."""
    if value in (0, "PT0S", "P0D", "0"):
        return 0
    try:
        shift_ms = parse_duration_ms(value, field=field)
    except InvalidInput:
        raise InvalidInput(field, _SHIFT_FIX, code="invalid_shift") from None
    if shift_ms > MAX_SHIFT_MS:
        raise InvalidInput(field, _SHIFT_FIX, code="invalid_shift")
    return shift_ms


def _check_shift(schedule: Schedule) -> None:
    for field, shift_ms in (
        ("schedule.jitter", schedule.jitter_ms),
        ("schedule.window", schedule.window_ms),
    ):
        if not 0 <= shift_ms <= MAX_SHIFT_MS:
            raise InvalidInput(field, _SHIFT_FIX, code="invalid_shift")
    if schedule.jitter_ms and schedule.window_ms:
        raise InvalidInput(
            "schedule.window",
            "give jitter or window, not both: jitter delays each fire blindly, a window places"
            " it in the least loaded second; remove one",
            code="jitter_and_window",
        )


_CATCHUP_WINDOW = "schedule.catchup_window"
_CATCHUP_WINDOW_FIX = (
    "give an ISO-8601 duration from PT1S to P366D in weeks, days, hours, minutes or seconds,"
    " e.g. 'PT6H' or 'P2D' (the default is P1D)"
)


def parse_catchup_window_ms(value: str | int | float) -> int:
    """`schedule.catchup_window` (ISO-8601 or seconds) in milliseconds, PT1S .. P366D."""
    try:
        window_ms = parse_duration_ms(value, field=_CATCHUP_WINDOW)
    except InvalidInput:
        # One message for every way it is wrong: the interval parser's speaks of schedules
        # (and the value is not echoed: a number may have thousands of digits).
        raise InvalidInput(
            _CATCHUP_WINDOW, _CATCHUP_WINDOW_FIX, code="invalid_catchup_window"
        ) from None
    _check_catchup_window(window_ms)
    return window_ms


def _check_catchup_window(window_ms: int) -> None:
    if not MIN_CATCHUP_WINDOW_MS <= window_ms <= MAX_CATCHUP_WINDOW_MS:
        raise InvalidInput(_CATCHUP_WINDOW, _CATCHUP_WINDOW_FIX, code="invalid_catchup_window")


def next_occurrence(schedule: Schedule, after: datetime) -> datetime | None:
    """The first occurrence strictly after `after`; None if the schedule has no more."""
    start_at = schedule.start_at
    if start_at is not None and start_at > after:
        after = _just_before(start_at)  # an occurrence exactly at start_at counts
    found = _next_raw(schedule, after)
    if found is None or (schedule.end_at is not None and found > schedule.end_at):
        return None
    return found


def first_occurrence(schedule: Schedule, now: datetime) -> datetime | None:
    """Where a newly created (or resumed) job starts; None: no future occurrence, complete it.

    - cron: the first fire strictly after `now` (a fire due exactly now has already passed).
    - every: the first `anchor + k * interval` at or after `now`, so an anchor equal to `now`
      fires now and a future anchor is the first fire.
    - at: the `at` instant even when it is in the past: a late one-shot still fires, once.
    """
    trigger = schedule.trigger
    if isinstance(trigger, CronTrigger):
        return next_occurrence(schedule, now)
    if isinstance(trigger, EveryTrigger):
        return next_occurrence(schedule, _just_before(now))
    at = trigger.at.astimezone(UTC)
    return at if _in_bounds(schedule, at) else None


def latest_occurrence(
    schedule: Schedule, *, at_or_before: datetime, not_before: datetime
) -> datetime | None:
    """The latest occurrence in [not_before, at_or_before]; None if there is none."""
    lo, hi = _clip(schedule, not_before, at_or_before)
    if hi < lo:
        return None
    trigger = schedule.trigger
    if isinstance(trigger, CronTrigger):
        found = _cron(schedule).latest_at_or_before(hi)
    elif isinstance(trigger, EveryTrigger):
        found = _every_at_or_before(trigger, hi)
    else:
        found = trigger.at.astimezone(UTC) if trigger.at <= hi else None
    return found if found is not None and found >= lo else None


def count_occurrences(
    schedule: Schedule, *, after: datetime, until: datetime, cap: int = 10_000
) -> int:
    """How many occurrences lie in (after, until], counting no further than `cap`."""
    start_at = schedule.start_at
    lo_exclusive = after if start_at is None or start_at <= after else _just_before(start_at)
    hi = until if schedule.end_at is None else min(until, schedule.end_at)
    if hi <= lo_exclusive or cap <= 0:
        return 0
    trigger = schedule.trigger
    if isinstance(trigger, EveryTrigger):
        return min(cap, _every_count(trigger, lo_exclusive, hi))
    if isinstance(trigger, AtTrigger):
        return 1 if lo_exclusive < trigger.at <= hi else 0
    return _count_up_to(_cron(schedule).iter_after(lo_exclusive), hi, cap)


# --- per-trigger arithmetic ----------------------------------------------------------------


def _next_raw(schedule: Schedule, after: datetime) -> datetime | None:
    trigger = schedule.trigger
    if isinstance(trigger, CronTrigger):
        return _cron(schedule).next_after(after)
    if isinstance(trigger, EveryTrigger):
        return from_us(_every_after_us(trigger, to_us(after)))
    at = trigger.at
    return at.astimezone(UTC) if at > after else None


def _cron(schedule: Schedule) -> CronExpression:
    """The schedule's cron expression with its DST choices; only for cron schedules."""
    trigger = schedule.trigger
    assert isinstance(trigger, CronTrigger)
    return CronExpression.parse(
        trigger.expr, trigger.timezone, schedule.dst_gap, schedule.dst_repeat
    )


def _every_after_us(trigger: EveryTrigger, after_us: int) -> int:
    anchor_us, step_us = to_us(trigger.anchor), trigger.interval_ms * 1000
    if after_us < anchor_us:
        return anchor_us
    return anchor_us + ((after_us - anchor_us) // step_us + 1) * step_us


def _every_at_or_before(trigger: EveryTrigger, when: datetime) -> datetime | None:
    anchor_us, step_us = to_us(trigger.anchor), trigger.interval_ms * 1000
    when_us = to_us(when)
    if when_us < anchor_us:
        return None
    return from_us(anchor_us + (when_us - anchor_us) // step_us * step_us)


def _every_count(trigger: EveryTrigger, lo_exclusive: datetime, hi: datetime) -> int:
    first_us = _every_after_us(trigger, to_us(lo_exclusive))
    hi_us = to_us(hi)
    if first_us > hi_us:
        return 0
    return (hi_us - first_us) // (trigger.interval_ms * 1000) + 1


def _count_up_to(instants: Iterator[datetime], hi: datetime, cap: int) -> int:
    count = 0
    for instant in instants:
        if instant > hi:
            break
        count += 1
        if count >= cap:
            break
    return count


# --- bounds and validation -----------------------------------------------------------------


def _clip(schedule: Schedule, lo: datetime, hi: datetime) -> tuple[datetime, datetime]:
    if schedule.start_at is not None:
        lo = max(lo, schedule.start_at)
    if schedule.end_at is not None:
        hi = min(hi, schedule.end_at)
    return lo, hi


def _in_bounds(schedule: Schedule, instant: datetime) -> bool:
    lo, hi = _clip(schedule, instant, instant)
    return lo <= instant <= hi


def _require_aware(when: datetime, field: str) -> None:
    if not isinstance(when, datetime) or when.tzinfo is None or when.utcoffset() is None:
        raise InvalidInput(
            field,
            "needs a date-time with a UTC offset, e.g. '2026-05-01T09:00:00Z' or "
            "'2026-05-01T11:00:00+02:00'",
            code="naive_datetime",
        )


def _check_bounds(schedule: Schedule) -> None:
    for name in ("start_at", "end_at"):
        value = getattr(schedule, name)
        if value is not None:
            _require_aware(value, f"schedule.{name}")
    start_at, end_at = schedule.start_at, schedule.end_at
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise InvalidInput(
            "schedule.end_at",
            f"end_at ({end_at.isoformat()}) must be later than start_at "
            f"({start_at.isoformat()}); move end_at later or drop it",
            code="invalid_window",
        )


def _check_every(trigger: EveryTrigger) -> None:
    interval = trigger.interval_ms
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 1:
        raise InvalidInput(
            "schedule.every",
            f"interval must be at least 1 ms, got {interval!r}; e.g. 'PT30S'",
            code="interval_too_short",
        )
    if interval > MAX_INTERVAL_MS:
        raise InvalidInput(
            "schedule.every",
            f"interval {format_duration_ms(interval)} is longer than 366 days; use a cron "
            "schedule for yearly or longer rhythms",
            code="interval_too_long",
        )
    _require_aware(trigger.anchor, "schedule.anchor")


def _check_can_fire(schedule: Schedule) -> None:
    trigger, end_at = schedule.trigger, schedule.end_at
    if isinstance(trigger, AtTrigger):
        if not _in_bounds(schedule, trigger.at):
            raise InvalidInput(
                "schedule.at",
                f"at ({trigger.at.isoformat()}) lies outside the window from start_at to "
                "end_at, so the job would never fire; move 'at' into the window",
                code="never_fires",
            )
        return
    if end_at is None:
        return  # cron expressions were checked to fire at all; intervals always do
    if schedule.start_at is not None:
        fires = next_occurrence(schedule, _just_before(schedule.start_at)) is not None
    elif isinstance(trigger, CronTrigger):
        fires = _cron(schedule).latest_at_or_before(end_at) is not None
    else:
        fires = trigger.anchor <= end_at  # the anchor is an interval's first occurrence
    if not fires:
        raise InvalidInput(
            "schedule.end_at",
            f"no occurrence falls between the schedule's start and end_at "
            f"({end_at.isoformat()}), so the job would never fire; move end_at later or the "
            "start (start_at, or an interval's anchor) earlier",
            code="never_fires",
        )
