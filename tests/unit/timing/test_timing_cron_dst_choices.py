"""A cron job's DST choices (`dst_gap`, `dst_repeat`): tables of exact instants, and properties.

The oracle scans real ticks (a minute, or a second for 6 fields) around real 2026 clock changes,
groups the instants by the wall time they show, and applies the choice itself: a wall time with
one instant fires there; one with two fires at the first, the second or both; a matching wall
time that no tick shows is in a gap and fires at the jump (shift) or not at all (skip).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import islice, takewhile
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.cron_strategies import (
    CLOCK_CHANGES,
    ONE_US,
    Expr,
    Field,
    expressions,
    hours_near,
    instants,
    parse_or_reject,
    wall_of,
)

from tickwork.domain.jobs import CronTrigger, DstGap, DstRepeat, Schedule
from tickwork.errors import InvalidInput
from tickwork.timing import (
    CronExpression,
    count_occurrences,
    latest_occurrence,
    next_occurrence,
)

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GAPS = list(DstGap)
REPEATS = list(DstRepeat)


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expr: str, tz: str, after: str, n: int, gap: DstGap, repeat: DstRepeat) -> list[datetime]:
    cron = CronExpression.parse(expr, tz, gap, repeat)
    return list(islice(cron.iter_after(z(after)), n))


# --- tables --------------------------------------------------------------------------------

TABLES = [
    # Berlin spring: 02:00-02:59 does not exist on 2026-03-29 (01:00Z).
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00", DstGap.SHIFT, DstRepeat.CRON,
     ["2026-03-29T01:00", "2026-03-30T00:30"]),
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00", DstGap.SKIP, DstRepeat.CRON,
     ["2026-03-30T00:30", "2026-03-31T00:30"]),
    # an elapsed expression that shifts: 02:00 and 02:30 collapse onto the regular 03:00
    ("*/30 * * * *", "Europe/Berlin", "2026-03-29T00:10", DstGap.SHIFT, DstRepeat.CRON,
     ["2026-03-29T00:30", "2026-03-29T01:00", "2026-03-29T01:30"]),
    ("0 2 * * *", "Europe/Berlin", "2026-03-28T12:00", DstGap.SHIFT, DstRepeat.CRON,
     ["2026-03-29T01:00", "2026-03-30T00:00"]),
    ("0 */2 * * *", "Europe/Berlin", "2026-03-28T22:30", DstGap.SHIFT, DstRepeat.CRON,
     ["2026-03-28T23:00", "2026-03-29T01:00", "2026-03-29T02:00"]),
    # Berlin autumn: 02:00-02:59 happens twice on 2026-10-25 (00:00Z-00:59Z, 01:00Z-01:59Z).
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00", DstGap.CRON, DstRepeat.FIRST,
     ["2026-10-25T00:30", "2026-10-26T01:30"]),
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00", DstGap.CRON, DstRepeat.SECOND,
     ["2026-10-25T01:30", "2026-10-26T01:30"]),
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00", DstGap.CRON, DstRepeat.BOTH,
     ["2026-10-25T00:30", "2026-10-25T01:30", "2026-10-26T01:30"]),
    ("*/30 2 * * *", "Europe/Berlin", "2026-10-24T12:00", DstGap.CRON, DstRepeat.FIRST,
     ["2026-10-25T00:00", "2026-10-25T00:30", "2026-10-26T01:00"]),
    ("*/30 2 * * *", "Europe/Berlin", "2026-10-24T12:00", DstGap.CRON, DstRepeat.SECOND,
     ["2026-10-25T01:00", "2026-10-25T01:30", "2026-10-26T01:00"]),
    # starting inside the first pass: the second 02:30 is still ahead
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T00:45", DstGap.CRON, DstRepeat.SECOND,
     ["2026-10-25T01:30", "2026-10-26T01:30"]),
    ("30 2 * * *", "Europe/Berlin", "2026-10-25T00:45", DstGap.CRON, DstRepeat.BOTH,
     ["2026-10-25T01:30", "2026-10-26T01:30"]),
    # New York: 02:00-02:59 missing on 2026-03-08 (07:00Z), 01:00-01:59 twice on 2026-11-01.
    ("30 2 * * *", "America/New_York", "2026-03-07T12:00", DstGap.SKIP, DstRepeat.CRON,
     ["2026-03-09T06:30"]),
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00", DstGap.CRON, DstRepeat.SECOND,
     ["2026-11-01T06:30", "2026-11-02T06:30"]),
    ("30 1 * * *", "America/New_York", "2026-10-31T12:00", DstGap.CRON, DstRepeat.BOTH,
     ["2026-11-01T05:30", "2026-11-01T06:30", "2026-11-02T06:30"]),
    # Lord Howe: 02:00-02:29 missing on 2026-10-04 (15:30Z the day before); 01:30-01:59 twice
    # on 2026-04-05 (14:30Z-14:59Z, then 15:00Z-15:29Z).
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00", DstGap.SKIP, DstRepeat.CRON,
     ["2026-10-04T15:15"]),
    ("15 2 * * *", "Australia/Lord_Howe", "2026-10-03T00:00", DstGap.SHIFT, DstRepeat.CRON,
     ["2026-10-03T15:30", "2026-10-04T15:15"]),
    ("45 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00", DstGap.CRON, DstRepeat.SECOND,
     ["2026-04-04T15:15", "2026-04-05T15:15"]),
    ("*/15 1 * * *", "Australia/Lord_Howe", "2026-04-04T00:00", DstGap.CRON, DstRepeat.FIRST,
     ["2026-04-04T14:00", "2026-04-04T14:15", "2026-04-04T14:30", "2026-04-04T14:45",
      "2026-04-05T14:30"]),
]  # fmt: skip


@pytest.mark.parametrize(("expr", "tz", "after", "gap", "repeat", "expected"), TABLES)
def test_choices_fire_at_these_instants(
    expr: str, tz: str, after: str, gap: DstGap, repeat: DstRepeat, expected: list[str]
) -> None:
    assert fires(expr, tz, after, len(expected), gap, repeat) == [z(e) for e in expected]


@pytest.mark.parametrize("expr", ["30 2 * * *", "*/30 * * * *", "0 30 2 * * *"])
@pytest.mark.parametrize("tz", ["Europe/Berlin", "Australia/Lord_Howe"])
def test_cron_choices_are_the_debian_rule_spelled_out(expr: str, tz: str) -> None:
    debian = CronExpression.parse(expr, tz)
    spelled = CronExpression.parse(expr, tz, *debian.rules)
    for after in (z("2026-03-27T00:00"), z("2026-10-01T00:00"), z("2026-04-03T00:00")):
        assert list(islice(spelled.iter_after(after), 80)) == list(
            islice(debian.iter_after(after), 80)
        )


def test_parse_caches_per_combination_and_accepts_plain_strings() -> None:
    plain = CronExpression.parse("7 7 * * *", "Europe/Berlin")
    skip = CronExpression.parse("7 7 * * *", "Europe/Berlin", DstGap.SKIP, DstRepeat.SECOND)
    assert skip is CronExpression.parse("7 7 * * *", "Europe/Berlin", "skip", "second")  # type: ignore[arg-type]
    assert (skip.gap, skip.repeat) == (DstGap.SKIP, DstRepeat.SECOND)
    assert (plain.gap, plain.repeat) == (DstGap.CRON, DstRepeat.CRON)
    assert plain.rules == (DstGap.SHIFT, DstRepeat.FIRST)
    assert CronExpression.parse("*/5 * * * *").rules == (DstGap.SKIP, DstRepeat.BOTH)


@pytest.mark.parametrize(
    ("gap", "repeat", "field"),
    [("later", "cron", "schedule.dst.gap"), ("cron", "twice", "schedule.dst.repeat")],
)
def test_unknown_choice_names_the_field(gap: str, repeat: str, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        CronExpression.parse("0 2 * * *", "Europe/Berlin", gap, repeat)  # type: ignore[arg-type]
    assert caught.value.field == field
    assert "use one of" in str(caught.value)


def test_schedule_functions_use_the_choices() -> None:
    schedule = Schedule(
        trigger=CronTrigger(expr="30 1 * * *", timezone="America/New_York"),
        dst_repeat=DstRepeat.BOTH,
    )
    day_before, day_after = z("2026-10-31T12:00"), z("2026-11-01T12:00")
    assert next_occurrence(schedule, z("2026-11-01T05:30")) == z("2026-11-01T06:30")
    assert count_occurrences(schedule, after=day_before, until=day_after) == 2
    found = latest_occurrence(schedule, at_or_before=day_after, not_before=day_before)
    assert found == z("2026-11-01T06:30")
    skipping = Schedule(
        trigger=CronTrigger(expr="30 2 * * *", timezone="America/New_York"),
        dst_gap=DstGap.SKIP,
    )
    assert (
        count_occurrences(skipping, after=z("2026-03-07T12:00"), until=z("2026-03-08T12:00")) == 0
    )


# --- properties ----------------------------------------------------------------------------


# the seconds fields drawn are multiples of 20, so the oracle's tick can be 20 s
SECONDS = [Field("0", frozenset({0})), Field("*/20", frozenset({0, 20, 40}))]


def tick_of(expr: Expr) -> timedelta:
    return timedelta(seconds=20) if expr.second else timedelta(minutes=1)


@st.composite
def near_change(draw: st.DrawFn) -> tuple[str, datetime, Expr]:
    """A clock change, and an every-day expression that often names the local hours around it."""
    tz, moment = draw(st.sampled_from(CLOCK_CHANGES))
    hours = draw(hours_near(tz, moment))
    expr = draw(expressions(six=False, days=False, hours=hours))
    second = draw(st.sampled_from(SECONDS)) if draw(st.booleans()) else None
    return tz, moment, replace(expr, second=second)


def oracle(
    expr: Expr, cron: CronExpression, zone: ZoneInfo, lo: datetime, hi: datetime
) -> list[datetime]:
    """The fires in (lo, hi] by scanning ticks, with the choice applied (module docstring).

    Clock changes fall on whole minutes, so consecutive ticks whose walls are more than a tick
    apart straddle a forward jump, and the later tick is the jump's instant."""
    gap, repeat = cron.rules
    margin, tick = timedelta(hours=3), tick_of(expr)
    seen: dict[datetime, list[datetime]] = {}
    jumps: dict[datetime, list[datetime]] = {}  # jump instant -> matching walls it skipped
    start = (lo - margin).replace(second=0, microsecond=0)
    previous = wall_of(start - tick, zone)
    for k in range(int((hi - start + 2 * margin) / tick) + 1):
        instant = start + k * tick
        wall = wall_of(instant, zone)
        skipped = (previous + tick * (n + 1) for n in range(int((wall - previous) / tick) - 1))
        jumps[instant] = [w for w in skipped if expr.matches(w)]
        if expr.matches(wall):
            seen.setdefault(wall, []).append(instant)
        previous = wall
    found: set[datetime] = set()
    for passes in seen.values():
        if len(passes) == 1 or repeat is DstRepeat.BOTH:
            found.update(passes)
        else:
            found.add(passes[0] if repeat is DstRepeat.FIRST else passes[-1])
    if gap is DstGap.SHIFT:
        found.update(instant for instant, walls in jumps.items() if walls)
    return sorted(t for t in found if lo < t <= hi)


