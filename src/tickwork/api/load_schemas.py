"""Response body of GET /v1/load: the planned fires per time bucket (docs/api.md "Load")."""

from __future__ import annotations

from pydantic import Field

from tickwork.api.schemas import InstantOut, _Output
from tickwork.clock import utc_iso
from tickwork.services.load import PlannedLoad
from tickwork.timing.load import BucketLoad, LoadForecast


class BucketOut(_Output):
    start: InstantOut = Field(description="the bucket is [start, start + bucket_s)")
    fires: int


class TenantLoadOut(_Output):
    total: int
    peak: int = Field(description="the most fires planned in one bucket")
    busiest: list[BucketOut]


class LoadOut(_Output):
    start: InstantOut = Field(alias="from", serialization_alias="from")
    end: InstantOut = Field(alias="to", serialization_alias="to")
    bucket_s: int
    total: int = Field(description="fires planned in [from, to)")
    peak: int = Field(description="the most fires planned in one bucket")
    jobs: int = Field(description="scheduled jobs looked at")
    truncated: bool = Field(
        description="true: the walk stopped at its bound (2,000,000 fires); the counts are a"
        " lower bound: narrow the window or the tenant"
    )
    buckets: list[BucketOut] = Field(description="every bucket with a fire, in time order")
    busiest: list[BucketOut] = Field(description="the busiest buckets, most fires first")
    tenants: dict[str, TenantLoadOut] = Field(description="per tenant with a fire in range")

    @classmethod
    def of(cls, load: PlannedLoad) -> LoadOut:
        overall = load.forecast.overall
        return cls.model_validate(
            {
                "from": utc_iso(overall.start),
                "to": utc_iso(overall.end),
                "bucket_s": overall.bucket_s,
                "total": overall.total,
                "peak": overall.peak,
                "jobs": load.jobs,
                "truncated": load.truncated,
                "buckets": _buckets(overall.buckets),
                "busiest": _buckets(overall.busiest),
                "tenants": {
                    name: _tenant(forecast) for name, forecast in load.forecast.tenants.items()
                },
            }
        )


def _buckets(loads: tuple[BucketLoad, ...]) -> list[BucketOut]:
    return [BucketOut(start=utc_iso(b.start), fires=b.fires) for b in loads]


def _tenant(forecast: LoadForecast) -> TenantLoadOut:
    return TenantLoadOut(
        total=forecast.total, peak=forecast.peak, busiest=_buckets(forecast.busiest)
    )
