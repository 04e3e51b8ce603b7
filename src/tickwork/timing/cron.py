"""Cron expressions with Debian cron's time-zone and DST rules, on top of cronsim.

cronsim does the calendar work (parsing, ranges, steps, names, `L`, `LW`, `#`, the day-of-month /
day-of-week OR rule, its 50-year search horizon). We only ever hand it *naive wall-clock* times,
where it is exact, and map wall times to instants ourselves with one of two rules (the same split
Debian cron makes, by whether the minute or hour field starts with `*`):

- **Fixed-time** expressions (neither the minute nor the hour field starts with `*`, e.g.
  `30 2 * * *`, `0 9-17 * * MON-FRI`, `@daily`) are appointments on the local calendar. A wall
  time that happens twice fires once, at its first occurrence; a wall time skipped by a clock jump
  fires once, at the instant of the jump; several skipped wall times collapse into that one fire.
- **Elapsed-time** expressions (the minute or the hour field starts with `*`, e.g. `*/15 * * * *`,
  `0 */2 * * *`, `@hourly`) fire at every real instant whose local wall time matches: skipped wall
  times never fire, repeated wall times fire twice.

A job may override either rule (`DstGap`, `DstRepeat`, docs/cron-and-dst.md section 3.1): a
skipped wall time shifts to the jump or is skipped; a repeated one fires at the first, the second
or both. `CRON` keeps the rule above for that case. Choices equal to one of the two Debian rules
run its code; the mixed ones walk matching wall times and map each to its instants.

cronsim applies the same rules itself, but only to 5-field expressions, and its elapsed-time mode
steps hours by 3600 s, which misses occurrences around 30-minute shifts (Australia/Lord_Howe).
Doing the mapping here gives one rule for 5- and 6-field expressions and exact results everywhere;
docs/cron-and-dst.md has the worked examples.
"""

from __future__ import annotations

import difflib
import functools
import heapq
import re
import zoneinfo
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TypeVar

from cronsim import CronSim, CronSimError

from tickwork.clock import from_us, to_us
from tickwork.domain.jobs import DstGap, DstRepeat
from tickwork.errors import InvalidInput