@PROPERTY
@given(
    case=near_change(),
    gap=st.sampled_from(GAPS),
    repeat=st.sampled_from(REPEATS),
    shift_s=st.integers(-4 * 3600, 3600),
    span_min=st.integers(20, 300),
)
def test_forward_and_backward_agree_with_the_oracle(
    case: tuple[str, datetime, Expr], gap: DstGap, repeat: DstRepeat, shift_s: int, span_min: int
) -> None:
    tz, moment, expr = case
    cron, zone = parse_or_reject(expr.text, tz, gap, repeat), ZoneInfo(tz)
    lo = moment + timedelta(seconds=shift_s, microseconds=250)
    hi = lo + timedelta(minutes=span_min)
    forward = list(takewhile(lambda t: t <= hi, cron.iter_after(lo)))
    backward = list(takewhile(lambda t: t > lo, cron.iter_at_or_before(hi)))
    assert forward == oracle(expr, cron, zone, lo, hi)
    assert backward[::-1] == forward
    # the single-answer functions and the count, as the scheduler uses them
    schedule = Schedule(
        trigger=CronTrigger(expr=expr.text, timezone=tz), dst_gap=gap, dst_repeat=repeat
    )
    assert next_occurrence(schedule, lo) == (
        forward[0] if forward else next_occurrence(schedule, hi)
    )
    latest = latest_occurrence(schedule, at_or_before=hi, not_before=lo + ONE_US)
    assert latest == (forward[-1] if forward else None)
    assert count_occurrences(schedule, after=lo, until=hi) == len(forward)


