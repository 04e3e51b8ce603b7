"""A tenant's API request rate (`limits.max_api_rps`), checked on every request of its keys.

One token bucket per tenant (timing/rate_limit.py, as for the per-key limit), refilled at
`max_api_rps` and holding one second's worth of requests (at least 1). The buckets live in this
API process: with N API processes a tenant gets up to N times its limit in all (a cluster-wide
bucket is later work). Admin keys belong to no tenant and are not limited here.

The limits are read through a short cache, never once per request: a tenant's limits are read
from the store at most once per `ttl_s`, requests that need the same read wait for it together,
and a change made through this process (`forget`) is seen at once. A change made through
another API process is seen here within `ttl_s`.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Final, Protocol

from tickwork.clock import Clock
from tickwork.domain.tenants import Tenant
from tickwork.errors import RateLimited
from tickwork.timing.rate_limit import Buckets, Limit

__all__ = ["DEFAULT_TTL_S", "TenantRates", "tenant_limit"]

DEFAULT_TTL_S: Final = 1.5
FIELD: Final = "limits.max_api_rps"
TENANTS_KEPT: Final = 10_000  # cached tenants before the cache starts afresh


class TenantReads(Protocol):
    async def get_tenant(self, tenant: str) -> Tenant | None: ...


@dataclass(slots=True)
class _Cached:
    rate: float | None  # the tenant's max_api_rps; None: no limit
    read_at_s: float


def tenant_limit(rate: float) -> Limit:
    """The bucket for a tenant limited to `rate` requests per second: bursts of one second's
    worth, so a tenant at 0.5/s still gets its one request, and one at 20/s can send 20 at once."""
    return Limit(rate=rate, burst=max(1, math.ceil(rate)))


class TenantRates:
    """Admits or refuses a request of a tenant's key by that tenant's `max_api_rps`."""

    def __init__(self, store: TenantReads, clock: Clock, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self._store = store
        self._clock = clock
        self._ttl_s = ttl_s
        self._cache: dict[str, _Cached] = {}
        self._buckets: dict[str, Buckets] = {}  # by tenant, each with that tenant's limit
        self._reads: dict[str, asyncio.Future[float | None]] = {}  # reads in flight

    async def admit(self, tenant: str) -> None:
        """Take one request from the tenant's bucket; RateLimited (429, naming
        `limits.max_api_rps`, with the wait) if it is empty."""
        rate = await self._rate(tenant)
        if rate is None:
            self._buckets.pop(tenant, None)
            return
        buckets = self._buckets.get(tenant)
        if buckets is None or buckets.limit.rate != rate:
            buckets = self._buckets[tenant] = Buckets(tenant_limit(rate))
        wait_s = buckets.take(tenant, self._clock.monotonic_s())
        if wait_s > 0:
            raise RateLimited(
                f"too many requests for tenant {tenant!r}: its limits.max_api_rps is {rate:g} "
                f"requests per second per API process (bursts of {buckets.limit.burst}); retry "
                "after the Retry-After seconds, or have an admin raise the limit "
                f"(PATCH /v1/tenants/{tenant})",
                retry_after_s=wait_s,
                field=FIELD,
            )

    def forget(self, tenant: str) -> None:
        """The tenant's limits changed (or it was deleted): read them again on its next
        request. Its bucket is kept while the rate is the same, so a change of another limit
        does not hand the tenant a fresh burst."""
        self._cache.pop(tenant, None)

    async def _rate(self, tenant: str) -> float | None:
        now_s = self._clock.monotonic_s()
        cached = self._cache.get(tenant)
        if cached is not None and now_s - cached.read_at_s < self._ttl_s:
            return cached.rate
        rate = await self._read_once(tenant)
        if len(self._cache) >= TENANTS_KEPT:
            self._cache.clear()
        self._cache[tenant] = _Cached(rate=rate, read_at_s=now_s)
        return rate

    async def _read_once(self, tenant: str) -> float | None:
        """One store read per tenant at a time: requests arriving while it runs share it."""
        pending = self._reads.get(tenant)
        if pending is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this request was cancelled
                return await self._read(tenant)  # the reading request was, not this one
        future: asyncio.Future[float | None] = asyncio.get_running_loop().create_future()
        self._reads[tenant] = future
        try:
            rate = await self._read(tenant)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            future.set_result(rate)
            return rate
        finally:
            del self._reads[tenant]

    async def _read(self, tenant: str) -> float | None:
        found = await self._store.get_tenant(tenant)
        return None if found is None else found.limits.max_api_rps
