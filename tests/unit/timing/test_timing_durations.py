"""parse_duration_ms / format_duration_ms: accepted forms, rejections, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.errors import InvalidInput
from tickwork.timing import MAX_INTERVAL_MS, format_duration_ms, parse_duration_ms


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        (30, 30_000),
        (1, 1_000),
        (0.25, 250),
        (0.001, 1),
        (0.0015, 2),  # halves round up
        (1.005, 1_005),  # decimal, not binary, rounding
        ("PT30S", 30_000),
        ("PT1.5S", 1_500),
        ("PT0.25S", 250),
        ("PT0,5S", 500),
        ("PT0.001S", 1),
        ("PT5M", 300_000),
        ("PT1H30M", 5_400_000),
        ("P1D", 86_400_000),
        ("P1DT2H", 93_600_000),
        ("P2W", 1_209_600_000),
        ("pt30s", 30_000),
        (" PT30S ", 30_000),
        ("P366D", MAX_INTERVAL_MS),
        (366 * 86_400, MAX_INTERVAL_MS),
    ],
)
def test_accepted_forms(value: str | float, ms: int) -> None:
    assert parse_duration_ms(value) == ms


@pytest.mark.parametrize(
    ("value", "fragment", "code"),
    [
        ("P1M", "months or years", "invalid_duration"),
        ("P1Y", "use a cron schedule", "invalid_duration"),
        ("P1Y2M3D", "months or years", "invalid_duration"),
        ("PT1.5H", "only the seconds", "invalid_duration"),
        ("P", "not an ISO-8601 duration", "invalid_duration"),
        ("PT", "not an ISO-8601 duration", "invalid_duration"),
        ("P1DT", "not an ISO-8601 duration", "invalid_duration"),
        ("30", "send the number 30", "invalid_duration"),
        ("30s", "not an ISO-8601 duration", "invalid_duration"),
        ("-PT30S", "must be positive", "invalid_duration"),
        ("", "not an ISO-8601 duration", "invalid_duration"),
        ("PT0S", "shorter than 1 millisecond", "interval_too_short"),
        ("PT0.0004S", "shorter than 1 millisecond", "interval_too_short"),
        (0, "must be positive", "interval_too_short"),
        (-5, "must be positive", "interval_too_short"),
        (0.0004, "shorter than 1 millisecond", "interval_too_short"),
        (float("nan"), "not a finite number", "invalid_duration"),
        (float("inf"), "not a finite number", "invalid_duration"),
        ("P367D", "longer than 366 days", "interval_too_long"),
        ("P53W", "longer than 366 days", "interval_too_long"),
        (10**12, "longer than 366 days", "interval_too_long"),
        ("P" + "9" * 100 + "D", "too long", "invalid_duration"),
        (True, "must be a string or a number", "invalid_duration"),
    ],
)
def test_rejections_say_what_and_how(value: object, fragment: str, code: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_duration_ms(value)  # type: ignore[arg-type]
    assert caught.value.field == "schedule.every"
    assert caught.value.code == code
    assert fragment in caught.value.message


def test_field_name_is_passed_through() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_duration_ms("P1M", field="retry.backoff")
    assert caught.value.field == "retry.backoff"


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (30_000, "PT30S"),
        (1_500, "PT1.5S"),
        (1, "PT0.001S"),
        (250, "PT0.25S"),
        (90_000_000, "P1DT1H"),
        (86_400_000, "P1D"),
        (60_000, "PT1M"),
        (3_661_001, "PT1H1M1.001S"),
        (1_209_600_000, "P14D"),
        (0, "PT0S"),
    ],
)
def test_canonical_format(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text


def test_format_refuses_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_duration_ms(-1)


@settings(max_examples=300, deadline=None)
@given(ms=st.integers(1, MAX_INTERVAL_MS))
def test_format_then_parse_round_trips(ms: int) -> None:
    assert parse_duration_ms(format_duration_ms(ms)) == ms


@settings(max_examples=200, deadline=None)
@given(ms=st.integers(1, MAX_INTERVAL_MS))
def test_seconds_number_and_iso_agree(ms: int) -> None:
    assert parse_duration_ms(ms / 1000) == ms
