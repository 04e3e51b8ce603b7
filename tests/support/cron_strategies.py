"""Hypothesis strategies and helpers the cron property tests share (tests/unit/timing).

Expressions are built from known field sets, so a test can match wall times itself (Debian's
rule included: day-of-month and day-of-week are AND-ed when either starts with `*`), and
drawn near real 2026 clock changes, where the DST rules matter.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import reject
from hypothesis import strategies as st

from tickwork.domain.jobs import DstGap, DstRepeat
from tickwork.errors import InvalidInput
from tickwork.timing import CronExpression

ONE_US = timedelta(microseconds=1)

# (zone, instant of a 2026 clock change); Lord Howe shifts by 30 minutes.
CLOCK_CHANGES = [
    ("Europe/Berlin", datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2026, 10, 25, 1, 0, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 3, 8, 7, 0, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 6, 0, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 15, 0, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 15, 30, tzinfo=UTC)),
    # Santiago changes at midnight, so a skipped or repeated hour straddles two dates.
    ("America/Santiago", datetime(2026, 4, 5, 3, 0, tzinfo=UTC)),
    ("America/Santiago", datetime(2026, 9, 6, 4, 0, tzinfo=UTC)),
]

instants = st.datetimes(
    min_value=datetime(2001, 1, 1), max_value=datetime(2060, 1, 1), timezones=st.just(UTC)
)


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]


@dataclass(frozen=True)
class Expr:
    second: Field | None  # None: a 5-field expression
    minute: Field
    hour: Field
    dom: Field
    month: Field
    dow: Field

    @property
    def text(self) -> str:
        fields = [self.minute, self.hour, self.dom, self.month, self.dow]
        if self.second is not None:
            fields.insert(0, self.second)
        return " ".join(f.text for f in fields)

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"

    def matches(self, wall: datetime) -> bool:
        if self.second is not None and wall.second not in self.second.values:
            return False
        if self.second is None and wall.second != 0:
            return False
        if wall.minute not in self.minute.values or wall.hour not in self.hour.values:
            return False
        if wall.month not in self.month.values:
            return False
        dom_ok = wall.day in self.dom.values
        dow_ok = wall.isoweekday() % 7 in {v % 7 for v in self.dow.values}
        if self.dom.text.startswith("*") or self.dow.text.startswith("*"):
            return dom_ok and dow_ok
        return dom_ok or dow_ok


@st.composite
def fields(draw: st.DrawFn, lo: int, hi: int, star_weight: int = 3) -> Field:
    kind = draw(st.sampled_from(["*"] * star_weight + ["step", "one", "range", "list", "rstep"]))
    if kind == "*":
        return Field("*", frozenset(range(lo, hi + 1)))
    if kind == "step":
        n = draw(st.integers(1, max(1, (hi - lo) // 2)))
        return Field(f"*/{n}", frozenset(range(lo, hi + 1, n)))
    a = draw(st.integers(lo, hi))
    if kind == "one":
        return Field(str(a), frozenset({a}))
    b = draw(st.integers(a, hi))
    if kind == "range":
        return Field(f"{a}-{b}", frozenset(range(a, b + 1)))
    if kind == "rstep":
        n = draw(st.integers(1, max(1, hi - lo)))
        return Field(f"{a}-{b}/{n}", frozenset(range(a, b + 1, n)))
    values = sorted(draw(st.sets(st.integers(lo, hi), min_size=1, max_size=4)))
    return Field(",".join(map(str, values)), frozenset(values))


@st.composite
def expressions(
    draw: st.DrawFn, *, six: bool | None = None, days: bool = True, hours: Field | None = None
) -> Expr:
    """An expression; `days=False`: every day; `hours`: that hour field."""
    with_seconds = draw(st.booleans()) if six is None else six
    return Expr(
        second=draw(fields(0, 59)) if with_seconds else None,
        minute=draw(fields(0, 59)),
        hour=hours or draw(fields(0, 23)),
        dom=draw(fields(1, 31, 6)) if days else _every(1, 31),
        month=draw(fields(1, 12, 6)) if days else _every(1, 12),
        dow=draw(fields(0, 7, 6)) if days else _every(0, 7),
    )


def _every(lo: int, hi: int) -> Field:
    return Field("*", frozenset(range(lo, hi + 1)))


@st.composite
def hours_near(draw: st.DrawFn, tz: str, moment: datetime) -> Field:
    """An hour field: any, or often the local hours around the clock change at `moment`."""
    local_hour = moment.astimezone(ZoneInfo(tz)).hour
    near = sorted({(local_hour + d) % 24 for d in (-2, -1, 0, 1)})
    return draw(
        st.one_of(
            fields(0, 23),
            st.sets(st.sampled_from(near), min_size=1).map(
                lambda hs: Field(",".join(map(str, sorted(hs))), frozenset(hs))
            ),
        )
    )


def parse_or_reject(
    text: str, tz: str, gap: DstGap = DstGap.CRON, repeat: DstRepeat = DstRepeat.CRON
) -> CronExpression:
    try:
        return CronExpression.parse(text, tz, gap, repeat)
    except InvalidInput:
        reject()  # e.g. day-of-month 31 in February: rightly refused, not what is tested


def wall_of(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)
