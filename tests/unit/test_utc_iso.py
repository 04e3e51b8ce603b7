"""utc_iso: the instant format of webhook headers and API fields."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from tickwork.clock import utc_iso


def test_whole_seconds_have_no_fraction_and_others_have_milliseconds() -> None:
    assert utc_iso(datetime(2026, 3, 1, 12, 0, tzinfo=UTC)) == "2026-03-01T12:00:00Z"
    assert (
        utc_iso(datetime(2026, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC)) == "2026-03-01T12:00:00.250Z"
    )
    # Milliseconds are truncated, never rounded up into the next second.
    assert (
        utc_iso(datetime(2026, 3, 1, 12, 0, 0, 999_999, tzinfo=UTC)) == "2026-03-01T12:00:00.999Z"
    )
    assert utc_iso(datetime(2026, 3, 1, 12, 0, 0, 500, tzinfo=UTC)) == "2026-03-01T12:00:00.000Z"


def test_other_offsets_are_converted_to_utc() -> None:
    berlin = timezone(timedelta(hours=1))
    assert utc_iso(datetime(2026, 3, 1, 13, 0, tzinfo=berlin)) == "2026-03-01T12:00:00Z"


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 1, 1)))
def test_it_reads_back_as_the_same_instant_to_the_millisecond(naive: datetime) -> None:
    when = naive.replace(tzinfo=UTC)
    text = utc_iso(when)
    assert text.endswith("Z")
    back = datetime.fromisoformat(text[:-1]).replace(tzinfo=UTC)
    assert back == when.replace(microsecond=when.microsecond // 1000 * 1000)
