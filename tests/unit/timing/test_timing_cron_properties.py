"""Property tests for CronExpression.

Expressions are built from known field sets, so the tests can match wall times themselves
(Debian's rule included: day-of-month and day-of-week are AND-ed when either starts with `*`).
Oracles, each independent of the code under test:

- a brute-force scan, minute by minute, around real 2026 clock changes;
- croniter (test-only) in zones without DST;
- cronsim's own DST handling, where it applies (5-field expressions, whole-hour shifts).
"""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta
from itertools import takewhile
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from cronsim import CronSim
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from tests.support.cron_strategies import (
    CLOCK_CHANGES,
    ONE_US,
    Expr,
    expressions,
    hours_near,
    instants,
    parse_or_reject,
    wall_of,
)

from tickwork.errors import InvalidInput
from tickwork.timing import CronExpression

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Pacific/Chatham",
]


def skipped_walls(instant: datetime, zone: ZoneInfo) -> list[datetime]:
    """The wall times skipped by a forward jump at exactly `instant`, second by second."""
    before = (instant - ONE_US).astimezone(zone).utcoffset()
    after = instant.astimezone(zone).utcoffset()
    assert before is not None
    assert after is not None
    if after <= before:
        return []
    start = instant.replace(tzinfo=None) + before
    return [start + timedelta(seconds=s) for s in range(int((after - before).total_seconds()))]


# --- properties of next_after / latest_at_or_before ----------------------------------------


@FAST
@given(expr=expressions(), tz=st.sampled_from(ZONES), after=instants)
def test_next_fire_is_later_and_matches(expr: Expr, tz: str, after: datetime) -> None:
    cron = parse_or_reject(expr.text, tz)
    fire = cron.next_after(after)
    assert fire is not None
    assert fire > after
    assert fire.tzinfo is UTC
    zone = ZoneInfo(tz)
    if expr.matches(wall_of(fire, zone)):
        return
    # Only a fixed-time fire may sit where the wall clock does not match: right after a jump
    # over a wall time that does.
    assert cron.fixed_time
    assert any(expr.matches(w) for w in skipped_walls(fire, zone))


@FAST
@given(expr=expressions(), tz=st.sampled_from(ZONES), after=instants)
def test_evaluation_is_stable_and_consistent_both_ways(
    expr: Expr, tz: str, after: datetime
) -> None:
    cron = parse_or_reject(expr.text, tz)
    fire = cron.next_after(after)
    assert fire is not None
    assert cron.next_after(after) == fire
    assert cron.next_after(fire - ONE_US) == fire
    assert cron.latest_at_or_before(fire) == fire
    before = cron.latest_at_or_before(fire - ONE_US)
    assert before is None or before <= after  # nothing fires between `after` and `fire`


# --- brute force around real clock changes -------------------------------------------------


def brute_force(
    expr: Expr, cron: CronExpression, zone: ZoneInfo, lo: datetime, hi: datetime
) -> list[datetime]:
    """Fires in (lo, hi] by scanning every tick (a minute, or a second for 6 fields).

    Elapsed-time expressions scan real ticks; fixed-time ones scan wall ticks and send each
    matching wall time to its first real instant at or after it.
    """
    tick = timedelta(seconds=1) if expr.second is not None else timedelta(minutes=1)
    first = lo.replace(microsecond=0) if tick.seconds == 1 else lo.replace(second=0, microsecond=0)
    if not cron.fixed_time:
        scan = (first + k * tick for k in range(int((hi - first) / tick) + 1))
        return [t for t in scan if lo < t <= hi and expr.matches(wall_of(t, zone))]
    margin = timedelta(hours=2)
    start = wall_of(first, zone) - margin
    fires = set()
    for k in range(int((hi - first + 2 * margin) / tick) + 1):
        wall = start + k * tick
        if expr.matches(wall):
            fires.add(_first_real_instant_at_or_after(wall, zone))
    return sorted(t for t in fires if lo < t <= hi)


def _first_real_instant_at_or_after(wall: datetime, zone: ZoneInfo) -> datetime:
    # Walk a missing wall time forward until it exists (Debian's and cronsim's way, by the
    # minute), then back by the second to the earliest wall time that exists.
    def exists(w: datetime) -> bool:
        return wall_of(w.replace(tzinfo=zone).astimezone(UTC), zone) == w

    if exists(wall):
        return wall.replace(tzinfo=zone).astimezone(UTC)
    later = wall
    while not exists(later):
        later += timedelta(minutes=1)
    while later - timedelta(seconds=1) > wall and exists(later - timedelta(seconds=1)):
        later -= timedelta(seconds=1)
    return later.replace(tzinfo=zone).astimezone(UTC)


def _check_against_brute_force(
    change: tuple[str, datetime], expr: Expr, lo: datetime, hi: datetime
) -> None:
    tz, _ = change
    zone = ZoneInfo(tz)
    cron = parse_or_reject(expr.text, tz)
    expected = brute_force(expr, cron, zone, lo, hi)
    forward = list(takewhile(lambda t: t <= hi, cron.iter_after(lo)))
    backward = list(takewhile(lambda t: t > lo, cron.iter_at_or_before(hi)))
    assert forward == expected
    assert backward[::-1] == expected


