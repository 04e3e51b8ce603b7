"""Table tests for CronExpression: exact UTC instants across DST changes and calendar features.

Every DST row lists *all* fires in a window around the clock change, so each row asserts both
what fires and that it fires exactly once. Clock changes used (checked against zoneinfo):

    Europe/Berlin        2026-03-29 01:00Z  02:00 CET  -> 03:00 CEST
                         2026-10-25 01:00Z  03:00 CEST -> 02:00 CET
    America/New_York     2026-03-08 07:00Z  02:00 EST  -> 03:00 EDT
                         2026-11-01 06:00Z  02:00 EDT  -> 01:00 EST
    Australia/Lord_Howe  2026-04-04 15:00Z  02:00 +11  -> 01:30 +1030  (Sunday 2026-04-05)
                         2026-10-03 15:30Z  02:00 +1030 -> 02:30 +11   (Sunday 2026-10-04)
    America/Santiago     2026-04-05 03:00Z  24:00 -03  -> 23:00 -04    (end of Saturday 04-04)
                         2026-09-06 04:00Z  00:00 -04  -> 01:00 -03    (Sunday 09-06)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tickwork.errors import InvalidInput
from tickwork.timing import CronExpression


def z(text: str) -> datetime:
    """'2026-03-29T01:00' or '2026-03-29T01:00:30' as an aware UTC instant."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires_between(expr: str, tz: str, start: str, end: str) -> list[str]:
    cron = CronExpression.parse(expr, tz)
    out = []
    for instant in cron.iter_after(z(start)):
        if instant > z(end):
            break
        assert instant.tzinfo is UTC
        out.append(instant.strftime("%Y-%m-%dT%H:%M:%S" if instant.second else "%Y-%m-%dT%H:%M"))
    return out