@PROPERTY
@given(
    case=near_change(),
    gap=st.sampled_from(GAPS),
    repeat=st.sampled_from([DstRepeat.FIRST, DstRepeat.SECOND]),
    shift_s=st.integers(-4 * 3600, 3600),
)
def test_one_wall_time_fires_once_unless_repeat_is_both(
    case: tuple[str, datetime, Expr], gap: DstGap, repeat: DstRepeat, shift_s: int
) -> None:
    tz, moment, expr = case
    cron, zone = parse_or_reject(expr.text, tz, gap, repeat), ZoneInfo(tz)
    lo = moment + timedelta(seconds=shift_s)
    hi = lo + timedelta(hours=6)
    found = list(takewhile(lambda t: t <= hi, cron.iter_after(lo)))
    walls = [wall_of(t, zone) for t in found]
    assert len(set(walls)) == len(walls)
    for instant in found:
        local = instant.astimezone(zone)
        if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():  # repeated
            assert local.fold == (1 if repeat is DstRepeat.SECOND else 0)
        if gap is DstGap.SKIP:
            assert expr.matches(wall_of(instant, zone))  # nothing lands on a jump instead


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=near_change(),
    rules=st.sampled_from([(DstGap.SHIFT, DstRepeat.FIRST), (DstGap.SKIP, DstRepeat.BOTH)]),
    shift_s=st.integers(-4 * 3600, 3600),
)
def test_wall_walk_matches_the_debian_walks(
    case: tuple[str, datetime, Expr], rules: tuple[DstGap, DstRepeat], shift_s: int
) -> None:
    """The walk used for mixed choices, run with a Debian rule, gives what that rule's own
    walk gives (private methods: the public ones route these choices to the Debian walks)."""
    tz, moment, expr = case
    cron = parse_or_reject(expr.text, tz)
    lo = moment + timedelta(seconds=shift_s, microseconds=7)
    hi = lo + timedelta(hours=5)
    fixed = rules == (DstGap.SHIFT, DstRepeat.FIRST)
    ours_fwd = cron._walls_forward(lo, *rules)
    ours_back = cron._walls_backward(hi, *rules)
    theirs_fwd = cron._fixed_forward(lo) if fixed else cron._elapsed_forward(lo)
    theirs_back = cron._fixed_backward(hi) if fixed else cron._elapsed_backward(hi)
    assert list(takewhile(lambda t: t <= hi, ours_fwd)) == list(
        takewhile(lambda t: t <= hi, theirs_fwd)
    )
    assert list(takewhile(lambda t: t > lo, ours_back)) == list(
        takewhile(lambda t: t > lo, theirs_back)
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=near_change(),
    tz=st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    gap=st.sampled_from(GAPS),
    repeat=st.sampled_from(REPEATS),
    after=instants,
)
def test_any_year_next_and_latest_are_consistent(
    case: tuple[str, datetime, Expr], tz: str, gap: DstGap, repeat: DstRepeat, after: datetime
) -> None:
    cron = parse_or_reject(case[2].text, tz, gap, repeat)
    fire = cron.next_after(after)
    assert fire is not None
    assert fire > after
    assert cron.next_after(fire - ONE_US) == fire
    assert cron.latest_at_or_before(fire) == fire
    before = cron.latest_at_or_before(fire - ONE_US)
    assert before is None or before <= after
