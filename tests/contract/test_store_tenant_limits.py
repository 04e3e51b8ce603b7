"""The ScheduleStore contract for a tenant's limits, on every backend (memory, SQLite,
PostgreSQL): stored with the tenant and replaced whole, shown by every tenant read, kept apart
from its other settings; the jobs counted per tenant; and the job quota (`create_job(...,
check_quota=True)`) held under concurrent creates from several stores, as from several API
processes."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from tickwork.domain.jobs import JobState
from tickwork.domain.tenant_limits import TenantLimits
from tickwork.errors import NotFound, QuotaExceeded, StaleTenant
from tickwork.services.tenants import TenantService
from tickwork.store.base import JobQuery, ScheduleStore

from .conftest import StoreFactory, open_store
from .store_helpers import SEC, T0, make_job

LIMITS = TenantLimits(
    max_jobs=5, max_fires_per_s=2.5, max_concurrent_runs=3, max_api_rps=0.5, weight=4
)


async def test_a_new_tenant_has_no_limits_unless_given(store: ScheduleStore) -> None:
    plain = await store.create_tenant("plain", now=T0)
    assert plain.limits == TenantLimits()
    limited = await store.create_tenant("acme", now=T0, limits=LIMITS)
    assert limited.limits == LIMITS
    assert await store.get_tenant("acme") == limited


async def test_limits_round_trip_through_every_read(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0)
    stored = await store.set_tenant_limits("acme", LIMITS, now=T0 + SEC)
    assert stored.limits == LIMITS
    assert isinstance(stored.limits.max_jobs, int)
    assert (stored.created_at, stored.updated_at) == (T0, T0 + SEC)
    assert await store.get_tenant("acme") == stored
    listed = {t.tenant: t for t in await store.list_tenants()}
    assert listed["acme"] == stored
    assert listed["default"].limits == TenantLimits()


async def test_limits_are_replaced_whole_and_cleared(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0, limits=LIMITS)
    fewer = TenantLimits(max_api_rps=100.0)
    assert (await store.set_tenant_limits("acme", fewer, now=T0 + SEC)).limits == fewer
    cleared = await store.set_tenant_limits("acme", TenantLimits(), now=T0 + 2 * SEC)
    assert cleared.limits.empty
    found = await store.get_tenant("acme")
    assert found is not None
    assert found.limits.empty


async def test_limits_and_other_settings_do_not_overwrite_each_other(
    store: ScheduleStore,
) -> None:
    await store.create_tenant("acme", now=T0, webhook_secrets=["whsec_" + "A" * 32])
    with_limits = await store.set_tenant_limits("acme", LIMITS, now=T0 + SEC)
    assert len(with_limits.webhook_secrets) == 1
    without_secrets = await store.set_tenant_secrets("acme", [], now=T0 + 2 * SEC)
    assert without_secrets.limits == LIMITS


async def test_limits_of_an_unknown_tenant_are_refused(store: ScheduleStore) -> None:
    with pytest.raises(NotFound):
        await store.set_tenant_limits("nobody", LIMITS, now=T0)
    assert await store.get_tenant("nobody") is None


async def test_jobs_are_counted_by_tenant_in_every_state(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0)
    await store.create_job(make_job(1, tenant="acme"))
    await store.create_job(make_job(2, tenant="acme", state=JobState.COMPLETED, next_run_at=None))
    await store.create_job(make_job(3, tenant="acme", state=JobState.PAUSED))
    await store.create_job(make_job(4))
    assert await store.count_tenant_jobs() == {"acme": 3, "default": 1}
    assert await store.count_tenant_jobs("acme") == {"acme": 3}
    assert await store.count_tenant_jobs("nobody") == {}


async def test_a_create_at_the_quota_is_refused_and_stores_nothing(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_jobs=2))
    await store.create_job(make_job(1, tenant="acme"), check_quota=True)
    # A completed job still counts: it occupies the store until it is deleted.
    done = make_job(2, tenant="acme", state=JobState.COMPLETED, next_run_at=None)
    await store.create_job(done, check_quota=True)
    with pytest.raises(QuotaExceeded) as refused:
        await store.create_job(make_job(3, tenant="acme"), check_quota=True)
    assert (refused.value.tenant, refused.value.limit, refused.value.count) == ("acme", 2, 2)
    assert refused.value.field == "limits.max_jobs"
    assert await store.count_tenant_jobs("acme") == {"acme": 2}
    await store.delete_job(done.id)
    await store.create_job(make_job(3, tenant="acme"), check_quota=True)


async def test_the_quota_read_is_the_stored_one_not_the_callers(store: ScheduleStore) -> None:
    # The caller saw a quota; by the time of the create it was raised: the stored one rules.
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_jobs=1))
    await store.create_job(make_job(1, tenant="acme"), check_quota=True)
    await store.set_tenant_limits("acme", TenantLimits(max_jobs=2), now=T0 + SEC)
    await store.create_job(make_job(2, tenant="acme"), check_quota=True)
    await store.set_tenant_limits("acme", TenantLimits(), now=T0 + 2 * SEC)
    await store.create_job(make_job(3, tenant="acme"), check_quota=True)
    assert await store.count_tenant_jobs("acme") == {"acme": 3}


async def test_the_quota_of_one_tenant_leaves_the_others_alone(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_jobs=1))
    await store.create_job(make_job(1, tenant="acme"), check_quota=True)
    for n in range(2, 5):
        await store.create_job(make_job(n), check_quota=True)
    assert await store.count_tenant_jobs() == {"acme": 1, "default": 3}


async def test_concurrent_creates_from_several_stores_never_pass_the_quota(
    make_store: StoreFactory, opened: list[ScheduleStore]
) -> None:
    # Four stores on one database, as four API processes: 20 creates at once, quota 5.
    stores = [await open_store(make_store, opened) for _ in range(4)]
    await stores[0].create_tenant("acme", now=T0, limits=TenantLimits(max_jobs=5))

    async def create(n: int) -> QuotaExceeded | None:
        job = make_job(n, tenant="acme")
        try:
            await stores[n % len(stores)].create_job(job, check_quota=True)
        except QuotaExceeded as exc:
            return exc
        return None

    outcomes = await asyncio.gather(*(create(n) for n in range(1, 21)))
    created = [o is None for o in outcomes]
    assert sum(created) == 5
    assert {(o.limit, o.count) for o in outcomes if o is not None} == {(5, 5)}
    assert await stores[1].count_tenant_jobs("acme") == {"acme": 5}
    listed = await stores[2].list_jobs(JobQuery(tenant="acme", limit=100))
    assert sorted(j.id for j in listed) == sorted(
        make_job(n).id for n, ok in zip(range(1, 21), created, strict=True) if ok
    )
    # And the quota still refuses the next one, whichever store is asked.
    with pytest.raises(QuotaExceeded):
        await stores[3].create_job(replace(make_job(99), tenant="acme"), check_quota=True)


async def test_a_limits_write_expecting_an_older_read_is_refused(store: ScheduleStore) -> None:
    read = await store.create_tenant("acme", now=T0)
    await store.set_tenant_limits("acme", TenantLimits(max_jobs=3), now=T0 + SEC)
    with pytest.raises(StaleTenant):
        await store.set_tenant_limits(
            "acme", TenantLimits(weight=2), now=T0 + 2 * SEC, expected_updated_at=read.updated_at
        )
    stored = await store.get_tenant("acme")
    assert stored is not None
    assert stored.limits == TenantLimits(max_jobs=3)
    fresh = await store.set_tenant_limits(
        "acme", TenantLimits(weight=2), now=T0 + 2 * SEC, expected_updated_at=stored.updated_at
    )
    assert fresh.limits == TenantLimits(weight=2)
    with pytest.raises(NotFound):
        await store.set_tenant_limits(
            "nobody", TenantLimits(), now=T0, expected_updated_at=read.updated_at
        )


async def test_concurrent_changes_of_different_limits_are_all_kept(store: ScheduleStore) -> None:
    # Each change is a read-merge-write in the service; the store's compare-and-set makes the
    # loser read again, so no change is lost whoever wins.
    await store.create_tenant("acme", now=T0)
    tenants = TenantService(store, SteppingClock(T0))
    changes = [{"max_jobs": 10}, {"max_api_rps": 5}, {"weight": 3}, {"max_concurrent_runs": 7}]
    await asyncio.gather(*(tenants.set_limits("acme", c) for c in changes))
    stored = await store.get_tenant("acme")
    assert stored is not None
    assert stored.limits == TenantLimits(
        max_jobs=10, max_api_rps=5, weight=3, max_concurrent_runs=7
    )


class SteppingClock:
    """Every reading a microsecond later: each write gets an updated_at of its own."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        self._now += timedelta(microseconds=1)
        return self._now
