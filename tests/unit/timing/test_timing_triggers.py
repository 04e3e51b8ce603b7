"""Occurrences of cron / every / at schedules: bounds, exact boundaries, counting, validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.domain.jobs import AtTrigger, CronTrigger, EveryTrigger, Schedule
from tickwork.errors import InvalidInput
from tickwork.timing import (
    count_occurrences,
    first_occurrence,
    latest_occurrence,
    next_occurrence,
    validate_schedule,
)

A = datetime(2026, 1, 1, tzinfo=UTC)  # the interval anchor used throughout
US = timedelta(microseconds=1)


def s(seconds: float) -> datetime:
    """A + seconds."""
    return A + timedelta(seconds=seconds)


def every(
    interval_ms: int = 30_000, *, start_at: datetime | None = None, end_at: datetime | None = None
) -> Schedule:
    return Schedule(
        trigger=EveryTrigger(interval_ms=interval_ms, anchor=A), start_at=start_at, end_at=end_at
    )


def cron(
    expr: str, tz: str = "UTC", *, start_at: datetime | None = None, end_at: datetime | None = None
) -> Schedule:
    return Schedule(trigger=CronTrigger(expr=expr, timezone=tz), start_at=start_at, end_at=end_at)


def at(
    when: datetime, *, start_at: datetime | None = None, end_at: datetime | None = None
) -> Schedule:
    return Schedule(trigger=AtTrigger(at=when), start_at=start_at, end_at=end_at)


# --- next_occurrence -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "after", "expected"),
    [
        pytest.param(every(), s(-1), s(0), id="every-anchor-is-first"),
        pytest.param(every(), s(-86_400 * 365), s(0), id="every-nothing-before-anchor"),
        pytest.param(every(), s(0), s(30), id="every-strictly-after"),
        pytest.param(every(), s(30) - US, s(30), id="every-one-us-before"),
        pytest.param(every(), s(30), s(60), id="every-exactly-on-occurrence"),
        pytest.param(every(1), s(0.0005), s(0.001), id="every-1ms"),
        pytest.param(
            every(), s(86_400 * 3650 + 1), s(86_400 * 3650 + 30), id="every-ten-years-later"
        ),
        pytest.param(every(start_at=s(45)), s(0), s(60), id="every-start-at-skips"),
        pytest.param(every(start_at=s(60)), s(0), s(60), id="every-start-at-inclusive"),
        pytest.param(every(end_at=s(60)), s(30), s(60), id="every-end-at-inclusive"),
        pytest.param(every(end_at=s(60)), s(60), None, id="every-past-end-at"),
        pytest.param(every(end_at=s(59)), s(30), None, id="every-next-beyond-end-at"),
        pytest.param(cron("0 9 * * *"), s(0), s(9 * 3600), id="cron"),
        pytest.param(cron("0 9 * * *"), s(9 * 3600), s(33 * 3600), id="cron-strictly-after"),
        pytest.param(
            cron("0 9 * * *", start_at=s(33 * 3600)),
            s(0),
            s(33 * 3600),
            id="cron-start-at-exactly-on-fire-counts",
        ),
        pytest.param(
            cron("0 9 * * *", start_at=s(9 * 3600 + 1)),
            s(0),
            s(33 * 3600),
            id="cron-start-at-skips",
        ),
        pytest.param(
            cron("0 9 * * *", end_at=s(9 * 3600)), s(0), s(9 * 3600), id="cron-end-at-inclusive"
        ),
        pytest.param(cron("0 9 * * *", end_at=s(9 * 3600 - 1)), s(0), None, id="cron-ended"),
        pytest.param(at(s(100)), s(0), s(100), id="at-future"),
        pytest.param(at(s(100)), s(100), None, id="at-exactly-now-is-past"),
        pytest.param(at(s(100), start_at=s(50)), s(0), s(100), id="at-inside-window"),
    ],
)
def test_next_occurrence(schedule: Schedule, after: datetime, expected: datetime | None) -> None:
    got = next_occurrence(schedule, after)
    assert got == expected
    assert got is None or got.tzinfo is UTC


def test_at_in_another_offset_comes_back_in_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    when = datetime(2026, 5, 1, 11, 0, tzinfo=plus_two)
    got = next_occurrence(at(when), datetime(2026, 5, 1, tzinfo=UTC))
    assert got == datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    assert got is not None
    assert got.tzinfo is UTC


# --- first_occurrence ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "now", "expected"),
    [
        pytest.param(every(), s(0), s(0), id="every-anchor-equal-now-fires-now"),
        pytest.param(every(), s(-500), s(0), id="every-future-anchor"),
        pytest.param(every(), s(0) + US, s(30), id="every-just-missed"),
        pytest.param(every(), s(60), s(60), id="every-now-on-occurrence"),
        pytest.param(every(start_at=s(61)), s(0), s(90), id="every-start-at"),
        pytest.param(every(end_at=s(60)), s(61), None, id="every-window-over"),
        pytest.param(cron("0 9 * * *"), s(9 * 3600), s(33 * 3600), id="cron-strictly-after"),
        pytest.param(cron("0 9 * * *"), s(9 * 3600) - US, s(9 * 3600), id="cron-next"),
        pytest.param(at(s(100)), s(500), s(100), id="at-in-past-still-fires"),
        pytest.param(at(s(100)), s(0), s(100), id="at-future"),
        pytest.param(at(s(100), end_at=s(99)), s(0), None, id="at-outside-window"),
    ],
)
def test_first_occurrence(schedule: Schedule, now: datetime, expected: datetime | None) -> None:
    assert first_occurrence(schedule, now) == expected


# --- latest_occurrence ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "at_or_before", "not_before", "expected"),
    [
        pytest.param(every(), s(75), s(0), s(60), id="every"),
        pytest.param(every(), s(60), s(0), s(60), id="every-upper-inclusive"),
        pytest.param(every(), s(75), s(60), s(60), id="every-lower-inclusive"),
        pytest.param(every(), s(75), s(61), None, id="every-none-in-window"),
        pytest.param(every(), s(-1), s(-100), None, id="every-before-anchor"),
        pytest.param(every(end_at=s(45)), s(100), s(0), s(30), id="every-clipped-by-end-at"),
        pytest.param(every(start_at=s(31)), s(45), s(0), None, id="every-clipped-by-start-at"),
        pytest.param(every(), s(0), s(10), None, id="every-empty-window"),
        pytest.param(cron("*/15 * * * *"), s(44 * 60), s(0), s(30 * 60), id="cron"),
        pytest.param(cron("*/15 * * * *"), s(45 * 60), s(45 * 60), s(45 * 60), id="cron-exact"),
        pytest.param(cron("*/15 * * * *"), s(44 * 60), s(31 * 60), None, id="cron-none"),
        pytest.param(
            cron("*/15 * * * *", end_at=s(20 * 60)),
            s(44 * 60),
            s(0),
            s(15 * 60),
            id="cron-clipped-by-end-at",
        ),
        pytest.param(at(s(100)), s(100), s(100), s(100), id="at-exact"),
        pytest.param(at(s(100)), s(99), s(0), None, id="at-later"),
        pytest.param(at(s(100)), s(200), s(101), None, id="at-earlier"),
    ],
)
def test_latest_occurrence(
    schedule: Schedule, at_or_before: datetime, not_before: datetime, expected: datetime | None
) -> None:
    got = latest_occurrence(schedule, at_or_before=at_or_before, not_before=not_before)
    assert got == expected


# --- count_occurrences ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "after", "until", "cap", "expected"),
    [
        pytest.param(every(), s(0), s(90), 10_000, 3, id="every-excludes-after"),
        pytest.param(every(), s(0) - US, s(90), 10_000, 4, id="every-includes-anchor"),
        pytest.param(every(), s(0), s(89), 10_000, 2, id="every-until-inclusive"),
        pytest.param(every(), s(0), s(90), 2, 2, id="every-capped"),
        pytest.param(every(), s(90), s(90), 10_000, 0, id="every-empty"),
        pytest.param(every(), s(90), s(0), 10_000, 0, id="every-reversed"),
        pytest.param(every(end_at=s(60)), s(0), s(90), 10_000, 2, id="every-end-at"),
        pytest.param(every(start_at=s(31)), s(0), s(90), 10_000, 2, id="every-start-at"),
        pytest.param(every(start_at=s(30)), s(0), s(90), 10_000, 3, id="every-start-at-incl"),
        pytest.param(every(1), s(-10), s(86_400), 10**12, 86_400_001, id="every-1ms-one-day"),
        pytest.param(
            cron("*/15 * * * *"), s(0), s(86_400), 10_000, 96, id="cron-quarter-hours-a-day"
        ),
        pytest.param(
            cron("*/15 * * * *", "Europe/Berlin"),
            datetime(2026, 10, 24, 22, 0, tzinfo=UTC),
            datetime(2026, 10, 25, 23, 0, tzinfo=UTC),
            10_000,
            100,
            id="cron-25-hour-local-day",
        ),
        pytest.param(
            cron("30 2 * * *", "Europe/Berlin"),
            datetime(2026, 3, 1, tzinfo=UTC),
            datetime(2026, 4, 1, tzinfo=UTC),
            10_000,
            31,
            id="cron-skipped-hour-still-fires-once",
        ),
        pytest.param(cron("* * * * * *"), s(0), s(86_400), 10_000, 10_000, id="cron-capped"),
        pytest.param(
            cron("0 9 * * *", start_at=s(9 * 3600), end_at=s(33 * 3600)),
            s(-86_400),
            s(86_400 * 5),
            10_000,
            2,
            id="cron-window-inclusive",
        ),
        pytest.param(at(s(100)), s(99), s(100), 10_000, 1, id="at-inside"),
        pytest.param(at(s(100)), s(100), s(200), 10_000, 0, id="at-at-after-is-excluded"),
    ],
)
def test_count_occurrences(
    schedule: Schedule, after: datetime, until: datetime, cap: int, expected: int
) -> None:
    assert count_occurrences(schedule, after=after, until=until, cap=cap) == expected


@settings(max_examples=200, deadline=None)
@given(
    interval_ms=st.integers(1, 10**9),
    after_us=st.integers(-(10**12), 10**13),
    span_us=st.integers(0, 10**11),
)
def test_every_arithmetic_agrees_with_walking(
    interval_ms: int, after_us: int, span_us: int
) -> None:
    schedule = every(interval_ms)
    after = A + timedelta(microseconds=after_us)
    until = after + timedelta(microseconds=span_us)
    nxt = next_occurrence(schedule, after)
    assert nxt is not None
    assert nxt > after
    assert (nxt - A) % timedelta(milliseconds=interval_ms) == timedelta(0)
    assert nxt == A or nxt - timedelta(milliseconds=interval_ms) <= after
    count = count_occurrences(schedule, after=after, until=until, cap=10**15)
    latest = latest_occurrence(schedule, at_or_before=until, not_before=after + US)
    if count == 0:
        assert nxt > until
        assert latest is None
    else:
        assert latest == nxt + (count - 1) * timedelta(milliseconds=interval_ms)
        assert latest is not None
        assert latest <= until < latest + timedelta(milliseconds=interval_ms)


# --- validate_schedule ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        every(),
        every(start_at=s(-100), end_at=s(0)),
        cron("0 9 * * MON-FRI", "Europe/Berlin"),
        cron("0 0 1 1 *", start_at=s(0), end_at=s(0) + timedelta(days=1)),
        at(s(100), start_at=s(100), end_at=s(200)),
        at(s(-100)),  # in the past: fires late, once
    ],
)
def test_valid_schedules(schedule: Schedule) -> None:
    validate_schedule(schedule)


def _naive(when: datetime) -> datetime:
    return when.replace(tzinfo=None)


@pytest.mark.parametrize(
    ("schedule", "field", "fragment"),
    [
        (every(start_at=s(10), end_at=s(10)), "schedule.end_at", "must be later than start_at"),
        (every(start_at=s(10), end_at=s(5)), "schedule.end_at", "must be later than start_at"),
        (every(start_at=_naive(s(10))), "schedule.start_at", "UTC offset"),
        (every(end_at=_naive(s(10))), "schedule.end_at", "UTC offset"),
        (every(0), "schedule.every", "at least 1 ms"),
        (every(367 * 86_400_000), "schedule.every", "longer than 366 days"),
        (
            Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=_naive(A))),
            "schedule.anchor",
            "UTC offset",
        ),
        (every(end_at=s(-1)), "schedule.end_at", "would never fire"),
        (every(start_at=s(1), end_at=s(29)), "schedule.end_at", "would never fire"),
        (cron("0 0 30 2 *"), "schedule.cron", "never occurs in February"),
        (cron("0 0 * * *", "Berlin"), "schedule.timezone", "unknown time zone"),
        (
            cron("0 0 1 1 *", start_at=s(86_400), end_at=s(86_400 * 300)),
            "schedule.end_at",
            "would never fire",
        ),
        (at(s(100), end_at=s(99)), "schedule.at", "outside the window"),
        (at(s(100), start_at=s(101)), "schedule.at", "outside the window"),
        (at(_naive(s(100))), "schedule.at", "UTC offset"),
        (
            Schedule(trigger=AtTrigger(at=A), misfire_grace_ms=-1),
            "schedule.misfire_grace_ms",
            "0 ms or more",
        ),
    ],
)
def test_invalid_schedules_name_the_field(schedule: Schedule, field: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_schedule(schedule)
    assert caught.value.field == field
    assert fragment in caught.value.message
