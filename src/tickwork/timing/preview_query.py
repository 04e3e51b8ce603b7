"""A schedule from the flat parameters of a preview: GET /v1/preview's query, and the flags of
`tickwork preview`.

It is built as a job's schedule is built from the same values, so the preview shows what a job
created at the preview's start would fire: an `every` given no anchor is anchored at its
start_at, else at that start. Bad values raise InvalidInput naming the field as a job body
names it (`schedule.every`, `schedule.end_at`, ...), so the API and the CLI word them alike.
"""

from __future__ import annotations

import re
from datetime import datetime

from tickwork.domain.jobs import (
    AtTrigger,
    CronTrigger,
    DstGap,
    DstRepeat,
    EveryTrigger,
    Schedule,
    Trigger,
)
from tickwork.errors import InvalidInput
from tickwork.timing.durations import parse_duration_ms
from tickwork.timing.triggers import validate_schedule

__all__ = ["KIND_CODE", "preview_query_schedule"]

# Which parameters go together is a rule across parameters, which a query's schema cannot state.
KIND_CODE = "schedule_kind"
_SECONDS = re.compile(r"[0-9]{1,15}(?:\.[0-9]{1,9})?")


def preview_query_schedule(
    *,
    start: datetime,
    cron: str | None = None,
    timezone: str | None = None,
    every: str | None = None,
    anchor: datetime | None = None,
    at: datetime | None = None,
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    max_runs: int | None = None,
    dst_gap: DstGap = DstGap.CRON,
    dst_repeat: DstRepeat = DstRepeat.CRON,
) -> Schedule:
    """The validated schedule of exactly one of `cron`, `every`, `at` with its options."""
    trigger = _trigger(cron, timezone, every, anchor or start_at or start, at)
    if timezone is not None and cron is None:
        raise InvalidInput(
            "schedule.timezone",
            "a time zone applies to cron schedules only; remove it",
            code=KIND_CODE,
        )
    if anchor is not None and every is None:
        raise InvalidInput(
            "schedule.anchor",
            "an anchor applies to every schedules only; remove it",
            code=KIND_CODE,
        )
    if max_runs is not None and (
        isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1
    ):
        raise InvalidInput(
            "max_runs", f"max_runs must be a whole number of 1 or more, got {max_runs!r}"
        )
    if (dst_gap, dst_repeat) != (DstGap.CRON, DstRepeat.CRON) and cron is None:
        raise InvalidInput(
            "schedule.dst", "DST choices apply to cron schedules only; remove them", code=KIND_CODE
        )
    schedule = Schedule(
        trigger=trigger,
        start_at=start_at,
        end_at=end_at,
        max_runs=max_runs,
        dst_gap=dst_gap,
        dst_repeat=dst_repeat,
    )
    validate_schedule(schedule)
    return schedule


def _trigger(
    cron: str | None,
    timezone: str | None,
    every: str | None,
    anchor: datetime,
    at: datetime | None,
) -> Trigger:
    given = [
        name for name, value in (("cron", cron), ("every", every), ("at", at)) if value is not None
    ]
    if len(given) != 1:
        found = " and ".join(given) if given else "none of them"
        message = f"give exactly one of cron, every or at (found {found})"
        raise InvalidInput("schedule", message, code=KIND_CODE)
    if cron is not None:
        return CronTrigger(expr=cron, timezone="UTC" if timezone is None else timezone)
    if every is not None:
        return EveryTrigger(interval_ms=parse_duration_ms(_seconds_or_text(every)), anchor=anchor)
    assert at is not None  # exactly one was given
    return AtTrigger(at=at)


def _seconds_or_text(every: str) -> str | int | float:
    """A query or a flag is text: `30` there means 30 seconds, as the number 30 does in a job
    body; anything else is parsed as an ISO-8601 duration."""
    text = every.strip()
    if not _SECONDS.fullmatch(text):
        return every
    return float(text) if "." in text else int(text)
