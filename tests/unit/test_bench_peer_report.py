"""The peer suite's Markdown table: ratios against tickwork measured in the same run."""

from __future__ import annotations

from typing import Any

from bench.peers import report


def _burst(peer: str, fires: float, p99: float, jobs: int = 100) -> dict[str, Any]:
    return {"peer": peer, "scenario": "burst", "jobs": jobs, "fires_per_s": fires,
            "completion_s": jobs / fires, "drain_s": 1.0, "missing": 0, "duplicates": 0,
            "lateness_ms": {"p50": p99 / 2, "p99": p99, "max": p99},
            "cpu": {"foreign_cores": 0.1}}  # fmt: skip


def _data(cases: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "run_id": "abc123",
        "date": "2026-12-05 23:00 UTC",
        "quick": False,
        "command": "uv run python -m bench.peers",
        "config": {
            "scenarios": ["burst", "precision"],
            "precision_seconds": 60,
            "precision_warmup_s": 5.0,
        },
        "facts": {"cores": 2, "postgres": {"version": "15"}},
        "noise_at_start": {"foreign_cores": 0.05},
        "installs": {"peer_a": {"packages": ["a==1"], "status": "cached"}},
        "cases": cases,
    }


def test_burst_ratios_are_against_tickwork_at_the_same_n() -> None:
    cases = [
        _burst("tickwork", 2000.0, 50.0),
        _burst("bare_sql", 4000.0, 25.0),
        _burst("peer_a", 500.0, 200.0),
        _burst("tickwork", 3000.0, 40.0, jobs=1000),
    ]
    md = report.markdown(_data(cases))
    peer_row = next(line for line in md.splitlines() if line.startswith("| peer_a |"))
    assert "| 4.00x | 4.00x |" in peer_row  # tickwork 4x its fires/s; its p99 4x tickwork's
    assert "0.50x of its bare-SQL ceiling" in md
    assert "## Burst: 1,000 one-shots" in md


def test_failed_cases_are_rows_not_crashes() -> None:
    cases = [
        _burst("tickwork", 2000.0, 50.0),
        {"peer": "peer_a", "scenario": "burst", "jobs": 100, "error": "not installed: boom"},
        {"peer": "peer_a", "scenario": "precision", "variant": "spread", "error": "x"},
    ]
    md = report.markdown(_data(cases))
    assert "| peer_a | 100 | not installed: boom |" in md
    assert report.case_line(cases[1]).endswith("FAILED not installed: boom")


def test_precision_ratio_uses_tickwork_of_the_same_variant() -> None:
    def precision(peer: str, variant: str, p99: float) -> dict[str, Any]:
        return {"peer": peer, "scenario": "precision", "variant": variant, "jobs": 10,
                "seconds": 60, "missed": 0, "duplicates": 0,
                "lateness_ms": {"p50": 1.0, "p99": p99, "max": p99}}  # fmt: skip

    cases = [
        precision("tickwork", "spread", 2.0),
        precision("tickwork", "aligned", 10.0),
        precision("peer_a", "aligned", 50.0),
    ]
    md = report.markdown(_data(cases))
    peer_row = next(line for line in md.splitlines() if line.startswith("| peer_a |"))
    assert "| 5.00x |" in peer_row


def test_a_contender_not_ready_at_t_is_flagged() -> None:
    late = _burst("tickwork", 2000.0, 50.0) | {"ready_before_t_s": -1.5}
    md = report.markdown(_data([late, _burst("peer_a", 500.0, 200.0)]))
    assert "**tickwork was not ready at T** (its processes were up 1.5 s after T)" in md


def test_failover_rows_show_the_kill_and_what_it_cost() -> None:
    mine = {"peer": "tickwork", "scenario": "failover", "jobs": 10_000, "ran_before_kill": 3000,
            "next_fire_after_kill_s": 2.5, "last_fire_after_kill_s": 3.25, "missing": 0,
            "jobs_run_twice_or_more": 900, "duplicates": 900}  # fmt: skip
    lost = {"peer": "peer_a", "scenario": "failover", "jobs": 10_000, "ran_before_kill": 3001,
            "next_fire_after_kill_s": 0.5, "last_fire_after_kill_s": 60.0, "missing": 4000,
            "jobs_run_twice_or_more": 0, "duplicates": 0}  # fmt: skip
    data = _data([mine, lost, {"peer": "peer_b", "scenario": "failover", "error": "boom"}])
    data["config"]["scenarios"] = ["failover"]
    md = report.markdown(data)
    assert "| tickwork | 10,000 | 3,000 | 2.50 | 3.25 | 0 | 900 | 900 |" in md
    assert "| peer_a | 10,000 | 3,001 | 0.50 | 60.00 | 4000 | 0 | 0 |" in md
    assert "| peer_b | - | boom |" in md
    assert "next fire 2.5 s after the kill" in report.case_line(mine)
