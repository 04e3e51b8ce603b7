"""preview_cron with a job's DST choices: the fires the choice gives, and notes naming it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tickwork.domain.jobs import DstGap, DstRepeat
from tickwork.timing import preview_cron

BERLIN_SPRING = "on 2026-03-29 in Europe/Berlin (clocks jump 02:00->03:00)"
NY_AUTUMN = "01:30 happens twice on 2026-11-01 in America/New_York (clocks go back 02:00->01:00)"


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def notes(
    expr: str, tz: str, after: str, count: int, gap: DstGap, repeat: DstRepeat
) -> list[tuple[str, str | None]]:
    entries = preview_cron(expr, tz, z(after), count, gap=gap, repeat=repeat)
    return [(e.utc.strftime("%Y-%m-%dT%H:%M"), e.note) for e in entries]


CASES = [
    pytest.param(
        "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00", 2, DstGap.SKIP, DstRepeat.CRON,
        [("2026-03-30T00:30", f"02:30 does not exist {BERLIN_SPRING}; skipped (dst gap: skip)"),
         ("2026-03-31T00:30", None)],
        id="gap-skip-fixed",
    ),
    pytest.param(
        "0,30 2 * * *", "Europe/Berlin", "2026-03-28T12:00", 1, DstGap.SHIFT, DstRepeat.FIRST,
        [("2026-03-29T01:00", f"02:00 and 02:30 do not exist {BERLIN_SPRING}; fires once at "
          "03:00 CEST instead (dst gap: shift)")],
        id="gap-shift-fixed",
    ),
    pytest.param(
        "*/30 * * * *", "Europe/Berlin", "2026-03-29T00:10", 3, DstGap.SHIFT, DstRepeat.CRON,
        [("2026-03-29T00:30", None),
         ("2026-03-29T01:00", f"02:00 and 02:30 do not exist {BERLIN_SPRING}; fires once at "
          "03:00 CEST instead, together with the regular 03:00 run (dst gap: shift)"),
         ("2026-03-29T01:30", None)],
        id="gap-shift-elapsed-merges-with-regular-fire",
    ),
    pytest.param(
        "30 1 * * *", "America/New_York", "2026-10-31T12:00", 2, DstGap.CRON, DstRepeat.SECOND,
        [("2026-11-01T06:30", f"{NY_AUTUMN}; fires at the second (EDT->EST), as dst repeat: "
          "second"),
         ("2026-11-02T06:30", None)],
        id="repeat-second",
    ),
    pytest.param(
        "30 1 * * *", "America/New_York", "2026-10-31T12:00", 2, DstGap.CRON, DstRepeat.BOTH,
        [("2026-11-01T05:30", f"{NY_AUTUMN}; fires at both: this is the first (EDT), as dst "
          "repeat: both"),
         ("2026-11-01T06:30", f"{NY_AUTUMN}; fires at both: this is the second (EST), as dst "
          "repeat: both")],
        id="repeat-both",
    ),
    pytest.param(
        "*/30 1 * * *", "America/New_York", "2026-11-01T05:10", 3, DstGap.CRON, DstRepeat.FIRST,
        [("2026-11-01T05:30", f"{NY_AUTUMN}; fires once, at the first (EDT), as dst repeat: "
          "first"),
         ("2026-11-02T06:00", None),
         ("2026-11-02T06:30", None)],
        id="repeat-first-elapsed",
    ),
    pytest.param(
        "30 1 * * *", "America/New_York", "2026-10-31T12:00", 1, DstGap.SKIP, DstRepeat.CRON,
        [("2026-11-01T05:30", f"{NY_AUTUMN}; fires once, at the first (EDT)")],
        id="a-cron-choice-keeps-debian-words",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("expr", "tz", "after", "count", "gap", "repeat", "expected"), CASES)
def test_preview_notes_name_the_choice(
    expr: str,
    tz: str,
    after: str,
    count: int,
    gap: DstGap,
    repeat: DstRepeat,
    expected: list[tuple[str, str | None]],
) -> None:
    assert notes(expr, tz, after, count, gap, repeat) == expected


def test_default_choices_are_the_debian_preview() -> None:
    plain = preview_cron("30 2 * * *", "Europe/Berlin", z("2026-03-28T12:00"), 3)
    spelled = preview_cron(
        "30 2 * * *",
        "Europe/Berlin",
        z("2026-03-28T12:00"),
        3,
        gap=DstGap.CRON,
        repeat=DstRepeat.CRON,
    )
    assert plain == spelled
