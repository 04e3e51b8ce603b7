"""herd_probe_in_s: when the scheduler's loop looks for a herd ahead (ADR 0036)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickwork.scheduler.planning import herd_probe_in_s

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("until_due_ms", "expected_s"),
    [
        (5000, 4.0),  # wake a lead (1 s) before the instant
        (1000, 0.0),  # exactly a lead away: look now
        (300, 0.0),  # inside the lead: look now
        (-20, 0.0),  # already due: look now (the loop still looks once per instant)
    ],
)
def test_the_look_comes_a_herd_lead_before_the_next_instant(
    until_due_ms: int, expected_s: float
) -> None:
    found = herd_probe_in_s(T + until_due_ms * MS, T, herd_lead_ms=1000, reach_ms=200)
    assert found == pytest.approx(expected_s)


@pytest.mark.parametrize(("lead_ms", "reach_ms"), [(0, 200), (200, 200), (300, 450)])
def test_no_look_when_the_lead_is_within_the_reach(lead_ms: int, reach_ms: int) -> None:
    assert herd_probe_in_s(T + 5000 * MS, T, herd_lead_ms=lead_ms, reach_ms=reach_ms) is None


def test_no_look_when_nothing_is_due() -> None:
    assert herd_probe_in_s(None, T, herd_lead_ms=1000, reach_ms=200) is None
