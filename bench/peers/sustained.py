"""The sustained scenario: every-second jobs at rising rates, until lateness gives way.

At rate R a contender holds R jobs that each fire every second (the precision scenario's
workload, with its variant: phases spread over the second, or all at its top), measured over a
window of whole seconds after a warm-up. A step passes when the occurrences scheduled in the
window ran with p99 lateness under `PASS_P99_MS` and none is missing; the ramp stops at the
first step that fails (or errors). A contender's sustained rate is its highest passing step.

Steps are the same for every contender, so "tickwork's rate / this one's" compares the same
grid. Between two steps the true limit is unknown: the grid's coarseness is the error bar.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

PASS_P99_MS = 1000.0  # the bar: p99 lateness under 1 s
FULL_RATES = (100, 200, 500, 1000, 2000, 5000, 10_000, 20_000)
QUICK_RATES = (20, 50)

Step = Callable[[int], Awaitable[dict[str, Any]]]


def passed(case: dict[str, Any]) -> bool:
    """Whether one step held its rate: no error, nothing missed, p99 under the bar."""
    if "error" in case or case.get("missed") != 0:
        return False
    p99 = (case.get("lateness_ms") or {}).get("p99")
    return isinstance(p99, int | float) and p99 < PASS_P99_MS


async def ramp(rates: Sequence[int], step: Step, keep: Callable[[dict[str, Any]], None]) -> None:
    """Run `step(rate)` for each rate in order, handing each marked case to `keep`, and stop
    after the first that does not pass (a contender past its limit only gets slower)."""
    for rate in rates:
        case = await step(rate)
        case |= {"scenario": "sustained", "rate": rate, "passed": passed(case)}
        keep(case)
        if not case["passed"]:
            return


def highest(cases: list[dict[str, Any]], peer: str, variant: str | None) -> int | None:
    """The highest passing rate of `peer`'s ramp in `variant` (None: no step passed)."""
    rates = [c["rate"] for c in steps(cases, peer, variant) if c.get("passed")]
    return max(rates, default=None)


def first_failure(cases: list[dict[str, Any]], peer: str, variant: str | None) -> dict[str, Any]:
    """The step that ended `peer`'s ramp in `variant`, or {} if every step passed."""
    return next((c for c in steps(cases, peer, variant) if not c.get("passed")), {})


def contenders(cases: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    """(peer, variant) of every ramp, in the order they ran."""
    seen: dict[tuple[str, str | None], None] = {}
    for c in cases:
        if c["scenario"] == "sustained":
            seen.setdefault((c["peer"], c.get("variant")), None)
    return list(seen)


def steps(cases: list[dict[str, Any]], peer: str, variant: str | None) -> list[dict[str, Any]]:
    """The steps of `peer`'s ramp in `variant`, in the order they ran."""
    return [c for c in cases
            if c["scenario"] == "sustained" and c["peer"] == peer
            and c.get("variant") == variant]  # fmt: skip
