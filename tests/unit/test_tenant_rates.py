"""A tenant's API request rate (services/tenant_rates.py) on a real MemoryStore that counts
its reads and a ManualClock: the bucket of `limits.max_api_rps`, one store read per TTL (shared
by the requests that need it at once), a change through this process seen at once."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.tenant_limits import TenantLimits
from tickwork.domain.tenants import Tenant
from tickwork.errors import RateLimited
from tickwork.services.tenant_rates import TenantRates, tenant_limit
from tickwork.services.tenants import TenantService
from tickwork.store.memory import MemoryStore

from ..contract.store_helpers import T0


class CountingStore(MemoryStore):
    """A MemoryStore that counts `get_tenant` and can hold it."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.reached = asyncio.Event()  # a read has reached the store

    async def get_tenant(self, tenant: str) -> Tenant | None:
        self.reads += 1
        self.reached.set()
        await self.gate.wait()
        return await super().get_tenant(tenant)


async def setup(rate: float | None) -> tuple[CountingStore, ManualClock, TenantRates]:
    store = CountingStore()
    await store.open()
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_api_rps=rate))
    clock = ManualClock(T0)
    return store, clock, TenantRates(store, clock, ttl_s=1.5)


async def admitted(rates: TenantRates, tenant: str, n: int) -> int:
    ok = 0
    for _ in range(n):
        try:
            await rates.admit(tenant)
        except RateLimited:
            continue
        ok += 1
    return ok


def test_the_bucket_holds_one_seconds_worth_and_at_least_one() -> None:
    assert tenant_limit(20.0).burst == 20
    assert tenant_limit(2.5).burst == 3
    assert tenant_limit(0.5).burst == 1


async def test_a_tenant_over_its_rate_is_refused_with_the_wait_and_the_field() -> None:
    _store, clock, rates = await setup(2.0)
    assert await admitted(rates, "acme", 2) == 2
    with pytest.raises(RateLimited) as refused:
        await rates.admit("acme")
    assert refused.value.field == "limits.max_api_rps"
    assert refused.value.retry_after_s == pytest.approx(0.5)
    assert "max_api_rps is 2 requests per second per API process" in str(refused.value)
    clock.advance(timedelta(seconds=0.5))
    assert await admitted(rates, "acme", 2) == 1


async def test_no_limit_and_no_tenant_admit_everything() -> None:
    _store, _clock, rates = await setup(None)
    assert await admitted(rates, "acme", 1000) == 1000
    assert await admitted(rates, "gone", 10) == 10  # a tenant that does not exist


async def test_limits_are_read_once_per_ttl() -> None:
    store, clock, rates = await setup(None)
    await admitted(rates, "acme", 100)
    assert store.reads == 1
    clock.advance(timedelta(seconds=1.4))
    await admitted(rates, "acme", 10)
    assert store.reads == 1
    clock.advance(timedelta(seconds=0.1))
    await admitted(rates, "acme", 10)
    assert store.reads == 2


async def test_requests_at_once_share_one_read() -> None:
    store, _clock, rates = await setup(None)
    store.gate.clear()
    waiting = [asyncio.create_task(rates.admit("acme")) for _ in range(50)]
    await store.reached.wait()
    store.gate.set()
    await asyncio.gather(*waiting)
    assert store.reads == 1


async def test_a_change_through_this_process_applies_at_once() -> None:
    store, clock, rates = await setup(None)
    tenants = TenantService(store, clock, on_limits_changed=rates.forget)
    assert await admitted(rates, "acme", 10) == 10
    await tenants.set_limits("acme", {"max_api_rps": 1.0})
    assert await admitted(rates, "acme", 10) == 1  # no TTL to wait for
    await tenants.set_limits("acme", {"max_api_rps": None})
    assert await admitted(rates, "acme", 10) == 10


async def test_a_change_through_another_process_applies_within_the_ttl() -> None:
    store, clock, rates = await setup(None)
    assert await admitted(rates, "acme", 5) == 5
    await store.set_tenant_limits("acme", TenantLimits(max_api_rps=1.0), now=T0)
    assert await admitted(rates, "acme", 5) == 5  # still cached
    clock.advance(timedelta(seconds=1.5))
    assert await admitted(rates, "acme", 5) == 1
