"""The worker's cache of tenants' destination lists (worker/tenant_lists.py), on a real
MemoryStore that counts its reads: no read per fire when no tenant has lists, one shared read
for fires that need the same answer at once, a fresh read once the TTL is up."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tickwork.clock import ManualClock
from tickwork.domain.egress import parse_rules
from tickwork.domain.jobs import Job
from tickwork.domain.tenants import Tenant
from tickwork.store.memory import MemoryStore
from tickwork.worker.tenant_lists import TenantLists

from ..contract.store_helpers import T0, make_job

URL = "https://hooks.example.com/x"


class CountingStore(MemoryStore):
    """A MemoryStore that counts the two reads the cache makes, and can hold them."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = {"list_tenants": 0, "get_job": 0}
        self.gate = asyncio.Event()
        self.gate.set()

    async def list_tenants(self) -> list[Tenant]:
        self.reads["list_tenants"] += 1
        await self.gate.wait()
        return await super().list_tenants()

    async def get_job(self, job_id: str) -> Job:
        self.reads["get_job"] += 1
        await self.gate.wait()
        return await super().get_job(job_id)


async def store_with_job(tenant: str = "acme") -> tuple[CountingStore, Job]:
    store = CountingStore()
    await store.open()
    await store.create_tenant(tenant, now=T0)
    job = await store.create_job(make_job(1, tenant=tenant))
    return store, job


async def test_no_lists_anywhere_means_no_job_reads_and_one_tenant_read_per_ttl() -> None:
    store, job = await store_with_job()
    clock = ManualClock(T0)
    lists = TenantLists(store, clock, ttl_s=1.5)
    for _ in range(100):
        assert await lists.refusal(job.id, URL) is None
    assert store.reads == {"list_tenants": 1, "get_job": 0}
    clock.advance(timedelta(seconds=1.5))
    assert await lists.refusal(job.id, URL) is None
    assert store.reads == {"list_tenants": 2, "get_job": 0}


async def test_fires_at_once_share_one_read_of_each() -> None:
    store, job = await store_with_job()
    await store.set_tenant_egress("acme", parse_rules(["api.partner.io"], []), now=T0)
    lists = TenantLists(store, ManualClock(T0), ttl_s=1.5)
    store.gate.clear()  # hold the reads until every fire is waiting on them
    fires = [asyncio.create_task(lists.refusal(job.id, URL)) for _ in range(20)]
    await asyncio.sleep(0)  # let every fire reach the read (a yield, not a wait for time)
    store.gate.set()
    reasons = await asyncio.gather(*fires)
    assert store.reads == {"list_tenants": 1, "get_job": 1}
    assert set(reasons) == {
        "host 'hooks.example.com' is not on the allow list (api.partner.io) of tenant 'acme'"
    }


async def test_a_cancelled_reader_does_not_fail_the_fires_waiting_for_it() -> None:
    store, job = await store_with_job()
    await store.set_tenant_egress("acme", parse_rules([], ["hooks.example.com"]), now=T0)
    lists = TenantLists(store, ManualClock(T0), ttl_s=1.5)
    store.gate.clear()
    first = asyncio.create_task(lists.refusal(job.id, URL))
    await asyncio.sleep(0)
    second = asyncio.create_task(lists.refusal(job.id, URL))
    await asyncio.sleep(0)
    first.cancel()
    store.gate.set()
    reason = await second
    assert reason is not None
    assert "deny list of tenant 'acme'" in reason
    assert first.cancelled()
