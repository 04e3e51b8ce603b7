"""The ScheduleStore contract for `max_concurrent_runs` (issue 21, ADR 0024), on every backend:
a tenant with a cap of N never has more than N runs going (pending, leased to a worker, the
lease live) whoever leases them; its other runs stay pending, unowned, at attempt 0, and are
leased as slots free; other tenants' runs are leased regardless."""

from __future__ import annotations

import asyncio

from tickwork.domain.runs import Envelope, Fire, RunStatus
from tickwork.domain.tenant_limits import TenantLimits
from tickwork.store.base import ScheduleStore

from .conftest import StoreFactory, open_store
from .store_helpers import SEC, T0, make_job, outcome, plan_for

UNTIL = T0 + 60 * SEC


async def _runs(store: ScheduleStore, tenant: str, first: int, count: int) -> list[Envelope]:
    """`count` hand-offs of `tenant` (one job each, numbered from `first`), free at T0."""
    jobs = [make_job(n, tenant=tenant) for n in range(first, first + count)]
    for job in jobs:
        await store.create_job(job)
    plans = [plan_for(job, new_next=T0 + SEC) for job in jobs]
    return list(await store.claim_hand_off(plans, owner="s", now=T0))


def _tenants(fires: list[Fire]) -> list[str]:
    return sorted(f.tenant for f in fires)


async def _lease(store: ScheduleStore, owner: str = "w1", limit: int = 10) -> list[Fire]:
    return await store.lease_runs(now=T0 + SEC, owner=owner, lease_until=UNTIL, limit=limit)


async def test_a_capped_tenant_is_leased_up_to_its_cap_and_again_as_slots_free(
    store: ScheduleStore,
) -> None:
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_concurrent_runs=2))
    await _runs(store, "acme", 1, 5)
    await _runs(store, "other", 10, 3)
    first = await _lease(store)
    assert _tenants(first) == ["acme", "acme", "other", "other", "other"]
    assert await _lease(store) == []  # acme is at its cap; nothing else is free
    done = next(f for f in first if f.tenant == "acme")
    assert await store.finish_runs([outcome(done)]) == 1
    [next_one] = await _lease(store)
    assert (next_one.tenant, next_one.attempt) == ("acme", 1)
    assert await _lease(store) == []
    waiting = [r for j in range(1, 6) for r in await store.list_runs(f"{j:032x}")]
    unleased = [r for r in waiting if r.status is RunStatus.PENDING and r.lease_owner is None]
    assert [r.attempt for r in unleased] == [0, 0]  # still waiting: no attempt consumed


async def test_one_lease_takes_at_most_the_room_left(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_concurrent_runs=3))
    await _runs(store, "acme", 1, 5)
    assert len(await _lease(store, limit=1)) == 1
    assert len(await _lease(store, owner="w2")) == 2  # room 2 of 3, whoever leases
    assert await _lease(store, owner="w3") == []


async def test_the_cap_holds_across_stores_as_across_processes(
    make_store: StoreFactory, opened: list[ScheduleStore]
) -> None:
    first = await open_store(make_store, opened)
    await first.create_tenant("acme", now=T0, limits=TenantLimits(max_concurrent_runs=2))
    await _runs(first, "acme", 1, 6)
    second = await open_store(make_store, opened)
    assert len(await _lease(first, owner="w1", limit=1)) == 1
    assert len(await _lease(second, owner="w2")) == 1
    assert await _lease(first, owner="w1") == []
    assert await _lease(second, owner="w2") == []