@st.composite
def near_clock_change(draw: st.DrawFn, *, six: bool) -> tuple[tuple[str, datetime], Expr]:
    """A clock change, and an expression whose hours, when fixed, are the local hours near it."""
    change = draw(st.sampled_from(CLOCK_CHANGES))
    hours = draw(hours_near(*change))
    return change, draw(expressions(six=six, days=False, hours=hours))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=near_clock_change(six=False),
    shift_s=st.one_of(st.integers(-180, 60).map(lambda m: m * 60), st.integers(-10800, 3600)),
    span_min=st.integers(30, 240),
)
def test_matches_brute_force_around_clock_changes(
    case: tuple[tuple[str, datetime], Expr], shift_s: int, span_min: int
) -> None:
    change, expr = case
    lo = change[1] + timedelta(seconds=shift_s)
    _check_against_brute_force(change, expr, lo, lo + timedelta(minutes=span_min))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=near_clock_change(six=True),
    shift_s=st.integers(-5400, 1800),
    span_min=st.integers(10, 90),
)
def test_six_field_matches_brute_force_around_clock_changes(
    case: tuple[tuple[str, datetime], Expr], shift_s: int, span_min: int
) -> None:
    change, expr = case
    lo = change[1] + timedelta(seconds=shift_s, microseconds=250)
    _check_against_brute_force(change, expr, lo, lo + timedelta(minutes=span_min))


# --- differential: croniter and cronsim ----------------------------------------------------


def croniter_comparable(expr: Expr) -> bool:
    # croniter reads a one-value range such as '5-5' as the whole field: skip those.
    if any(_one_value_range(term) for term in expr.text.replace(",", " ").split()):
        return False
    # croniter ORs the day fields whenever both are restricted; Debian (and tickwork) AND them
    # when either starts with '*'. Only compare where the two rules agree.
    dom, dow = expr.dom.text, expr.dow.text
    if dom == "*" or dow == "*":
        return True
    return not (dom.startswith("*") or dow.startswith("*"))


def _one_value_range(term: str) -> bool:
    bounds = term.split("/")[0].split("-")
    return len(bounds) == 2 and bounds[0] == bounds[1]


@FAST
@given(expr=expressions(), tz=st.sampled_from(["UTC", "Asia/Tokyo"]), after=instants)
def test_agrees_with_croniter_without_dst(expr: Expr, tz: str, after: datetime) -> None:
    if not croniter_comparable(expr):
        reject()
    cron = parse_or_reject(expr.text, tz)
    zone = ZoneInfo(tz)
    oracle = croniter(
        expr.text, after.astimezone(zone), second_at_beginning=expr.second is not None
    )
    assert cron.next_after(after) == oracle.get_next(datetime).astimezone(UTC)


@FAST
@given(
    expr=expressions(six=False),
    tz=st.sampled_from(["Europe/Berlin", "America/New_York"]),
    after=instants,
)
def test_agrees_with_cronsims_own_dst_handling(expr: Expr, tz: str, after: datetime) -> None:
    zone = ZoneInfo(tz)
    local = after.astimezone(zone)
    if local.fold:
        reject()  # cronsim can answer with an already-past fire from a repeated hour's 2nd pass
    if any(_one_value_range(term) for term in expr.text.replace(",", " ").split()):
        reject()  # cronsim reads '5-5/10' as '5/10'; tickwork reads it as Debian does: '5'

    cron = parse_or_reject(expr.text, tz)
    assert cron.next_after(after) == next(CronSim(expr.text, local)).astimezone(UTC)


def test_cronsim_answers_from_second_pass_with_a_past_fire_and_we_do_not() -> None:
    """Documents the one cronsim quirk the differential test above steps around."""
    zone = ZoneInfo("Europe/Berlin")
    after = datetime(2026, 10, 25, 1, 10, tzinfo=UTC)  # 02:10 CET, second pass
    cronsim_answer = next(CronSim("30 2 * * *", after.astimezone(zone))).astimezone(UTC)
    assert cronsim_answer < after
    ours = CronExpression.parse("30 2 * * *", "Europe/Berlin").next_after(after)
    assert ours == datetime(2026, 10, 26, 1, 30, tzinfo=UTC)


def test_cronsim_misses_lord_howe_half_hour_and_we_do_not() -> None:
    """cronsim steps hours by 3600 s in elapsed-time mode; a 30-minute shift breaks that."""
    zone = ZoneInfo("Australia/Lord_Howe")
    after = datetime(2026, 4, 4, 13, 0, tzinfo=UTC)  # 00:00 +11 on the fall-back Sunday
    cronsim_answer = next(CronSim("*/30 2 * * *", after.astimezone(zone))).astimezone(UTC)
    assert cronsim_answer == datetime(2026, 4, 4, 16, 0, tzinfo=UTC)  # 02:30: 02:00 missed
    ours = CronExpression.parse("*/30 2 * * *", "Australia/Lord_Howe").next_after(after)
    assert ours == datetime(2026, 4, 4, 15, 30, tzinfo=UTC)  # 02:00 +1030


# --- robustness ----------------------------------------------------------------------------


cron_alphabet = string.digits + " */-,#LW?@" + "MONTUEWEDJANFEB" + "xyz"


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=cron_alphabet, max_size=30), tz=st.sampled_from(ZONES))
def test_any_text_parses_or_raises_invalid_input(text: str, tz: str) -> None:
    error: InvalidInput | None = None
    try:
        cron = CronExpression.parse(text, tz)
    except InvalidInput as exc:
        error = exc
    if error is not None:
        assert error.field == "schedule.cron"
        assert error.message
    else:
        assert cron.next_after(datetime(2026, 1, 1, tzinfo=UTC)) is not None


@pytest.mark.parametrize("tz", ["", "Nowhere", "/etc/localtime", "Europe/", "Europe/Berlin\x00"])
def test_bad_zone_names_raise_invalid_input(tz: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        CronExpression.parse("0 0 * * *", tz)
    assert caught.value.field == "schedule.timezone"