@pytest.mark.parametrize(
    ("expr", "tz", "start", "end", "expected"),
    [
        pytest.param(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T00:00",
            "2026-03-30T12:00",
            ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"],
            id="berlin-spring-fixed-time-in-gap-fires-at-03:00-CEST",
        ),
        pytest.param(
            "0,30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T00:00",
            "2026-03-30T12:00",
            [
                "2026-03-28T01:00",
                "2026-03-28T01:30",
                "2026-03-29T01:00",
                "2026-03-30T00:00",
                "2026-03-30T00:30",
            ],
            id="berlin-spring-two-skipped-times-merge-into-one-fire",
        ),
        pytest.param(
            "0 2,3 * * *",
            "Europe/Berlin",
            "2026-03-29T00:00",
            "2026-03-29T12:00",
            ["2026-03-29T01:00"],
            id="berlin-spring-skipped-02:00-merges-with-regular-03:00",
        ),
        pytest.param(
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-03-28T23:59",
            "2026-03-29T01:30",
            ["2026-03-29T00:00", "2026-03-29T00:30", "2026-03-29T01:00", "2026-03-29T01:30"],
            id="berlin-spring-elapsed-time-keeps-its-rhythm",
        ),
        pytest.param(
            "0 */2 * * *",
            "Europe/Berlin",
            "2026-03-28T22:00",
            "2026-03-29T05:00",
            ["2026-03-28T23:00", "2026-03-29T02:00", "2026-03-29T04:00"],
            id="berlin-spring-star-hour-skips-02:00",
        ),
        pytest.param(
            "* 2 * * *",
            "Europe/Berlin",
            "2026-03-29T00:00",
            "2026-03-29T23:00",
            [],
            id="berlin-spring-star-minute-in-missing-hour-never-fires",
        ),
        pytest.param(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T00:00",
            "2026-10-26T12:00",
            ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"],
            id="berlin-fall-fixed-time-in-repeated-hour-fires-once-at-first",
        ),
        pytest.param(
            "0 30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T00:00",
            "2026-10-26T12:00",
            ["2026-10-24T00:30", "2026-10-25T00:30", "2026-10-26T01:30"],
            id="berlin-fall-six-field-fixed-time-fires-once-too",
        ),
        pytest.param(
            "0 30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T00:00",
            "2026-03-30T12:00",
            ["2026-03-28T01:30", "2026-03-29T01:00", "2026-03-30T00:30"],
            id="berlin-spring-six-field-fixed-time-moves-to-03:00",
        ),
        pytest.param(
            "*/15 * * * *",
            "Europe/Berlin",
            "2026-10-24T23:59",
            "2026-10-25T01:59",
            [
                "2026-10-25T00:00",
                "2026-10-25T00:15",
                "2026-10-25T00:30",
                "2026-10-25T00:45",
                "2026-10-25T01:00",
                "2026-10-25T01:15",
                "2026-10-25T01:30",
                "2026-10-25T01:45",
            ],
            id="berlin-fall-elapsed-time-fires-in-both-passes",
        ),
        pytest.param(
            "0 */2 * * *",
            "Europe/Berlin",
            "2026-10-24T21:30",
            "2026-10-25T03:30",
            ["2026-10-24T22:00", "2026-10-25T00:00", "2026-10-25T01:00", "2026-10-25T03:00"],
            id="berlin-fall-star-hour-fires-at-both-02:00s",
        ),
        pytest.param(
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T00:00",
            "2026-03-09T12:00",
            ["2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30"],
            id="new-york-spring-fixed-time-in-gap-fires-at-03:00-EDT",
        ),
        pytest.param(
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T00:00",
            "2026-11-02T12:00",
            ["2026-10-31T05:30", "2026-11-01T05:30", "2026-11-02T06:30"],
            id="new-york-fall-fixed-time-fires-once-at-EDT",
        ),
        pytest.param(
            "*/30 1 * * *",
            "America/New_York",
            "2026-11-01T04:59",
            "2026-11-01T12:00",
            ["2026-11-01T05:00", "2026-11-01T05:30", "2026-11-01T06:00", "2026-11-01T06:30"],
            id="new-york-fall-elapsed-time-fires-in-both-01:00-hours",
        ),
        pytest.param(
            "0 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-02T00:00",
            "2026-10-04T23:00",
            ["2026-10-02T15:30", "2026-10-03T15:30", "2026-10-04T15:00"],
            id="lord-howe-spring-02:00-moves-to-02:30",
        ),
        pytest.param(
            "15 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-02T00:00",
            "2026-10-04T23:00",
            ["2026-10-02T15:45", "2026-10-03T15:30", "2026-10-04T15:15"],
            id="lord-howe-spring-02:15-moves-to-02:30",
        ),
        pytest.param(
            "45 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-02T00:00",
            "2026-10-04T23:00",
            ["2026-10-02T16:15", "2026-10-03T15:45", "2026-10-04T15:45"],
            id="lord-howe-spring-02:45-exists-and-is-untouched",
        ),
        pytest.param(
            "*/20 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T13:00",
            "2026-10-03T17:00",
            ["2026-10-03T15:40"],
            id="lord-howe-spring-elapsed-time-skips-02:00-and-02:20",
        ),
        pytest.param(
            "*/30 3 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T13:00",
            "2026-10-03T17:00",
            ["2026-10-03T16:00", "2026-10-03T16:30"],
            id="lord-howe-spring-elapsed-time-hour-after-gap-complete",
        ),
        pytest.param(
            "45 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-03T00:00",
            "2026-04-05T23:00",
            ["2026-04-03T14:45", "2026-04-04T14:45", "2026-04-05T15:15"],
            id="lord-howe-fall-repeated-01:45-fires-once-at-+11",
        ),
        pytest.param(
            "*/15 1 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T13:00",
            "2026-04-04T17:00",
            [
                "2026-04-04T14:00",
                "2026-04-04T14:15",
                "2026-04-04T14:30",
                "2026-04-04T14:45",
                "2026-04-04T15:00",
                "2026-04-04T15:15",
            ],
            id="lord-howe-fall-elapsed-time-repeats-only-the-repeated-half-hour",
        ),
        pytest.param(
            "*/30 2 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T13:00",
            "2026-04-04T17:00",
            ["2026-04-04T15:30", "2026-04-04T16:00"],
            id="lord-howe-fall-elapsed-time-hour-after-fold-complete",
        ),
        pytest.param(
            "0 0 * * *",
            "America/Santiago",
            "2026-09-04T12:00",
            "2026-09-07T12:00",
            ["2026-09-05T04:00", "2026-09-06T04:00", "2026-09-07T03:00"],
            id="santiago-spring-missing-midnight-fires-at-01:00",
        ),
        pytest.param(
            "30 23 * * *",
            "America/Santiago",
            "2026-04-03T12:00",
            "2026-04-06T12:00",
            ["2026-04-04T02:30", "2026-04-05T02:30", "2026-04-06T03:30"],
            id="santiago-fall-repeated-23:30-fires-once-at-first",
        ),
        pytest.param(
            "0 0 * * *",
            "America/Santiago",
            "2026-04-03T12:00",
            "2026-04-06T12:00",
            ["2026-04-04T03:00", "2026-04-05T04:00", "2026-04-06T04:00"],
            id="santiago-fall-midnight-after-repeated-hour",
        ),
        pytest.param(
            "*/30 23 * * *",
            "America/Santiago",
            "2026-04-05T01:59",
            "2026-04-05T12:00",
            ["2026-04-05T02:00", "2026-04-05T02:30", "2026-04-05T03:00", "2026-04-05T03:30"],
            id="santiago-fall-elapsed-time-fires-in-both-23:00-hours",
        ),
    ],
)
def test_fires_across_dst_changes(
    expr: str, tz: str, start: str, end: str, expected: list[str]
) -> None:
    assert fires_between(expr, tz, start, end) == expected


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        pytest.param(
            "0 0 29 2 *",
            "2026-01-01T00:00",
            ["2028-02-29T00:00", "2032-02-29T00:00"],
            id="leap-day-waits-for-leap-year",
        ),
        pytest.param(
            "0 0 L * *",
            "2027-12-15T00:00",
            ["2027-12-31T00:00", "2028-01-31T00:00", "2028-02-29T00:00", "2028-03-31T00:00"],
            id="L-is-last-day-of-month",
        ),
        pytest.param(
            "0 0 LW * *",
            "2026-04-15T00:00",
            ["2026-04-30T00:00", "2026-05-29T00:00", "2026-06-30T00:00"],
            id="LW-is-last-weekday-of-month",
        ),
        pytest.param(
            "0 9 * * MON#2",
            "2026-01-01T00:00",
            ["2026-01-12T09:00", "2026-02-09T09:00", "2026-03-09T09:00"],
            id="hash-is-nth-weekday",
        ),
        pytest.param(
            "0 9 * * 5L",
            "2026-01-01T00:00",
            ["2026-01-30T09:00", "2026-02-27T09:00", "2026-03-27T09:00"],
            id="nL-is-last-weekday-n",
        ),
        pytest.param(
            "0 0 1 * MON",
            "2026-03-01T00:00",
            [
                "2026-03-02T00:00",
                "2026-03-09T00:00",
                "2026-03-16T00:00",
                "2026-03-23T00:00",
                "2026-03-30T00:00",
                "2026-04-01T00:00",
                "2026-04-06T00:00",
            ],
            id="dom-and-dow-both-restricted-are-ORed",
        ),
        pytest.param(
            "0 0 */2 * MON",
            "2026-03-01T00:00",
            ["2026-03-09T00:00", "2026-03-23T00:00", "2026-04-13T00:00", "2026-04-27T00:00"],
            id="dom-starting-with-star-is-ANDed",
        ),
        pytest.param(
            "0 0 1 * */7",
            "2026-01-01T00:00",
            ["2026-02-01T00:00", "2026-03-01T00:00", "2026-11-01T00:00"],
            id="dow-starting-with-star-is-ANDed",
        ),
        pytest.param(
            "0 0 * * 7",
            "2026-01-01T00:00",
            ["2026-01-04T00:00", "2026-01-11T00:00"],
            id="7-is-sunday",
        ),
        pytest.param(
            "0 9 * jan,JUL mon-fri",
            "2026-06-30T12:00",
            ["2026-07-01T09:00", "2026-07-02T09:00", "2026-07-03T09:00", "2026-07-06T09:00"],
            id="names-any-case",
        ),
        pytest.param(
            "30 0 9 * * *",
            "2026-01-01T00:00",
            ["2026-01-01T09:00:30", "2026-01-02T09:00:30"],
            id="six-fields-seconds-first",
        ),
        pytest.param(
            "*/20 * * * * *",
            "2026-01-01T00:00",
            ["2026-01-01T00:00:20", "2026-01-01T00:00:40", "2026-01-01T00:01"],
            id="six-fields-every-20-seconds",
        ),
        pytest.param(
            "5-20/5 8-10/2 * * *",
            "2026-01-01T00:00",
            [
                "2026-01-01T08:05",
                "2026-01-01T08:10",
                "2026-01-01T08:15",
                "2026-01-01T08:20",
                "2026-01-01T10:05",
            ],
            id="ranges-with-steps",
        ),
    ],
)
def test_calendar_features(expr: str, start: str, expected: list[str]) -> None:
    cron = CronExpression.parse(expr)
    got = []
    for instant in cron.iter_after(z(start)):
        got.append(instant.strftime("%Y-%m-%dT%H:%M:%S" if instant.second else "%Y-%m-%dT%H:%M"))
        if len(got) == len(expected):
            break
    assert got == expected


