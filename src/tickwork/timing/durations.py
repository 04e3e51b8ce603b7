"""Interval lengths: parse what users write (seconds or ISO-8601), print one canonical form.

Intervals are whole milliseconds. Months and years are refused because their length varies;
a calendar rhythm like "monthly" is a cron schedule's job (`0 0 1 * *`), not an interval's.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal

from tickwork.errors import InvalidInput

MIN_INTERVAL_MS = 1
MAX_INTERVAL_MS = 366 * 86_400_000

_MS_PER = {"W": 604_800_000, "D": 86_400_000, "H": 3_600_000, "M": 60_000, "S": 1_000}
_ISO_DURATION = re.compile(
    r"P(?:(?P<W>\d+)W)?(?:(?P<D>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<H>\d+)H)?(?:(?P<M>\d+)M)?(?:(?P<S>\d+(?:[.,]\d+)?)S)?)?"
)
_MAX_TEXT = 64  # no honest duration is longer; bounds the work spent on hostile input
_EXAMPLES = "e.g. 'PT30S', 'PT1.5S', 'PT5M', 'P1DT2H', or a number of seconds such as 30"


def parse_duration_ms(value: str | int | float, field: str = "schedule.every") -> int:
    """Milliseconds in a positive interval given as seconds (a number) or an ISO-8601 duration.

    Accepts weeks, days, hours, minutes and seconds; only seconds may have a fraction. The
    result is rounded to the nearest millisecond (halves up) and must be 1 ms .. 366 days.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        message = f"an interval must be a string or a number, {_EXAMPLES}"
        raise InvalidInput(field, message, code="invalid_duration")
    if isinstance(value, int) and abs(value) > _MAX_WHOLE_SECONDS:
        # far out of range; and int -> str (for Decimal, and for the message) refuses 4300+ digits
        _refuse_huge(value, field)
    seconds = _seconds_from_text(value, field) if isinstance(value, str) else _seconds(value, field)
    ms = int((seconds * 1000).to_integral_value(rounding=ROUND_HALF_UP))
    if ms < MIN_INTERVAL_MS:
        raise InvalidInput(
            field,
            f"interval {value!r} is shorter than 1 millisecond, the smallest tickwork can "
            "schedule; use at least 'PT0.001S'",
            code="interval_too_short",
        )
    if ms > MAX_INTERVAL_MS:
        raise InvalidInput(
            field,
            f"interval {value!r} is longer than 366 days (P366D); for longer or calendar-based "
            "rhythms use a cron schedule, e.g. '0 0 1 1 *' for yearly",
            code="interval_too_long",
        )
    return ms


_MAX_WHOLE_SECONDS = 10**12  # 31,000 years: any int past it is refused without printing it


def _refuse_huge(value: int, field: str) -> None:
    digits = int(abs(value).bit_length() * math.log10(2)) + 1  # give or take one
    size = f"of about {digits} digits"
    if value < 0:
        raise InvalidInput(
            field, f"interval {size} must be positive; {_EXAMPLES}", code="interval_too_short"
        )
    raise InvalidInput(
        field,
        f"interval {size} is longer than 366 days (P366D); for longer or calendar-based "
        "rhythms use a cron schedule, e.g. '0 0 1 1 *' for yearly",
        code="interval_too_long",
    )


def format_duration_ms(ms: int) -> str:
    """The canonical ISO-8601 form: days, hours, minutes, seconds; 1500 -> 'PT1.5S'."""
    if ms < 0:
        raise ValueError(f"a duration cannot be negative: {ms} ms")
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds, millis = divmod(rest, 1_000)
    date = f"{days}D" if days else ""
    time = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or millis:
        fraction = f".{millis:03d}".rstrip("0") if millis else ""
        time += f"{seconds}{fraction}S"
    if not date and not time:
        return "PT0S"
    return "P" + date + ("T" + time if time else "")


def _seconds(value: int | float, field: str) -> Decimal:
    if isinstance(value, float) and not math.isfinite(value):
        message = f"interval {value!r} is not a finite number; {_EXAMPLES}"
        raise InvalidInput(field, message, code="invalid_duration")
    if value <= 0:
        raise InvalidInput(
            field, f"interval {value!r} must be positive; {_EXAMPLES}", code="interval_too_short"
        )
    # str() gives a float's shortest decimal form, so 0.1 means 100 ms, not 100.0000000000000055.
    return Decimal(str(value))


def _seconds_from_text(value: str, field: str) -> Decimal:
    text = value.strip().upper()
    if len(text) > _MAX_TEXT:
        raise InvalidInput(
            field, f"interval text is too long; {_EXAMPLES}", code="invalid_duration"
        )
    match = _ISO_DURATION.fullmatch(text)
    if match is None or text in ("P", "PT"):
        raise InvalidInput(field, _explain_bad_text(value, text), code="invalid_duration")
    total = Decimal(0)
    for unit, amount in match.groupdict().items():
        if amount is not None:
            total += Decimal(amount.replace(",", ".")) * _MS_PER[unit]
    return total / 1000


def _explain_bad_text(value: str, text: str) -> str:
    if text.startswith("-"):
        return f"interval {value!r} must be positive; {_EXAMPLES}"
    date_part = text[1:].split("T", 1)[0] if text.startswith("P") else ""
    if "Y" in date_part or "M" in date_part:
        return (
            f"interval {value!r} uses months or years, which have no fixed length; use a cron "
            "schedule instead (e.g. '0 0 1 * *' for monthly), or give days such as 'P30D'"
        )
    if re.search(r"\d[.,]\d+[WDHM]", text):
        return f"only the seconds of {value!r} may have a fraction; write 'PT1H30M', not 'PT1.5H'"
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return f"interval {value!r} is text; send the number {text} or write 'PT{text}S'"
    return f"{value!r} is not an ISO-8601 duration; {_EXAMPLES}"
