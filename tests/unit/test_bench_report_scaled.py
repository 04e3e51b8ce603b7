"""The report's scaled end-to-end targets (ADR 0011): the issue's figure times the same run's
bare-SQL burst over the burst the figure was set against."""

from __future__ import annotations

from typing import Any

import pytest
from bench import report


def _ceiling(fires_per_s: float) -> dict[str, Any]:
    return {"fires_per_s": fires_per_s, "cpu": {"foreign_cores": 0.01}}


def test_scaled_target_moves_with_the_ceiling() -> None:
    assert report.scaled(10_000, report.ANCHOR_RAW_BURST) == pytest.approx(10_000)
    assert report.scaled(5_000, report.ANCHOR_RAW_BURST / 2) == pytest.approx(2_500)


@pytest.mark.parametrize(
    ("fires", "missing", "met"),
    [(6_000.0, 0, "yes"), (4_000.0, 0, "**no**"), (6_000.0, 1, "**no**")],
)
def test_a_burst_meets_the_scaled_target_only_when_fast_enough_and_complete(
    fires: float, missing: int, met: str
) -> None:
    # 10,000 x 15,000 / 29,947 = 5,009 fires/s needed
    case = {"queue": "table", "fires_per_s": fires, "missing": missing, "ceiling": _ceiling(15_000)}
    row = report._scaled_target(case, "burst", report.E2E_TASK_TARGET, "task")
    assert row[-1] == met
    assert "5,009" in row[1]


def test_a_ramp_is_judged_by_its_best_passing_rate() -> None:
    ramp = {"queue": "nats", "best_rate": 3_000, "ceiling": _ceiling(15_000)}  # needs 2,504
    assert report._scaled_target(ramp, "sustained", 5_000, "webhooks")[-1] == "yes"
    ramp["best_rate"] = 2_500
    assert report._scaled_target(ramp, "sustained", 5_000, "webhooks")[-1] == "**no**"


def test_without_a_ceiling_the_scaled_target_is_not_met() -> None:
    case = {"queue": "table", "fires_per_s": 50_000.0, "missing": 0}
    assert report._scaled_target(case, "burst", 10_000, "task")[-1] == "**no**"
    case["ceiling"] = {"error": "RuntimeError: raw-worker did not start"}
    row = report._scaled_target(case, "burst", 10_000, "task")
    assert row[-1] == "**no**"
    assert "did not start" in row[1]
