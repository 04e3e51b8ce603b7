"""Pure time math: when jobs fire. No I/O, no asyncio, no clock.

Every function takes the instants it needs as arguments and returns aware datetimes in UTC;
local wall time exists only inside cron evaluation.

    cron         CronExpression: cronsim behind our interface, Debian cron's DST rules or a
                 job's own DST choices (gap: shift/skip, repeat: first/second/both)
    durations    parse_duration_ms / format_duration_ms: interval lengths (ISO-8601 or seconds)
    triggers     occurrences of a domain Schedule: validate, next, first, latest, count
    preview      preview_schedule: the next fires of any schedule as the scheduler fires them;
                 preview_cron: the next fires of an expression, with DST notes that name a
                 job's explicit DST choices
    preview_query  the schedule of a preview's flat parameters (API query, CLI flags)

Bad input raises tickwork.errors.InvalidInput naming the API field (`schedule.cron`,
`schedule.timezone`, `schedule.every`, ...) and saying how to fix it. docs/cron-and-dst.md
describes the semantics with worked examples.
"""

from tickwork.timing.cron import CronExpression
from tickwork.timing.durations import (
    MAX_INTERVAL_MS,
    MIN_INTERVAL_MS,
    format_duration_ms,
    parse_duration_ms,
)
from tickwork.timing.preview import (
    EndReason,
    PreviewEnd,
    PreviewEntry,
    SchedulePreview,
    preview_cron,
    preview_schedule,
)
from tickwork.timing.triggers import (
    count_occurrences,
    first_occurrence,
    latest_occurrence,
    next_occurrence,
    validate_schedule,
)

__all__ = [
    "MAX_INTERVAL_MS",
    "MIN_INTERVAL_MS",
    "CronExpression",
    "EndReason",
    "PreviewEnd",
    "PreviewEntry",
    "SchedulePreview",
    "count_occurrences",
    "first_occurrence",
    "format_duration_ms",
    "latest_occurrence",
    "next_occurrence",
    "parse_duration_ms",
    "preview_cron",
    "preview_schedule",
    "validate_schedule",
]
