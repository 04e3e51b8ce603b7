"""preview_cron: fires with their local time, and notes on what a clock change did."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tickwork.errors import InvalidInput
from tickwork.timing import PreviewEntry, preview_cron


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def notes(entries: list[PreviewEntry]) -> list[tuple[str, str | None]]:
    return [(e.utc.strftime("%Y-%m-%dT%H:%M"), e.note) for e in entries]


@pytest.mark.parametrize(
    ("expr", "tz", "after", "count", "expected"),
    [
        pytest.param(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-03-28T12:00",
            2,
            [
                (
                    "2026-03-29T01:00",
                    "02:30 does not exist on 2026-03-29 in Europe/Berlin (clocks jump "
                    "02:00->03:00); fires at 03:00 CEST instead",
                ),
                ("2026-03-30T00:30", None),
            ],
            id="berlin-skipped",
        ),
        pytest.param(
            "30 2 * * *",
            "Europe/Berlin",
            "2026-10-24T12:00",
            2,
            [
                (
                    "2026-10-25T00:30",
                    "02:30 happens twice on 2026-10-25 in Europe/Berlin (clocks go back "
                    "03:00->02:00); fires once, at the first (CEST)",
                ),
                ("2026-10-26T01:30", None),
            ],
            id="berlin-repeated",
        ),
        pytest.param(
            "30 2 * * *",
            "America/New_York",
            "2026-03-07T12:00",
            1,
            [
                (
                    "2026-03-08T07:00",
                    "02:30 does not exist on 2026-03-08 in America/New_York (clocks jump "
                    "02:00->03:00); fires at 03:00 EDT instead",
                ),
            ],
            id="new-york-skipped",
        ),
        pytest.param(
            "30 1 * * *",
            "America/New_York",
            "2026-10-31T12:00",
            2,
            [
                (
                    "2026-11-01T05:30",
                    "01:30 happens twice on 2026-11-01 in America/New_York (clocks go back "
                    "02:00->01:00); fires once, at the first (EDT)",
                ),
                ("2026-11-02T06:30", None),
            ],
            id="new-york-repeated",
        ),
        pytest.param(
            "0,30 2 * * *",
            "Europe/Berlin",
            "2026-03-29T00:00",
            1,
            [
                (
                    "2026-03-29T01:00",
                    "02:00 and 02:30 do not exist on 2026-03-29 in Europe/Berlin (clocks jump "
                    "02:00->03:00); fires once at 03:00 CEST instead",
                ),
            ],
            id="berlin-two-skipped-merged",
        ),
        pytest.param(
            "0 2,3 * * *",
            "Europe/Berlin",
            "2026-03-29T00:00",
            1,
            [
                (
                    "2026-03-29T01:00",
                    "02:00 does not exist on 2026-03-29 in Europe/Berlin (clocks jump "
                    "02:00->03:00); fires at 03:00 CEST instead, together with the regular 03:00 "
                    "run",
                ),
            ],
            id="berlin-skipped-merged-with-regular",
        ),
        pytest.param(
            "0 2 * * *",
            "Australia/Lord_Howe",
            "2026-10-03T00:00",
            1,
            [
                (
                    "2026-10-03T15:30",
                    "02:00 does not exist on 2026-10-04 in Australia/Lord_Howe (clocks jump "
                    "02:00->02:30); fires at 02:30 +11 instead",
                ),
            ],
            id="lord-howe-half-hour",
        ),
        pytest.param(
            "0 0 * * *",
            "America/Santiago",
            "2026-09-05T12:00",
            1,
            [
                (
                    "2026-09-06T04:00",
                    "00:00 does not exist on 2026-09-06 in America/Santiago (clocks jump "
                    "00:00->01:00); fires at 01:00 -03 instead",
                ),
            ],
            id="santiago-midnight",
        ),
        pytest.param(
            "30 23 * * *",
            "America/Santiago",
            "2026-04-04T12:00",
            1,
            [
                (
                    "2026-04-05T02:30",
                    "23:30 happens twice on 2026-04-04 in America/Santiago (clocks go back "
                    "2026-04-05 00:00->2026-04-04 23:00); fires once, at the first (-03)",
                ),
            ],
            id="santiago-repeated-hour-across-midnight",
        ),
        pytest.param(
            "*/30 * * * *",
            "Europe/Berlin",
            "2026-03-29T00:15",
            2,
            [
                ("2026-03-29T00:30", None),
                (
                    "2026-03-29T01:00",
                    "02:00-02:59 does not exist on 2026-03-29 in Europe/Berlin (clocks jump "
                    "02:00->03:00); 02:00 and 02:30 in that stretch do not fire, because this "
                    "expression follows elapsed time",
                ),
            ],
            id="elapsed-skipped",
        ),
        pytest.param(
            "0 * * * *",
            "America/New_York",
            "2026-11-01T05:30",
            2,
            [
                (
                    "2026-11-01T06:00",
                    "01:00 happens twice on 2026-11-01 in America/New_York (clocks go back "
                    "02:00->01:00); this expression follows elapsed time, so it fires at both: "
                    "this is the second (EST)",
                ),
                ("2026-11-01T07:00", None),
            ],
            id="elapsed-repeated-second",
        ),
        pytest.param(
            "0 9 * * *",
            "Europe/Berlin",
            "2026-06-01T00:00",
            3,
            [("2026-06-01T07:00", None), ("2026-06-02T07:00", None), ("2026-06-03T07:00", None)],
            id="ordinary-days-no-note",
        ),
        pytest.param(
            "*/5 * * * *",
            "UTC",
            "2026-03-29T00:58",
            3,
            [("2026-03-29T01:00", None), ("2026-03-29T01:05", None), ("2026-03-29T01:10", None)],
            id="utc-no-note",
        ),
    ],
)
def test_preview_notes(
    expr: str, tz: str, after: str, count: int, expected: list[tuple[str, str | None]]
) -> None:
    assert notes(preview_cron(expr, tz, z(after), count)) == expected


def test_preview_entries_carry_utc_and_local() -> None:
    (entry,) = preview_cron("30 2 * * *", "Europe/Berlin", z("2026-10-24T12:00"), 1)
    assert entry.utc.tzinfo is UTC
    assert entry.local.utcoffset() is not None
    # Compare through UTC: by PEP 495 an ambiguous local time never == an instant in UTC.
    assert entry.local.astimezone(UTC) == entry.utc
    assert entry.local.strftime("%H:%M %Z") == "02:30 CEST"


def test_a_preview_of_a_day_of_quarter_hours_notes_only_the_repeated_hour() -> None:
    entries = preview_cron("*/15 * * * *", "Europe/Berlin", z("2026-10-24T22:00"), 100)
    noted = [e for e in entries if e.note]
    assert len(noted) == 8  # 02:00..02:45 CEST and 02:00..02:45 CET
    assert [e.note.endswith("(CEST)") for e in noted if e.note] == [True] * 4 + [False] * 4


@pytest.mark.parametrize("count", [0, -1, 1001, True, 2.0])
def test_count_out_of_range(count: int) -> None:
    with pytest.raises(InvalidInput) as caught:
        preview_cron("0 9 * * *", "UTC", z("2026-01-01T00:00"), count)
    assert caught.value.field == "count"


def test_naive_after_is_refused() -> None:
    with pytest.raises(InvalidInput) as caught:
        preview_cron("0 9 * * *", "UTC", datetime(2026, 1, 1), 1)
    assert caught.value.field == "after"


def test_bad_expression_names_its_field() -> None:
    with pytest.raises(InvalidInput) as caught:
        preview_cron("0 0 30 2 *", "UTC", z("2026-01-01T00:00"), 1)
    assert caught.value.field == "schedule.cron"