CRON_FIELD = "schedule.cron"
TIMEZONE_FIELD = "schedule.timezone"
DST_GAP_FIELD = "schedule.dst.gap"
DST_REPEAT_FIELD = "schedule.dst.repeat"

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
_FIELD_HELP = {
    "second": "0-59",
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31, L (last day) or LW (last weekday)",
    "month": "1-12 or JAN-DEC",
    "day-of-week": "0-7 or SUN-SAT (0 and 7 are Sunday), nL (last weekday n of the month, "
    "e.g. 5L) or n#k (k-th weekday n, e.g. MON#2)",
}
_MONTH_NAMES = (
    "",
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_DAYS_IN_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Etc/Universal", "Universal", "Zulu"})
# Every zone name the time zone database lists (the tzdata package, and the system's), sorted:
# what the API accepts and its schema enumerates. `load_zone` alone also opens files that are
# no zone names, such as posix/Europe/Berlin.
ZONE_NAMES: tuple[str, ...] = tuple(sorted(zoneinfo.available_timezones() | _UTC_NAMES))
# Validation looks for a first fire from a fixed instant, so parsing never reads the clock.
_VALIDATION_ORIGIN = datetime(2000, 1, 1)
_ONE_US = timedelta(microseconds=1)
_STEPPED_RANGE = re.compile(r"([0-9A-Za-z]+)-([0-9A-Za-z]+)/([0-9]+)")
# Offset changes are looked for by sampling at this step, then bisecting. Since 1970 no two
# offset changes in tzdata are closer than 7 days, so a change and its reversal cannot both hide
# between two samples.
_SCAN_STEP = timedelta(days=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class CronExpression:
    """A parsed, validated cron expression bound to an IANA time zone.

    Build it with `CronExpression.parse`; every method takes aware datetimes and returns aware
    datetimes in UTC.
    """

    expr: str
    timezone: str
    fields: str  # the 5- or 6-field form cronsim evaluates (macros expanded)
    fixed_time: bool  # True: calendar appointment rule; False: elapsed-time rule (see module doc)
    zone: tzinfo = field(repr=False, compare=False)
    gap: DstGap = DstGap.CRON  # a matching wall time that does not exist (spring forward)
    repeat: DstRepeat = DstRepeat.CRON  # a matching wall time that happens twice (fall back)

    @classmethod
    def parse(
        cls,
        expr: str,
        timezone: str = "UTC",
        gap: DstGap = DstGap.CRON,
        repeat: DstRepeat = DstRepeat.CRON,
    ) -> CronExpression:
        """Parse and validate; results are cached per (expression, zone, gap, repeat), since
        many jobs share an expression.

        Raises InvalidInput with field `schedule.cron`, `schedule.timezone`, `schedule.dst.gap`
        or `schedule.dst.repeat`.
        """
        if not isinstance(expr, str):
            raise InvalidInput(CRON_FIELD, "cron expression must be a string", code="invalid_cron")
        if not isinstance(timezone, str):
            raise InvalidInput(
                TIMEZONE_FIELD, "time zone must be a string", code="unknown_timezone"
            )
        return _parse_cached(expr, timezone, _choice(DstGap, gap), _choice(DstRepeat, repeat))

    @property
    def rules(self) -> tuple[DstGap, DstRepeat]:
        """The choices in force, with CRON resolved by the expression's kind (never CRON)."""
        gap, repeat = self.gap, self.repeat
        if gap is DstGap.CRON:
            gap = DstGap.SHIFT if self.fixed_time else DstGap.SKIP
        if repeat is DstRepeat.CRON:
            repeat = DstRepeat.FIRST if self.fixed_time else DstRepeat.BOTH
        return gap, repeat

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire instant strictly after `after`; None if none within cronsim's horizon."""
        return next(self.iter_after(after), None)

    def latest_at_or_before(self, when: datetime) -> datetime | None:
        """The last fire instant at or before `when`; None if none within the horizon."""
        return next(self.iter_at_or_before(when), None)

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Fire instants strictly after `after`, ascending, each once."""
        after = _utc(after)
        if self.zone is UTC:
            return _naive_utc(CronSim(self.fields, after.replace(tzinfo=None)))
        rules = self.rules
        if rules == _FIXED_RULES:
            return self._fixed_forward(after)
        if rules == _ELAPSED_RULES:
            return self._elapsed_forward(after)
        return self._walls_forward(after, *rules)

    def iter_at_or_before(self, when: datetime) -> Iterator[datetime]:
        """Fire instants at or before `when`, descending, each once."""
        when = _utc(when)
        if self.zone is UTC:
            start = _inclusive(when.replace(tzinfo=None))
            return _naive_utc(CronSim(self.fields, start, reverse=True))
        rules = self.rules
        if rules == _FIXED_RULES:
            return self._fixed_backward(when)
        if rules == _ELAPSED_RULES:
            return self._elapsed_backward(when)
        return self._walls_backward(when, *rules)

    def next_matching_wall(self, after: datetime) -> datetime | None:
        """The first naive wall time strictly after naive `after` that the fields match.

        Pure calendar matching, blind to DST; used to explain what a clock change did.
        """
        return next(CronSim(self.fields, after), None)

    def explain(self) -> str:
        """An English description of the fields, e.g. "At 09:00 on Monday"."""
        return CronSim(self.fields, _VALIDATION_ORIGIN).explain()

    def wall_to_instant(self, wall: datetime) -> datetime:
        """Where a fixed-time expression's naive wall time lands: first of two, or after a gap."""
        local = wall.replace(tzinfo=self.zone)
        instant = local.astimezone(UTC)
        if instant.astimezone(self.zone).replace(tzinfo=None) == wall:
            return instant  # exists; fold=0 picked the first of a repeated pair
        # A skipped wall time: the two folds bracket the jump, which we pin down exactly.
        other = local.replace(fold=1).astimezone(UTC)
        lo, hi = min(instant, other), max(instant, other)
        return bisect_offset_change(self.zone, lo, hi)

    def _fixed_forward(self, after: datetime) -> Iterator[datetime]:
        last = after
        # A repeated or skipped hour can map several walls onto one instant, or (when `after`
        # is in the second pass of a repeated hour) onto instants already past: skip those.
        for wall in CronSim(self.fields, _wall(after, self.zone)):
            instant = self.wall_to_instant(wall)
            if instant > last:
                yield instant
                last = instant

    def _fixed_backward(self, when: datetime) -> Iterator[datetime]:
        local = when.astimezone(self.zone)
        start = local.replace(tzinfo=None)
        if local.fold:
            # In the second pass of a repeated hour, later walls of the first pass are earlier
            # instants: start the reverse walk from the wall time that maps to `when` at fold 0.
            start += _offset_of(local.replace(fold=0)) - _offset_of(local)
        last: datetime | None = None
        for wall in CronSim(self.fields, _inclusive(start), reverse=True):
            instant = self.wall_to_instant(wall)
            if instant <= when and (last is None or instant < last):
                yield instant
                last = instant

    def _elapsed_forward(self, after: datetime) -> Iterator[datetime]:
        # Walk one constant-offset segment at a time: inside a segment wall time and UTC differ
        # by a fixed offset, so cronsim's naive search is exact there.
        zone, bound = self.zone, after
        offset = _utcoffset(zone, bound)
        segment_start = bound
        while True:
            for wall in CronSim(self.fields, _naive(bound) + offset):
                candidate = wall.replace(tzinfo=UTC) - offset
                change = first_offset_change(zone, offset, segment_start, candidate)
                if change is None:
                    yield candidate
                    segment_start = candidate
                    continue
                bound, segment_start = change - _ONE_US, change
                offset = _utcoffset(zone, change)
                break
            else:
                return  # cronsim's horizon: nothing within 50 years

    def _elapsed_backward(self, when: datetime) -> Iterator[datetime]:
        zone, bound = self.zone, when
        offset = _utcoffset(zone, bound)
        segment_end = bound
        while True:
            start = _inclusive(_naive(bound) + offset)
            for wall in CronSim(self.fields, start, reverse=True):
                candidate = wall.replace(tzinfo=UTC) - offset
                change = last_offset_change(zone, offset, candidate, segment_end)
                if change is None:
                    yield candidate
                    segment_end = candidate
                    continue
                bound = segment_end = change - _ONE_US
                offset = _utcoffset(zone, bound)
                break
            else:
                return

    # Mixed choices (a fixed time that skips or fires twice, an elapsed one that shifts or fires
    # once): walk the matching wall times and send each to its instants. A repeated wall's
    # second instant comes after later walls' first ones, so instants wait in a heap until no
    # wall still to come can produce an earlier one. That bound holds because a wall's earliest
    # instant (first of two, or the jump for a skipped one) never decreases as walls increase,
    # and nor does its latest (second of two, or the jump).

    def _walls_forward(self, after: datetime, gap: DstGap, repeat: DstRepeat) -> Iterator[datetime]:
        local = after.astimezone(self.zone)
        start = _naive(local)
        if not local.fold and _is_repeated(local):
            # Earlier walls of this repeated stretch still have their second instant ahead.
            start -= _offset_of(local) - _offset_of(local.replace(fold=1))
        after_us, last_us = to_us(after), to_us(after)
        pending: list[int] = []
        for wall in CronSim(self.fields, start):
            earliest, _, fires = self._wall_instants(wall, gap, repeat)
            while pending and pending[0] <= earliest:
                instant = heapq.heappop(pending)
                if instant > last_us:
                    yield from_us(instant)
                    last_us = instant
            for instant in fires:
                if instant > after_us:
                    heapq.heappush(pending, instant)
        while pending:
            instant = heapq.heappop(pending)
            if instant > last_us:
                yield from_us(instant)
                last_us = instant

    def _walls_backward(self, when: datetime, gap: DstGap, repeat: DstRepeat) -> Iterator[datetime]:
        local = when.astimezone(self.zone)
        start = _naive(local)
        if local.fold:
            # Later walls of this repeated stretch had their first instant already.
            start += _offset_of(local.replace(fold=0)) - _offset_of(local)
        when_us = to_us(when)
        last_us: int | None = None
        pending: list[int] = []  # negated, so the heap pops the latest first
        for wall in CronSim(self.fields, _inclusive(start), reverse=True):
            _, latest, fires = self._wall_instants(wall, gap, repeat)
            while pending and -pending[0] >= latest:
                instant = -heapq.heappop(pending)
                if last_us is None or instant < last_us:
                    yield from_us(instant)
                    last_us = instant
            for instant in fires:
                if instant <= when_us:
                    heapq.heappush(pending, -instant)
        while pending:
            instant = -heapq.heappop(pending)
            if last_us is None or instant < last_us:
                yield from_us(instant)
                last_us = instant

    def _wall_instants(
        self, wall: datetime, gap: DstGap, repeat: DstRepeat
    ) -> tuple[int, int, tuple[int, ...]]:
        """(earliest, latest, fires) in epoch us for one matching naive wall time."""
        first = to_us(wall.replace(tzinfo=self.zone))
        second = to_us(wall.replace(tzinfo=self.zone, fold=1))
        if first == second:
            return first, first, (first,)
        if first < second:  # happens twice: fold 0 is the first pass (PEP 495)
            if repeat is DstRepeat.FIRST:
                return first, second, (first,)
            if repeat is DstRepeat.SECOND:
                return first, second, (second,)
            return first, second, (first, second)
        # Does not exist: fold 1 reads it with the offset after the jump, landing before it.
        jump = to_us(bisect_offset_change(self.zone, from_us(second), from_us(first)))
        return jump, jump, ((jump,) if gap is DstGap.SHIFT else ())


# Debian's two rules, as choices: both have their own walk above.
_FIXED_RULES = (DstGap.SHIFT, DstRepeat.FIRST)
_ELAPSED_RULES = (DstGap.SKIP, DstRepeat.BOTH)


# --- offsets and transitions ---------------------------------------------------------------


def first_offset_change(
    zone: tzinfo, offset: timedelta, lo: datetime, hi: datetime
) -> datetime | None:
    """The first instant in (lo, hi] whose UTC offset is not `offset` (the offset at `lo`)."""
    a = lo
    while a < hi:
        b = min(a + _SCAN_STEP, hi)
        if _utcoffset(zone, b) != offset:
            return bisect_offset_change(zone, a, b)
        a = b
    return None


def last_offset_change(
    zone: tzinfo, offset: timedelta, lo: datetime, hi: datetime
) -> datetime | None:
    """The start of the final constant-`offset` stretch ending at `hi`, if it starts after `lo`."""
    b = hi
    while b > lo:
        a = max(b - _SCAN_STEP, lo)
        if _utcoffset(zone, a) != offset:
            return bisect_offset_change(zone, a, b)
        b = a
    return None


def bisect_offset_change(zone: tzinfo, lo: datetime, hi: datetime) -> datetime:
    """The first instant in (lo, hi] whose offset differs from lo's; hi's offset must differ."""
    lo_us, hi_us = to_us(lo), to_us(hi)
    offset = _utcoffset(zone, lo)
    while hi_us - lo_us > 1:
        mid = (lo_us + hi_us) // 2
        if _utcoffset(zone, from_us(mid)) == offset:
            lo_us = mid
        else:
            hi_us = mid
    return from_us(hi_us)


def _utcoffset(zone: tzinfo, instant: datetime) -> timedelta:
    return _offset_of(instant.astimezone(zone))


def _is_repeated(local: datetime) -> bool:
    """Whether this aware local time's wall clock reading happens twice."""
    return local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset()


def _offset_of(local: datetime) -> timedelta:
    offset = local.utcoffset()
    assert offset is not None  # every zone we build from is a concrete tzinfo
    return offset


# --- small conversions ---------------------------------------------------------------------


def _utc(when: datetime) -> datetime:
    if when.tzinfo is None:
        raise ValueError("naive datetime: tickwork only handles aware instants")
    return when.astimezone(UTC)


def _naive(instant: datetime) -> datetime:
    return instant.replace(tzinfo=None)


def _wall(instant: datetime, zone: tzinfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _inclusive(start: datetime) -> datetime:
    # cronsim's reverse walk starts one second before a whole-second start, but at the start
    # itself when it carries microseconds (they are cut off as the first step).
    return start if start.microsecond else start.replace(microsecond=1)


def _naive_utc(walls: CronSim) -> Iterator[datetime]:
    for wall in walls:
        yield wall.replace(tzinfo=UTC)


# --- parsing and validation ----------------------------------------------------------------


_Choice = TypeVar("_Choice", DstGap, DstRepeat)


def _choice(kind: type[_Choice], value: str) -> _Choice:
    field_name = DST_GAP_FIELD if kind is DstGap else DST_REPEAT_FIELD
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(choice.value for choice in kind)
        message = f"{value!r} is not a DST choice; use one of {allowed}"
        raise InvalidInput(field_name, message, code="invalid") from None


@functools.lru_cache(maxsize=4096)
def _parse_cached(expr: str, timezone: str, gap: DstGap, repeat: DstRepeat) -> CronExpression:
    if gap is not DstGap.CRON or repeat is not DstRepeat.CRON:
        # The choices change only the walk, not what parses: validate once per expression.
        return replace(
            _parse_cached(expr, timezone, DstGap.CRON, DstRepeat.CRON), gap=gap, repeat=repeat
        )
    zone = load_zone(timezone)
    fields = _normalize(expr)
    parts = fields.split()
    _check_with_cronsim(expr, parts)
    six = parts if len(parts) == 6 else ["0", *parts]
    cron = CronExpression(
        expr=expr,
        timezone=timezone,
        fields=fields,
        fixed_time=not (six[1].startswith("*") or six[2].startswith("*")),
        zone=zone,
    )
    if cron.next_matching_wall(_VALIDATION_ORIGIN) is None:
        raise InvalidInput(CRON_FIELD, _never_fires_message(expr, six), code="never_fires")
    return cron


def load_zone(name: str) -> tzinfo:
    """The tzinfo for an IANA zone name; InvalidInput (schedule.timezone) if unknown."""
    if not name.strip():
        raise InvalidInput(
            TIMEZONE_FIELD,
            "time zone is empty; use an IANA name such as 'Europe/Berlin' or 'UTC'",
            code="unknown_timezone",
        )
    if name in _UTC_NAMES:
        return UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        message = _unknown_zone_message(name)
        raise InvalidInput(TIMEZONE_FIELD, message, code="unknown_timezone") from None


def _unknown_zone_message(name: str) -> str:
    message = f"unknown time zone {name!r}; use an IANA name such as 'Europe/Berlin' or 'UTC'"
    zones = {z.lower(): z for z in zoneinfo.available_timezones()}
    close = difflib.get_close_matches(name.lower(), zones, n=1, cutoff=0.8)
    if close:
        message += f" (did you mean {zones[close[0]]!r}?)"
    return message


def _normalize(expr: str) -> str:
    if not expr.strip():
        raise InvalidInput(
            CRON_FIELD,
            "cron expression is empty; write 5 fields like '0 9 * * MON-FRI' or a macro "
            "like '@daily'",
            code="invalid_cron",
        )
    text = " ".join(expr.split())
    if not text.startswith("@"):
        return " ".join(_one_value_ranges(part) for part in text.split())
    macro = text.lower()
    if macro == "@reboot":
        raise InvalidInput(
            CRON_FIELD,
            "'@reboot' has no fire time: tickwork schedules by the clock, not by restarts; "
            "use a one-shot 'at' schedule or a regular cron expression",
            code="invalid_cron",
        )
    if macro not in MACROS:
        known = ", ".join(sorted(MACROS))
        raise InvalidInput(
            CRON_FIELD, f"unknown macro {text!r}; use one of {known}", code="invalid_cron"
        )
    return MACROS[macro]


def _one_value_ranges(field_text: str) -> str:
    """Rewrite `a-a/n` as `a`: cronsim reads a one-value range with a step as `a/n` (a, a+n, ...
    up to the field's maximum), where Debian cron reads the one value it names."""
    terms = []
    for term in field_text.split(","):
        match = _STEPPED_RANGE.fullmatch(term)
        terms.append(match[1] if match and match[1].upper() == match[2].upper() else term)
    return ",".join(terms)


def _check_with_cronsim(expr: str, parts: list[str]) -> None:
    if len(parts) not in (5, 6):
        raise InvalidInput(CRON_FIELD, _field_count_message(expr, parts), code="invalid_cron")
    if any("?" in part for part in parts):
        raise InvalidInput(
            CRON_FIELD,
            f"'?' in {expr!r} is Quartz syntax; use '*' for 'any' in standard cron",
            code="invalid_cron",
        )
    try:
        CronSim(" ".join(parts), _VALIDATION_ORIGIN)
    except CronSimError as exc:
        message = _cronsim_message(expr, parts, str(exc))
        raise InvalidInput(CRON_FIELD, message, code="invalid_cron") from None


def _field_count_message(expr: str, parts: list[str]) -> str:
    noun = "field" if len(parts) == 1 else "fields"
    message = (
        f"{expr!r} has {len(parts)} {noun}; write 5 (minute hour day-of-month month day-of-week) "
        "or 6 with a leading seconds field (second minute hour day-of-month month day-of-week)"
    )
    if len(parts) == 7:
        message += "; a year field is not supported"
    return message


def _cronsim_message(expr: str, parts: list[str], error: str) -> str:
    names = _FIELD_NAMES if len(parts) == 6 else _FIELD_NAMES[1:]
    name = error.removeprefix("Bad ").strip()
    if name not in names:
        return f"{expr!r} is not a valid cron expression ({error})"
    token = parts[names.index(name)]
    if name == "day-of-month":
        impossible = _impossible_day_message(expr, parts)
        if impossible:
            return impossible
    message = f"the {name} field {token!r} in {expr!r} is not valid; use {_FIELD_HELP[name]}"
    message += ", combined with lists (a,b), upward ranges (a-b) and steps (*/n, a-b/n)"
    if name == "day-of-week" and len(parts) == 6 and token.isdigit():
        message += "; in a 6-field expression the seconds field comes first, not last"
    return message


def _impossible_day_message(expr: str, parts: list[str]) -> str | None:
    """cronsim rejects days no selected month has; say which day and which months."""
    dom, month = parts[-3], parts[-2]
    try:
        days = CronSim(f"0 0 {dom} * *", _VALIDATION_ORIGIN).days
        months = CronSim(f"0 0 1 {month} *", _VALIDATION_ORIGIN).months
    except CronSimError:
        return None  # the field itself is malformed, not impossible
    day = min(days)
    month_list = sorted(months)
    names = " or ".join(_MONTH_NAMES[m] for m in month_list)
    longest = max(_DAYS_IN_MONTH[m] for m in month_list)
    return (
        f"day-of-month {day} never occurs in {names}: {expr!r} would never fire; pick a day "
        f"that exists in the month (at most {longest}), or use 'L' for the last day"
    )


def _never_fires_message(expr: str, six: list[str]) -> str:
    dom, dow = six[3], six[5]
    message = f"{expr!r} would never fire: no date matches all of its fields"
    both_restricted = dom != "*" and dow != "*"
    if both_restricted and (dom.startswith("*") or dow.startswith("*")):
        message += (
            " (day-of-month and day-of-week must both match, because one of them starts with '*')"
        )
    return message + "; loosen the day-of-month, month or day-of-week field"
