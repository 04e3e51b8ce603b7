"""Figures from a body log: the same arithmetic for every peer and for tickwork.

A body log holds one line per execution, `<key> <scheduled epoch us> <ran epoch us>` (see
harnesses/_record.py). An occurrence is a (key, scheduled) pair: a one-shot has one, an
every-second job one per second. Lateness = ran - scheduled.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import pct, summary


@dataclass(frozen=True)
class Execution:
    key: str
    scheduled_us: int
    ran_us: int

    @property
    def lateness_ms(self) -> float:
        return (self.ran_us - self.scheduled_us) / 1000


def parse_lines(lines: Iterable[str]) -> list[Execution]:
    """Executions of well-formed lines; a torn last line (a killed writer) is skipped."""
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            found.append(Execution(parts[0], int(parts[1]), int(parts[2])))
        except ValueError:
            continue
    return found


def read_body_log(path: Path) -> list[Execution]:
    if not path.exists():
        return []
    return parse_lines(path.read_text(encoding="utf-8", errors="replace").splitlines())


def duplicates(executions: list[Execution]) -> int:
    """Executions beyond the first of their occurrence (a fire run twice)."""
    counts = Counter((e.key, e.scheduled_us) for e in executions)
    return sum(n - 1 for n in counts.values())


def fires_over_time(executions: list[Execution], origin_s: float, bin_s: float) -> list[int]:
    """Executions per `bin_s` bin from `origin_s` (for the fires-over-time plot)."""
    if not executions:
        return []
    bins: Counter[int] = Counter(int((e.ran_us / 1e6 - origin_s) // bin_s) for e in executions)
    last = max(bins)
    return [bins.get(i, 0) for i in range(min(0, min(bins)), last + 1)]


def percentiles(values: list[float]) -> list[float]:
    """p0, p1, ..., p100 (nearest rank) of `values`: the distribution, for plots."""
    if not values:
        return []
    ordered = sorted(values)
    return [round(pct(ordered, p), 2) if p else round(ordered[0], 2) for p in range(101)]


def burst(executions: list[Execution], t_s: float, jobs: int) -> dict[str, Any]:
    """N one-shots due at T: fires/s = distinct fired / (last ran - T), drain time (first ran to
    last ran), lateness, missing (never ran), duplicates (ran more than once)."""
    distinct = {e.key for e in executions}
    firsts: dict[str, Execution] = {}
    for e in sorted(executions, key=lambda e: e.ran_us):
        firsts.setdefault(e.key, e)
    ran_s = [e.ran_us / 1e6 for e in firsts.values()]
    last = max(ran_s, default=math.nan)
    completion = last - t_s
    return {
        "jobs": jobs,
        "executions": len(executions),
        "distinct": len(distinct),
        "missing": jobs - len(distinct),
        "duplicates": duplicates(executions),
        "completion_s": round(completion, 3),
        "fires_per_s": round(len(distinct) / completion, 1) if completion > 0 else math.nan,
        "first_ran_ms": round((min(ran_s, default=math.nan) - t_s) * 1000, 1),
        "drain_s": round(last - min(ran_s), 3) if ran_s else math.nan,
        "lateness_ms": summary([e.lateness_ms for e in firsts.values()]),
        "lateness_percentiles_ms": percentiles([e.lateness_ms for e in firsts.values()]),
        "early": sum(e.ran_us < e.scheduled_us for e in executions),
    }


def failover(
    executions: list[Execution],
    t_s: float,
    jobs: int,
    killed_at_s: float,
    restarted_at_s: float | None,
) -> dict[str, Any]:
    """The burst's figures for a burst whose scheduler was killed (`kill -9`) at `killed_at_s`
    and started again at `restarted_at_s`, and what the kill did: the bodies run before it, the
    time from the kill to the next body (to the next fire), the jobs that never ran, and those
    that ran more than once (a body run again after the kill)."""
    killed_us = round(killed_at_s * 1e6)
    after = sorted(e.ran_us for e in executions if e.ran_us > killed_us)
    counts = Counter(e.key for e in executions)
    return burst(executions, t_s, jobs) | {
        "killed_after_t_s": round(killed_at_s - t_s, 3),
        "ran_before_kill": sum(e.ran_us <= killed_us for e in executions),
        "restart_delay_s": None
        if restarted_at_s is None
        else round(restarted_at_s - killed_at_s, 3),
        "next_fire_after_kill_s": round((after[0] - killed_us) / 1e6, 3) if after else None,
        "last_fire_after_kill_s": round((after[-1] - killed_us) / 1e6, 3) if after else None,
        "jobs_run_twice_or_more": sum(n > 1 for n in counts.values()),
    }


def precision(
    executions: list[Execution], window_start_s: float, window_end_s: float, jobs: int
) -> dict[str, Any]:
    """`jobs` every-second jobs, the occurrences scheduled in [start, end): lateness, missed
    occurrences (expected jobs x seconds, minus the distinct ones that ran), duplicates."""
    start_us, end_us = round(window_start_s * 1e6), round(window_end_s * 1e6)
    inside = [e for e in executions if start_us <= e.scheduled_us < end_us]
    expected = jobs * round(window_end_s - window_start_s)
    occurrences = {(e.key, e.scheduled_us) for e in inside}
    return {
        "jobs": jobs,
        "seconds": round(window_end_s - window_start_s),
        "expected": expected,
        "executions": len(inside),
        "missed": max(0, expected - len(occurrences)),
        "duplicates": duplicates(inside),
        "early": sum(e.ran_us < e.scheduled_us for e in inside),
        "lateness_ms": summary([e.lateness_ms for e in inside]),
    }


def ratio(numerator: Any, denominator: Any) -> float | None:
    """numerator / denominator, or None when either is missing, zero or not a number."""
    if not isinstance(numerator, int | float) or not isinstance(denominator, int | float):
        return None
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return None
    return round(numerator / denominator, 2)