@pytest.mark.parametrize(
    ("macro", "equivalent"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_macros_mean_their_five_field_forms(macro: str, equivalent: str) -> None:
    start = z("2026-03-28T12:34")
    for tz in ("UTC", "Europe/Berlin"):
        via_macro = CronExpression.parse(macro, tz)
        plain = CronExpression.parse(equivalent, tz)
        assert via_macro.expr == macro
        assert via_macro.fixed_time == plain.fixed_time
        assert list(_take(via_macro, start, 30)) == list(_take(plain, start, 30))


def test_next_after_is_strictly_after_and_utc() -> None:
    cron = CronExpression.parse("0 9 * * *", "Europe/Berlin")
    nine_cest = z("2026-06-01T07:00")
    assert cron.next_after(nine_cest) == z("2026-06-02T07:00")
    assert cron.next_after(nine_cest - timedelta(microseconds=1)) == nine_cest
    aware_local = nine_cest.astimezone(ZoneInfo("America/Chicago"))
    result = cron.next_after(aware_local)
    assert result == z("2026-06-02T07:00")
    assert result is not None
    assert result.tzinfo is UTC


@pytest.mark.parametrize(
    ("expr", "tz", "when", "expected"),
    [
        pytest.param("0 9 * * *", "UTC", "2026-06-01T09:00", "2026-06-01T09:00", id="exact"),
        pytest.param(
            "0 9 * * *", "UTC", "2026-06-01T08:59:59", "2026-05-31T09:00", id="just-before"
        ),
        pytest.param(
            "*/20 * * * * *", "UTC", "2026-06-01T09:00:39", "2026-06-01T09:00:20", id="seconds"
        ),
        pytest.param(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-25T01:10",
            "2026-10-25T00:30",
            id="second-pass-of-repeated-hour-sees-first-pass-fire",
        ),
        pytest.param(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-29T01:00",
            "2026-03-29T01:00",
            id="moved-fire-at-jump",
        ),
        pytest.param(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-29T00:59:59",
            "2026-03-28T01:30",
            id="moved-fire-not-yet",
        ),
        pytest.param(
            "*/30 2 * * *",
            "Australia/Lord_Howe",
            "2026-04-04T15:45",
            "2026-04-04T15:30",
            id="lord-howe-elapsed-after-fold",
        ),
        pytest.param(
            "*/15 * * * *",
            "Europe/Berlin",
            "2026-10-25T01:05",
            "2026-10-25T01:00",
            id="elapsed-in-second-pass",
        ),
    ],
)
def test_latest_at_or_before(expr: str, tz: str, when: str, expected: str) -> None:
    cron = CronExpression.parse(expr, tz)
    assert cron.latest_at_or_before(z(when)) == z(expected)


def test_latest_at_or_before_includes_exact_boundary_with_microseconds() -> None:
    cron = CronExpression.parse("0 9 * * *")
    assert cron.latest_at_or_before(z("2026-06-01T09:00:00.000001")) == z("2026-06-01T09:00")


def test_naive_datetimes_are_refused() -> None:
    cron = CronExpression.parse("0 9 * * *")
    with pytest.raises(ValueError, match="naive"):
        cron.next_after(datetime(2026, 1, 1))


def test_parse_is_cached() -> None:
    assert CronExpression.parse("7 7 * * *", "Europe/Berlin") is CronExpression.parse(
        "7 7 * * *", "Europe/Berlin"
    )


def test_fixed_time_follows_debian_star_rule() -> None:
    assert CronExpression.parse("30 2 * * *").fixed_time
    assert CronExpression.parse("0 0-23/2 * * *").fixed_time
    assert CronExpression.parse("0 30 2 * * *").fixed_time
    assert not CronExpression.parse("0 */2 * * *").fixed_time
    assert not CronExpression.parse("*/5 9 * * *").fixed_time
    assert not CronExpression.parse("@hourly").fixed_time
    assert CronExpression.parse("@daily").fixed_time


@pytest.mark.parametrize(
    ("expr", "tz", "field", "fragment"),
    [
        ("0 0 30 2 *", "UTC", "schedule.cron", "day-of-month 30 never occurs in February"),
        ("0 0 31 4 *", "UTC", "schedule.cron", "day-of-month 31 never occurs in April"),
        ("0 0 31 4,6,9 *", "UTC", "schedule.cron", "April or June or September"),
        ("0 0 */8 * MON#5", "UTC", "schedule.cron", "would never fire"),
        ("0 0 * * *", "Mars/Olympus_Mons", "schedule.timezone", "unknown time zone"),
        ("0 0 * * *", "europe/berlin", "schedule.timezone", "did you mean 'Europe/Berlin'"),
        ("0 0 * * *", "", "schedule.timezone", "empty"),
        ("0 0 * * *", "../../etc/passwd", "schedule.timezone", "unknown time zone"),
        ("@reboot", "UTC", "schedule.cron", "'@reboot' has no fire time"),
        ("@fortnightly", "UTC", "schedule.cron", "unknown macro"),
        ("", "UTC", "schedule.cron", "empty"),
        ("garbage", "UTC", "schedule.cron", "has 1 field;"),
        ("0 0 * * * * 2026", "UTC", "schedule.cron", "a year field is not supported"),
        ("0 2 * * * 30", "UTC", "schedule.cron", "seconds field comes first"),
        ("0 0 12 * * ?", "UTC", "schedule.cron", "Quartz"),
        ("60 * * * *", "UTC", "schedule.cron", "the minute field '60'"),
        ("* 24 * * *", "UTC", "schedule.cron", "the hour field '24'"),
        ("* * 0 * *", "UTC", "schedule.cron", "the day-of-month field '0'"),
        ("* * * 13 *", "UTC", "schedule.cron", "the month field '13'"),
        ("* * * * 8", "UTC", "schedule.cron", "the day-of-week field '8'"),
        ("* * * * FRI-MON", "UTC", "schedule.cron", "upward ranges"),
        ("*/0 * * * *", "UTC", "schedule.cron", "the minute field '*/0'"),
        ("60 * * * * *", "UTC", "schedule.cron", "the second field '60'"),
        ("* * * * MON#6", "UTC", "schedule.cron", "day-of-week field 'MON#6'"),
        ("* * 15W * *", "UTC", "schedule.cron", "day-of-month field '15W'"),
    ],
)
def test_rejections_name_the_field_and_the_fix(
    expr: str, tz: str, field: str, fragment: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        CronExpression.parse(expr, tz)
    assert caught.value.field == field
    assert fragment in caught.value.message
    assert ";" in caught.value.message or "(" in caught.value.message  # says how to fix it


def test_non_string_input_is_invalid_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        CronExpression.parse(5, "UTC")  # type: ignore[arg-type]
    assert caught.value.field == "schedule.cron"


def test_explain_describes_the_fields() -> None:
    assert CronExpression.parse("0 9 * * MON").explain() == "At 09:00 on Monday"


def _take(cron: CronExpression, start: datetime, n: int) -> list[datetime]:
    out = []
    for instant in cron.iter_after(start):
        out.append(instant)
        if len(out) == n:
            break
    return out
