"""The peer suite's sustained ramp: which steps pass, where a ramp stops, how it is reported."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bench.peers import cli, report, sustained


def _step(p99: float, missed: int = 0) -> dict[str, Any]:
    return {"missed": missed, "duplicates": 0, "lateness_ms": {"p50": p99 / 4, "p99": p99,
            "max": p99 * 1.2}, "cpu": {"foreign_cores": 0.05}}  # fmt: skip


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (_step(999.9), True),
        (_step(1000.0), False),  # the bar is strict: p99 under 1 s
        (_step(10.0, missed=1), False),  # on time but an occurrence never ran
        ({"error": "harness died", "missed": 0, "lateness_ms": {"p99": 1.0}}, False),
        ({"missed": 0, "lateness_ms": {}}, False),  # nothing measured is no pass
    ],
)
def test_a_step_passes_only_on_time_and_complete(case: dict[str, Any], expected: bool) -> None:
    assert sustained.passed(case) is expected


def test_the_ramp_stops_at_its_first_failure() -> None:
    latencies = {100: 20.0, 200: 400.0, 500: 2500.0, 1000: 10.0}
    asked: list[int] = []
    kept: list[dict[str, Any]] = []

    async def step(rate: int) -> dict[str, Any]:
        asked.append(rate)
        return {"peer": "peer_a", "variant": "spread"} | _step(latencies[rate])

    asyncio.run(sustained.ramp((100, 200, 500, 1000), step, kept.append))
    assert asked == [100, 200, 500]  # 1,000 would pass but is never tried
    assert [(c["rate"], c["passed"], c["scenario"]) for c in kept] == [
        (100, True, "sustained"), (200, True, "sustained"), (500, False, "sustained")]  # fmt: skip
    assert sustained.highest(kept, "peer_a", "spread") == 200
    assert sustained.first_failure(kept, "peer_a", "spread")["rate"] == 500
    assert sustained.highest(kept, "peer_a", "aligned") is None


def _ramp(peer: str, variant: str, results: list[tuple[int, float]]) -> list[dict[str, Any]]:
    return [{"peer": peer, "scenario": "sustained", "variant": variant, "rate": rate,
             "passed": sustained.passed(_step(p99))} | _step(p99)
            for rate, p99 in results]  # fmt: skip


def test_report_compares_rates_within_a_variant() -> None:
    cases = (_ramp("tickwork", "spread", [(100, 5.0), (1000, 8.0), (5000, 1500.0)])
             + _ramp("tickwork", "aligned", [(100, 30.0), (1000, 2000.0)])
             + _ramp("peer_a", "spread", [(100, 50.0), (1000, 1200.0)])
             + _ramp("peer_b", "aligned", [(100, 3000.0)]))  # fmt: skip
    rows = report.sustained_rows(cases)
    row = {r.split(" | ")[0][2:] + "/" + r.split(" | ")[1]: r for r in rows[2:]}
    assert "| 1,000 | 5,000/s | 1,500.0 / 0 | 1 |" in row["tickwork/spread"]
    assert "| 100 | 1,000/s | 1,200.0 / 0 | 10.00x |" in row["peer_a/spread"]  # 1,000 / 100
    assert "| none | 100/s | 3,000.0 / 0 | - |" in row["peer_b/aligned"]  # nothing to divide
    steps = report.sustained_steps(cases)
    assert len(steps) == 2 + len(cases)
    assert report.case_line(cases[2]).endswith("FAILED, noise 0.05")


def test_a_ramp_that_never_failed_says_so() -> None:
    rows = report.sustained_rows(_ramp("tickwork", "spread", [(100, 5.0), (200, 6.0)]))
    assert "| 200 | the grid's top (all passed) | - |" in rows[2]


def test_rates_must_be_positive_and_rising() -> None:
    assert cli.parse(["--sustained-rates", "50,100,400"]).sustained_rates == (50, 100, 400)
    assert cli.parse([]).sustained_rates == sustained.FULL_RATES
    assert cli.parse(["--quick"]).sustained_seconds == 5
    for bad in ("100,50", "0,10", "ten", ""):
        with pytest.raises(SystemExit):
            cli.parse(["--sustained-rates", bad])


def test_the_report_has_a_sustained_section_with_the_grid() -> None:
    data = {
        "run_id": "abc123", "date": "2026-12-06 23:00 UTC", "quick": False,
        "command": "uv run python -m bench.peers --scenario sustained",
        "config": {"scenarios": ["sustained"], "sustained_seconds": 60,
                   "sustained_pass_p99_ms": 1000.0, "sustained_rates": [100, 1000, 5000]},
        "facts": {"cores": 2, "postgres": {"version": "15"}},
        "noise_at_start": {"foreign_cores": 0.05}, "installs": {},
        "cases": _ramp("tickwork", "spread", [(100, 5.0), (1000, 8.0), (5000, 1500.0)]),
    }  # fmt: skip
    md = report.markdown(data)
    assert "## Sustained: every-second jobs at rising rates, 60 s measured per step" in md
    assert "p99 < 1,000 ms and nothing missed" in md
    assert "Rates tried, in order, each ramp stopping at its first failure: 100, 1,000, 5,000" in md
    assert "## Burst" not in md  # only the scenarios that ran