async def test_expired_leases_and_retries_do_not_count_as_running(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_concurrent_runs=1))
    await _runs(store, "acme", 1, 1)
    short = T0 + 2 * SEC
    [_held] = await store.lease_runs(now=T0 + SEC, owner="w1", lease_until=short, limit=10)
    await _runs(store, "acme", 2, 2)
    assert await _lease(store, owner="w2") == []
    # Its lease ran out (its worker died): it is not running any more, so the cap has room
    # for one run again (the soonest free: a new one, free since T0).
    later = T0 + 3 * SEC
    [again] = await store.lease_runs(now=later, owner="w2", lease_until=UNTIL, limit=10)
    assert again.tenant == "acme"
    assert await store.lease_runs(now=later, owner="w3", lease_until=UNTIL, limit=10) == []
    # Released for a retry: no longer running, so another run takes the slot.
    assert (
        await store.finish_runs([outcome(again, status=RunStatus.PENDING, retry_at=T0 + 30 * SEC)])
        == 1
    )
    [other] = await store.lease_runs(now=later, owner="w3", lease_until=UNTIL, limit=10)
    assert other.run_id != again.run_id


async def test_tenants_without_a_cap_are_not_held_back(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_jobs=100))
    await _runs(store, "acme", 1, 4)
    assert len(await _lease(store)) == 4


async def test_a_cap_set_or_removed_applies_from_the_next_lease(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0)
    await _runs(store, "acme", 1, 5)
    assert len(await _lease(store, limit=2)) == 2
    await store.set_tenant_limits("acme", TenantLimits(max_concurrent_runs=2), now=T0)
    assert await _lease(store) == []
    await store.set_tenant_limits("acme", TenantLimits(), now=T0)
    assert len(await _lease(store)) == 3


async def test_leases_by_fence_refused_for_the_cap_stay_pending_for_the_store_leaser(
    store: ScheduleStore,
) -> None:
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_concurrent_runs=1))
    envelopes = await _runs(store, "acme", 1, 3)
    others = await _runs(store, "other", 10, 2)
    pairs = [(e.run_id, e.fence_token) for e in [*envelopes, *others]]
    leased = await store.lease_fenced_runs(pairs, owner="w1", lease_until=UNTIL, now=T0)
    assert _tenants(leased) == ["acme", "other", "other"]
    [running] = [f for f in leased if f.tenant == "acme"]
    # The refused ones are not lost: still pending at their fence, unowned, and no longer
    # waiting for their message (a backstop horizon long past does not hold them back).
    backstop = T0 - 60 * SEC
    lease = {"owner": "w2", "lease_until": UNTIL, "limit": 10, "hand_offs_by": backstop}
    assert await store.lease_runs(now=T0 + SEC, **lease) == []  # acme is at its cap
    assert await store.finish_runs([outcome(running)]) == 1
    [taken] = await store.lease_runs(now=T0 + SEC, **lease)
    assert taken.tenant == "acme"
    assert taken.run_id in {e.run_id for e in envelopes} - {running.run_id}
    assert taken.attempt == 1


async def test_concurrent_leases_from_many_stores_never_pass_the_cap(
    make_store: StoreFactory, opened: list[ScheduleStore]
) -> None:
    first = await open_store(make_store, opened)
    await first.create_tenant("acme", now=T0, limits=TenantLimits(max_concurrent_runs=3))
    envelopes = await _runs(first, "acme", 1, 12)
    stores = [first] + [await open_store(make_store, opened) for _ in range(3)]
    pairs = [(e.run_id, e.fence_token) for e in envelopes]
    calls = [_lease(s, owner=f"w{i}", limit=2) for i, s in enumerate(stores)] + [
        s.lease_fenced_runs(pairs[i::4], owner=f"q{i}", lease_until=UNTIL, now=T0)
        for i, s in enumerate(stores)
    ]
    leased = [f for found in await asyncio.gather(*calls) for f in found]
    assert len(leased) == 3
    assert len({f.run_id for f in leased}) == 3


async def test_a_stale_envelope_takes_no_room(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0, limits=TenantLimits(max_concurrent_runs=1))
    first, second = await _runs(store, "acme", 1, 2)
    pairs = [(first.run_id, first.fence_token + 5), (second.run_id, second.fence_token)]
    [leased] = await store.lease_fenced_runs(pairs, owner="w1", lease_until=UNTIL, now=T0)
    assert leased.run_id == second.run_id
