"""The benchmark's quick (smoke) run fails on a case that broke, wherever it is reported."""

from __future__ import annotations

from bench.cli import errors_in


def test_errors_are_found_at_any_depth_and_only_there() -> None:
    sections = {
        "lateness": {"cases": [{"store": "sqlite", "p99": 3.0}, {"error": "OSError: boom"}]},
        "e2e": {"cases": [{"queue": "nats", "steps": [{"rate": 1000}, {"error": "Timeout"}]}]},
        "claim": {"ratio": 0.5},
    }
    assert errors_in(sections) == ["OSError: boom", "Timeout"]
    assert errors_in({"lateness": {"cases": [{"p99": 3.0}]}}) == []
