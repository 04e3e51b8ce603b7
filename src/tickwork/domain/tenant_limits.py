"""Pure: a tenant's limits (issue 21): how many jobs it may have, how fast its jobs may fire,
how many of its runs may run at once, how many API requests per second its keys may make, and
its share of capacity under overload (`weight`).

Every limit is optional: None means no limit (and for `weight`, the default share of 1). The
rules are here, with no I/O, so the API, the CLI's messages and the stores agree on them:
`check_limits` refuses a value naming `limits.<field>` and saying what to give instead, and
`merged` applies a partial update (a field set to None removes that limit).

All are enforced: `max_jobs` (when a job is created or moved to the tenant), `max_api_rps`
(per API process), `max_concurrent_runs` (across the cluster, by the lease statements:
domain/concurrency.py, ADR 0024), and `max_fires_per_s` and `weight` (by the schedulers'
claims: scheduler/fair_scan.py, ADR 0026).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

from tickwork.errors import InvalidInput, QuotaExceeded

__all__ = [
    "BOUNDS",
    "DEFAULT_WEIGHT",
    "LIMIT_FIELDS",
    "NO_LIMITS",
    "LimitBounds",
    "TenantLimits",
    "check_job_quota",
    "check_limits",
    "limits_from_json",
    "limits_to_json",
    "merged",
]

DEFAULT_WEIGHT: Final = 1
INVALID_LIMIT: Final = "invalid_limit"


@dataclass(frozen=True, slots=True)
class LimitBounds:
    """What one limit accepts: whole numbers or not, and the largest value (the smallest is
    1 for whole numbers, anything above 0 otherwise)."""

    whole: bool
    maximum: float
    unit: str  # how the fix names a value: "jobs", "fires per second", ...


# The maxima are far above what one cluster serves; they exist to catch a typo (an extra few
# zeros) and keep the numbers inside every store's column types.
BOUNDS: Final[Mapping[str, LimitBounds]] = {
    "max_jobs": LimitBounds(whole=True, maximum=100_000_000, unit="jobs"),
    "max_fires_per_s": LimitBounds(whole=False, maximum=1_000_000, unit="fires per second"),
    "max_concurrent_runs": LimitBounds(whole=True, maximum=1_000_000, unit="runs at once"),
    "max_api_rps": LimitBounds(whole=False, maximum=100_000, unit="requests per second"),
    "weight": LimitBounds(whole=True, maximum=1_000, unit="shares"),
}


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantLimits:
    """A tenant's limits; None: no limit (`weight` None: the default share, 1)."""

    max_jobs: int | None = None
    max_fires_per_s: float | None = None
    max_concurrent_runs: int | None = None
    max_api_rps: float | None = None
    weight: int | None = None

    @property
    def empty(self) -> bool:
        return self == TenantLimits()

    @property
    def share(self) -> int:
        """The tenant's weight in the fair share of a claim batch (scheduler/fair_scan.py)."""
        return DEFAULT_WEIGHT if self.weight is None else self.weight


LIMIT_FIELDS: Final = tuple(f.name for f in fields(TenantLimits))
NO_LIMITS: Final = TenantLimits()


def check_limits(limits: TenantLimits) -> TenantLimits:
    """`limits` if every value is in range; InvalidInput naming `limits.<field>` otherwise."""
    for name in LIMIT_FIELDS:
        check_limit(name, getattr(limits, name))
    return limits


def check_limit(name: str, value: object) -> None:
    """One limit's value: None, or a number within its bounds (a whole one where it must be)."""
    if value is None:
        return
    bounds = BOUNDS[name]
    where = f"limits.{name}"
    fix = _fix(name, bounds)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(where, f"give a number: {fix}", code=INVALID_LIMIT)
    if not math.isfinite(value):
        raise InvalidInput(where, f"give a finite number: {fix}", code=INVALID_LIMIT)
    if bounds.whole and value != int(value):
        raise InvalidInput(where, f"give a whole number: {fix}", code=INVALID_LIMIT)
    if value <= 0:
        raise InvalidInput(where, f"{_shown(value)} is not a limit: {fix}", code=INVALID_LIMIT)
    if value > bounds.maximum:
        raise InvalidInput(
            where, f"{_shown(value)} is above the maximum: {fix}", code=INVALID_LIMIT
        )


def _fix(name: str, bounds: LimitBounds) -> str:
    low = "1" if bounds.whole else "a number above 0"
    remove = "null: the default, 1" if name == "weight" else "null removes the limit"
    return f"give {low} to {_shown(bounds.maximum)} {bounds.unit} ({remove})"


def _shown(value: float) -> str:
    """A number as people read it: 100,000,000 rather than 1e+08."""
    return f"{value:,.0f}" if value == int(value) and abs(value) < 1e15 else f"{value:,g}"


def merged(current: TenantLimits, changes: Mapping[str, int | float | None]) -> TenantLimits:
    """`current` with the given fields replaced (None removes that limit), checked."""
    unknown = sorted(set(changes) - set(LIMIT_FIELDS))
    if unknown:
        raise InvalidInput(
            f"limits.{unknown[0]}",
            f"unknown limit; the limits are: {', '.join(LIMIT_FIELDS)}",
            code="unknown_field",
        )
    return check_limits(replace(current, **_typed(changes)))


def _typed(values: Mapping[str, Any]) -> dict[str, Any]:
    """Whole-number limits as int (JSON may give 5.0), after the checks have run on them."""
    for name, value in values.items():
        check_limit(name, value)
    return {
        name: int(value) if value is not None and BOUNDS[name].whole else value
        for name, value in values.items()
    }


def check_job_quota(tenant: str, limits: TenantLimits, jobs: int) -> None:
    """Raise QuotaExceeded if a tenant with `jobs` jobs may not have one more. Every job
    counts, whatever its state: a completed one-shot still occupies the store until deleted."""
    if limits.max_jobs is not None and jobs >= limits.max_jobs:
        raise QuotaExceeded(tenant, limit=limits.max_jobs, count=jobs)


def limits_to_json(limits: TenantLimits) -> dict[str, int | float]:
    """The limits that are set, by name (what the stores keep; an empty dict: none)."""
    return {name: value for name in LIMIT_FIELDS if (value := getattr(limits, name)) is not None}


def limits_from_json(data: Mapping[str, Any]) -> TenantLimits:
    """Stored limits back; a name this version does not know is ignored (a newer version may
    have written it), so a rollback does not make a tenant unreadable."""
    known = {name: value for name, value in data.items() if name in BOUNDS}
    return TenantLimits(**_typed(known))
