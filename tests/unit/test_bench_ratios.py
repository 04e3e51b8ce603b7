"""The report's same-run ratios, carried from one report to the next (bench/ratios.py)."""

from __future__ import annotations

from typing import Any

from bench import ratios


def run(task_rate: float, bare: float, hooks: float | None = None) -> dict[str, Any]:
    ceiling = {"fires_per_s": bare}
    case: dict[str, Any] = {"queue": "table", "fires_per_s": task_rate, "missing": 0}
    webhook = {"queue": "nats", "fires_per_s": 3000.0, "missing": 0, "ceiling": ceiling}
    if hooks is not None:
        webhook["webhook_ceiling"] = {"fires_per_s": hooks}
    return {
        "e2e": {
            "task_burst": [case | {"ceiling": ceiling}],
            "burst": [webhook, {"queue": "table", "error": "boom"}],
            "sustained": [],
        },
        "claim": {"tickwork": {"pct_of_bare_b": 61.5}},
    }


def test_ratios_are_picked_per_case_and_failed_cases_are_left_out() -> None:
    found = ratios.same_run_ratios(run(10_000.0, 40_000.0, hooks=6_000.0))
    assert found == {
        "task burst, table queue: tickwork / bare SQL": 25.0,
        "webhook burst, NATS: tickwork / bare SQL": 7.5,
        "webhook burst, NATS: tickwork / bare SQL + HTTP": 50.0,
        "claim + advance, tickwork: / bare_b": 61.5,
    }


def test_a_report_compares_with_the_one_it_replaces_and_keeps_that_when_re_rendered() -> None:
    first = ratios.same_run_ratios(run(10_000.0, 40_000.0))
    old_text = "# Benchmarks\n" + ratios.embed("2026-12-01 10:00 UTC", first, None) + "\n"
    second = ratios.same_run_ratios(run(12_000.0, 40_000.0))
    previous = ratios.previous_of(old_text, "2026-12-05 10:00 UTC")
    table = "\n".join(ratios.comparison(second, previous))
    assert "| task burst, table queue: tickwork / bare SQL | 30.0 % | 25.0 % | +5.0 |" in table
    assert "2026-12-01 10:00 UTC" in table
    # The new report re-rendered from the same run still compares with the first one.
    new_text = ratios.embed("2026-12-05 10:00 UTC", second, previous)
    assert ratios.previous_of(new_text, "2026-12-05 10:00 UTC") == {
        "date": "2026-12-01 10:00 UTC",
        "ratios": first,
    }


def test_a_report_without_ratios_has_nothing_to_compare_with() -> None:
    assert ratios.previous_of("# Benchmarks\nno marker here\n", "2026-12-05") is None
    lines = ratios.comparison({"x": 1.0}, None)
    assert "| x | 1.0 % | - | - |" in lines
