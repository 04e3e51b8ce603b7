"""The ScheduleStore contract, part AuditStore: the audit log of changes made through the API,
appended in batches, listed newest first (keyset pages, by tenant and by key), pruned by age.

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta

from tickwork.domain.audit import AuditEntry
from tickwork.store.base import ScheduleStore

from .conftest import StoreFactory, open_store
from .store_helpers import SEC, T0


def entry(n: int, **kw: object) -> AuditEntry:
    """Entry n: made at T0 + n s by key `key<n % 3>` of tenant acme, on a job of acme."""
    fields: dict[str, object] = {
        "at": T0 + n * SEC,
        "key_id": f"key{n % 3}",
        "key_prefix": f"tw_0000000{n % 3}",
        "role": "tenant-write",
        "actor_tenant": "acme",
        "action": "POST /v1/jobs/{job_id}/pause",
        "resource": f"job {n:032x}",
        "tenant": "acme",
        "status": 200,
        "client": "127.0.0.1",
    }
    fields.update(kw)
    return AuditEntry(**fields)  # type: ignore[arg-type]


async def ids(store: ScheduleStore, **kw: object) -> list[int]:
    found = await store.list_audit(**kw)  # type: ignore[arg-type]
    assert all(e.id is not None for e in found)
    return [e.id for e in found]  # type: ignore[misc]


async def test_a_batch_is_stored_whole_with_ascending_ids_and_every_field(
    store: ScheduleStore,
) -> None:
    assert await store.list_audit() == []
    await store.record_audit([])  # nothing to do
    batch = [
        entry(1, at=T0 + timedelta(microseconds=7)),  # to the microsecond
        # A CLI command with database access: no key, no role, no address.
        entry(
            2,
            key_id=None,
            key_prefix=None,
            role=None,
            actor_tenant=None,
            resource=None,
            tenant=None,
            client=None,
            action="tickwork tenants delete",
            status=204,
        ),
        entry(3, role="admin", actor_tenant=None, tenant="globex", action="DELETE /v1/keys/{id}"),
        entry(4, id=999, status=409, client="2001:db8::1", resource="tenant é ✓"),  # id ignored
    ]
    await store.record_audit(batch)
    newest_first = await store.list_audit()
    assert [replace(e, id=None) for e in newest_first] == [
        replace(e, id=None) for e in reversed(batch)
    ]
    found = [e.id for e in reversed(newest_first)]  # in the order given
    assert all(isinstance(i, int) for i in found)
    assert found == sorted(found)
    assert len(set(found)) == len(batch)


async def test_ids_ascend_across_calls_and_pages_walk_the_log_newest_first(
    store: ScheduleStore,
) -> None:
    await store.record_audit([entry(n) for n in range(5)])
    await store.record_audit([entry(5)])
    await store.record_audit([entry(n) for n in range(6, 12)])
    every = await ids(store)
    assert len(every) == 12
    assert every == sorted(every, reverse=True)
    assert [e.at for e in await store.list_audit()] == [T0 + n * SEC for n in reversed(range(12))]
    assert await ids(store, limit=5) == every[:5]
    assert await ids(store, limit=5, before_id=every[4]) == every[5:10]
    assert await ids(store, limit=5, before_id=every[9]) == every[10:]
    assert await ids(store, before_id=every[-1]) == []
    assert await ids(store, before_id=every[0] + 1000) == every
    # The default page is 100 entries.
    await store.record_audit([entry(n) for n in range(12, 150)])
    page = await ids(store)
    assert len(page) == 100
    assert page[-1] > every[0]
    paged: list[int] = []
    while batch := await ids(store, limit=40, before_id=paged[-1] if paged else None):
        paged += batch
    assert len(paged) == 150
    assert paged == sorted(paged, reverse=True)
    assert paged[-12:] == every


async def test_filters_by_the_resources_tenant_and_by_key_apply_together(
    store: ScheduleStore,
) -> None:
    await store.record_audit(
        [
            entry(0),  # acme, key0
            entry(1, tenant="globex"),  # acme's key on a globex resource: globex's entry
            entry(2, tenant=None),  # a resource of no tenant: in no tenant's log
            entry(3, actor_tenant=None, role="admin"),  # an admin on acme: acme's entry
            entry(4, tenant="globex", actor_tenant="globex"),  # key1
            entry(5, tenant="Acme"),  # case counts
        ]
    )
    every = await ids(store)  # entries 5, 4, ..., 0
    by_n = dict(zip(reversed(range(6)), every, strict=True))
    assert await ids(store, tenant="acme") == [by_n[3], by_n[0]]
    assert await ids(store, tenant="globex") == [by_n[4], by_n[1]]
    assert await ids(store, tenant="Acme") == [by_n[5]]
    assert await ids(store, tenant="initech") == []
    assert await ids(store, key_id="key1") == [by_n[4], by_n[1]]
    assert await ids(store, key_id="key0") == [by_n[3], by_n[0]]
    assert await ids(store, key_id="nokey") == []
    assert await ids(store, tenant="globex", key_id="key1") == [by_n[4], by_n[1]]
    assert await ids(store, tenant="acme", key_id="key1") == []
    assert await ids(store, tenant="acme", key_id="key0", limit=1) == [by_n[3]]
    assert await ids(store, tenant="acme", before_id=by_n[3]) == [by_n[0]]
    [found] = await store.list_audit(tenant="Acme")
    assert found == replace(entry(5, tenant="Acme"), id=by_n[5])


async def test_prune_deletes_the_oldest_entries_made_before_the_instant_in_batches(
    store: ScheduleStore,
) -> None:
    # Ids and instants in different orders: age decides what goes, not the id.
    ages = [7, 2, 9, 0, 5, 3, 8, 1, 6, 4]
    await store.record_audit([entry(n) for n in ages])
    assert await store.prune_audit(before=T0, limit=10) == 0  # nothing is older than T0
    before = T0 + 6 * SEC  # entries 0..5 are older; entry 6 is made at it exactly and stays
    assert await store.prune_audit(before=before, limit=4) == 4
    left = sorted(int(e.at.timestamp() - T0.timestamp()) for e in await store.list_audit())
    assert left == [4, 5, 6, 7, 8, 9]
    assert await store.prune_audit(before=before, limit=4) == 2
    assert await store.prune_audit(before=before, limit=4) == 0
    assert sorted(e.at for e in await store.list_audit()) == [T0 + n * SEC for n in (6, 7, 8, 9)]
    assert await store.prune_audit(before=T0 + 100 * SEC, limit=100) == 4
    assert await store.list_audit() == []


async def test_ids_keep_ascending_after_everything_was_pruned(store: ScheduleStore) -> None:
    await store.record_audit([entry(n) for n in range(3)])
    last = max(await ids(store))
    assert await store.prune_audit(before=T0 + 100 * SEC, limit=100) == 3
    await store.record_audit([entry(n) for n in range(2)])
    assert min(await ids(store)) > last


async def test_a_large_batch_is_one_call(store: ScheduleStore) -> None:
    batch = [entry(n, resource=f"job {n}") for n in range(2_000)]
    await store.record_audit(batch)
    found = await store.list_audit(limit=5_000)
    assert [e.resource for e in reversed(found)] == [e.resource for e in batch]


async def test_processes_sharing_a_database_record_at_once_and_see_each_others(
    store: ScheduleStore, make_store: StoreFactory, opened: list[ScheduleStore]
) -> None:
    other = await open_store(make_store, opened)
    batches = [
        (s, [entry(n, key_id=f"{name}{n}") for n in range(50)])
        for s, name in ((store, "a"), (other, "b"))  # one store twice on memory
    ]
    await asyncio.gather(*(s.record_audit(b) for s, b in batches))
    for reader in (store, other):
        found = await reader.list_audit(limit=1_000)
        assert len(found) == 100
        assert len({e.id for e in found}) == 100
        for name in ("a", "b"):
            # Each batch keeps the order it was given in.
            mine = [e.key_id for e in reversed(found) if e.key_id and e.key_id[0] == name]
            assert mine == [f"{name}{n}" for n in range(50)]
