"""The schemas of a tenant's limits and usage in the API (`limits`, `usage` on /v1/tenants).

The bounds are the domain's (domain/tenant_limits.py), which refuses a value out of them with
its own message naming `limits.<field>` and the fix: the schema only shows them (`documented`),
so a client reads the same ranges the API enforces.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from tickwork.api.schemas import documented
from tickwork.domain.tenant_limits import BOUNDS, TenantLimits, check_limits

__all__ = ["LimitsIn", "LimitsOut", "UsageOut"]


def _whole(value: Any) -> Any:
    # As in api/schemas.py: JSON Schema's integer includes 5.0, taken as 5; strict ints refuse
    # the rest (true, "5", 5.5).
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _whole_bounds(name: str) -> dict[str, Any]:
    return documented(minimum=1, maximum=int(BOUNDS[name].maximum))


def _rate_bounds(name: str) -> dict[str, Any]:
    return documented(exclusiveMinimum=0, maximum=BOUNDS[name].maximum)


MaxJobs = Annotated[
    int | None,
    Field(strict=True, **_whole_bounds("max_jobs")),
    BeforeValidator(_whole),
    Field(
        description="the most jobs the tenant may have, in every state (completed and paused"
        " ones count): creating one more answers 409 quota_exceeded"
    ),
]
MaxFiresPerS = Annotated[
    float | None,
    Field(
        strict=True,
        allow_inf_nan=False,
        description="fires per second of the tenant's jobs: over it, the schedulers pace its"
        " fires (recorded as throttled); other tenants are not held back",
        **_rate_bounds("max_fires_per_s"),
    ),
]
MaxConcurrentRuns = Annotated[
    int | None,
    Field(strict=True, **_whole_bounds("max_concurrent_runs")),
    BeforeValidator(_whole),
    Field(
        description="the most of the tenant's runs running at once across the cluster: over it,"
        " its runs wait pending in the queue and start as slots free"
    ),
]
MaxApiRps = Annotated[
    float | None,
    Field(
        strict=True,
        allow_inf_nan=False,
        description="API requests per second by the tenant's keys, per API process (with N API"
        " processes, up to N times this in all): over it, 429 rate_limited with Retry-After",
        **_rate_bounds("max_api_rps"),
    ),
]
Weight = Annotated[
    int | None,
    Field(strict=True, **_whole_bounds("weight")),
    BeforeValidator(_whole),
    Field(
        description="the tenant's share of capacity under overload (null: the default, 1): a"
        " scheduler that is behind shares each claim batch by it"
    ),
]


class LimitsIn(BaseModel):
    """A tenant's limits; each is optional, and null (or left out) means no limit."""

    model_config = ConfigDict(extra="forbid")

    max_jobs: MaxJobs = None
    max_fires_per_s: MaxFiresPerS = None
    max_concurrent_runs: MaxConcurrentRuns = None
    max_api_rps: MaxApiRps = None
    weight: Weight = None

    def changes(self) -> dict[str, int | float | None]:
        """The limits given in the body, null ones included (for a merge)."""
        return {name: getattr(self, name) for name in self.model_fields_set}

    def to_domain(self) -> TenantLimits:
        return check_limits(TenantLimits(**self.model_dump()))


class LimitsOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_jobs: int | None
    max_fires_per_s: float | None
    max_concurrent_runs: int | None
    max_api_rps: float | None
    weight: int | None = Field(description="null: the default share, 1")

    @classmethod
    def of(cls, limits: TenantLimits) -> LimitsOut:
        return cls(
            max_jobs=limits.max_jobs,
            max_fires_per_s=limits.max_fires_per_s,
            max_concurrent_runs=limits.max_concurrent_runs,
            max_api_rps=limits.max_api_rps,
            weight=limits.weight,
        )


class UsageOut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    jobs: int = Field(description="the tenant's jobs, in every state (what max_jobs counts)")
