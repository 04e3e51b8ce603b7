"""Percentiles and summaries of samples (nearest-rank, no interpolation)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def pct(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of an already sorted, non-empty sequence."""
    if not sorted_values:
        return math.nan
    rank = math.ceil(p / 100.0 * len(sorted_values))
    return sorted_values[min(max(rank, 1), len(sorted_values)) - 1]


def summary(values: Sequence[float], digits: int = 2) -> dict[str, float]:
    """n, min, p50, p90, p99, p99.9, max and mean of `values` (empty -> {"n": 0})."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    points = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99_9": 99.9}
    out = {"n": len(ordered), "min": round(ordered[0], digits)}
    out |= {name: round(pct(ordered, p), digits) for name, p in points.items()}
    out |= {"max": round(ordered[-1], digits), "mean": round(statistics.fmean(ordered), digits)}
    return out


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan
