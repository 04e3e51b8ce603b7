"""The ScheduleStore contract, part AccessStore: API keys (stored by their hash) and tenants as
a resource (create, list, delete, which revokes the tenant's keys); and the dead-letter queue
of one tenant's jobs, which tenant-scoped keys see.

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tickwork.domain.keys import ApiKey, Role, hash_key, mint_key
from tickwork.domain.runs import RunStatus
from tickwork.errors import Conflict, NotFound, TenantExists, TenantHasJobs
from tickwork.store.base import ScheduleStore

from .store_helpers import SEC, SECRET_A, T0, claim, make_job, outcome, plan_for


def make_key(
    n: int, *, role: Role = Role.TENANT_WRITE, tenant: str | None = "acme", **kw: object
) -> ApiKey:
    minted = mint_key()
    fields: dict[str, object] = {
        "id": f"key{n:04d}",
        "name": f"key {n}",
        "role": role,
        "tenant": None if role is Role.ADMIN else tenant,
        "prefix": minted.prefix,
        "secret_hash": minted.secret_hash,
        "created_at": T0,
    }
    fields.update(kw)
    return ApiKey(**fields)  # type: ignore[arg-type]


async def keys_of(store: ScheduleStore, tenant: str | None = None) -> list[str]:
    return [k.id for k in await store.list_keys(tenant=tenant)]


async def tenant_names(store: ScheduleStore) -> list[str]:
    return [t.tenant for t in await store.list_tenants()]


# -- keys -----------------------------------------------------------------------------------------


async def test_a_key_round_trips_every_field_by_id_and_by_hash(store: ScheduleStore) -> None:
    full = make_key(
        1,
        role=Role.TENANT_READ,
        expires_at=T0 + 3600 * SEC,
        revoked_at=T0 + 2 * SEC,
        last_used_at=T0 + SEC,
    )
    bare = make_key(2, role=Role.ADMIN)
    for key in (full, bare):
        await store.create_key(key)
    assert await store.get_key(full.id) == full
    assert await store.get_key(bare.id) == bare
    assert (bare.tenant, bare.expires_at, bare.revoked_at, bare.last_used_at) == (None,) * 4
    assert await store.key_by_hash(full.secret_hash) == full  # revoked ones too
    assert await store.key_by_hash(bare.secret_hash) == bare
    assert await store.key_by_hash(hash_key("tw_00000000_not-a-key")) is None


async def test_missing_keys_raise_not_found_naming_the_key(store: ScheduleStore) -> None:
    for call in (store.get_key("nope"), store.revoke_key("nope", now=T0)):
        with pytest.raises(NotFound) as caught:
            await call
        assert (caught.value.kind, caught.value.ident) == ("key", "nope")


async def test_keys_list_by_id_all_or_of_one_tenant(store: ScheduleStore) -> None:
    for key in (
        make_key(3, tenant="globex"),
        make_key(1),
        make_key(4, role=Role.ADMIN),
        make_key(2, role=Role.TENANT_READ),
        make_key(10, id="KEY-upper"),  # code point order: upper case sorts first
    ):
        await store.create_key(key)
    assert await keys_of(store) == ["KEY-upper", "key0001", "key0002", "key0003", "key0004"]
    assert await keys_of(store, "acme") == ["KEY-upper", "key0001", "key0002"]
    assert await keys_of(store, "globex") == ["key0003"]
    assert await keys_of(store, "initech") == []
    assert await store.list_keys(tenant="globex") == [await store.get_key("key0003")]


async def test_a_taken_id_or_secret_hash_is_a_conflict_and_stores_nothing(
    store: ScheduleStore,
) -> None:
    first = make_key(1)
    await store.create_key(first)
    same_hash = make_key(2, secret_hash=first.secret_hash)
    same_id = make_key(1, name="another")
    for key in (same_hash, same_id, first):
        with pytest.raises(Conflict):
            await store.create_key(key)
    assert await store.list_keys() == [first]
    assert await store.key_by_hash(first.secret_hash) == first


async def test_revoking_is_idempotent_and_keeps_the_first_instant(store: ScheduleStore) -> None:
    key, other = make_key(1), make_key(2)
    for k in (key, other):
        await store.create_key(k)
    revoked = await store.revoke_key(key.id, now=T0 + SEC)
    assert revoked == replace(key, revoked_at=T0 + SEC)
    assert not revoked.usable_at(T0 + SEC)
    again = await store.revoke_key(key.id, now=T0 + 5 * SEC)
    assert again == revoked
    assert await store.get_key(key.id) == revoked
    assert await store.key_by_hash(key.secret_hash) == revoked
    assert await store.get_key(other.id) == other  # one key at a time


async def test_touch_keeps_the_latest_use_and_ignores_unknown_ids(store: ScheduleStore) -> None:
    a, b, c = make_key(1), make_key(2), make_key(3)
    for key in (a, b, c):
        await store.create_key(key)
    await store.touch_keys({})
    later = T0 + 10 * SEC + timedelta(microseconds=7)  # to the microsecond
    await store.touch_keys({a.id: T0 + 5 * SEC, b.id: later, "nosuchkey": T0})
    assert (await store.get_key(b.id)).last_used_at == later
    await store.touch_keys({a.id: T0 + 2 * SEC, b.id: T0 + 11 * SEC})  # a: older, not moved
    found = {k.id: k.last_used_at for k in await store.list_keys()}
    assert found == {a.id: T0 + 5 * SEC, b.id: T0 + 11 * SEC, c.id: None}
    await store.touch_keys({b.id: later})
    assert (await store.get_key(b.id)).last_used_at == T0 + 11 * SEC
    assert await keys_of(store) == [a.id, b.id, c.id]  # nothing was created


async def test_touch_keeps_the_other_fields(store: ScheduleStore) -> None:
    key = make_key(1, expires_at=T0 + 60 * SEC)
    await store.create_key(key)
    await store.revoke_key(key.id, now=T0 + SEC)
    await store.touch_keys({key.id: T0 + 2 * SEC})
    stored = await store.get_key(key.id)
    assert stored == replace(key, revoked_at=T0 + SEC, last_used_at=T0 + 2 * SEC)


# -- tenants --------------------------------------------------------------------------------------


async def test_a_new_store_has_the_default_tenant(store: ScheduleStore) -> None:
    [default] = await store.list_tenants()
    assert (default.tenant, default.webhook_secrets) == ("default", ())
    assert await store.get_tenant("default") == default
    with pytest.raises(TenantExists):
        await store.create_tenant("default", now=T0)


async def test_tenants_are_created_once_and_listed_by_name(store: ScheduleStore) -> None:
    created = await store.create_tenant("acme", now=T0)
    assert (created.tenant, created.webhook_secrets) == ("acme", ())
    assert (created.created_at, created.updated_at) == (T0, T0)
    assert await store.get_tenant("acme") == created
    with pytest.raises(TenantExists) as caught:
        await store.create_tenant("acme", now=T0 + SEC)
    assert isinstance(caught.value, Conflict)
    assert caught.value.code == "tenant_exists"
    assert "acme" in str(caught.value)
    assert await store.get_tenant("acme") == created  # unchanged
    # Code point order on every backend, whatever the database's collation.
    for name in ("b-c", "bc", "B", "b", "Zed", "é"):
        await store.create_tenant(name, now=T0)
    names = await tenant_names(store)
    assert names == ["B", "Zed", "acme", "b", "b-c", "bc", "default", "é"]
    assert names == sorted(names)


async def test_secrets_of_a_created_tenant_keep_its_creation(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0)
    stored = await store.set_tenant_secrets("acme", [SECRET_A], now=T0 + SEC)
    assert (stored.webhook_secrets, stored.created_at, stored.updated_at) == (
        (SECRET_A,),
        T0,
        T0 + SEC,
    )
    assert [t for t in await store.list_tenants() if t.tenant == "acme"] == [stored]
    # set_tenant_secrets still creates the row of a tenant that has none.
    made = await store.set_tenant_secrets("globex", [SECRET_A], now=T0)
    assert await tenant_names(store) == ["acme", "default", "globex"]
    with pytest.raises(TenantExists):
        await store.create_tenant("globex", now=T0)
    assert await store.get_tenant("globex") == made


async def test_deleting_a_missing_tenant_is_not_found(store: ScheduleStore) -> None:
    with pytest.raises(NotFound) as caught:
        await store.delete_tenant("nope", now=T0)
    assert (caught.value.kind, caught.value.ident) == ("tenant", "nope")


async def test_a_tenant_with_jobs_is_not_deleted_and_nothing_changes(
    store: ScheduleStore,
) -> None:
    await store.create_tenant("acme", now=T0)
    for n in (1, 2):
        await store.create_job(make_job(n, tenant="acme"))
    await store.create_job(make_job(3, tenant="globex"))
    key = make_key(1)
    await store.create_key(key)
    before = await store.list_tenants()
    with pytest.raises(TenantHasJobs) as caught:
        await store.delete_tenant("acme", now=T0 + SEC)
    assert isinstance(caught.value, Conflict)
    assert caught.value.code == "tenant_has_jobs"
    message = str(caught.value)
    assert "acme" in message
    assert "2 jobs" in message
    assert "delete them or move them" in message
    assert await store.list_tenants() == before
    assert await store.get_key(key.id) == key  # not revoked
    # One job left: the message counts it.
    await store.delete_job(make_job(1).id)
    with pytest.raises(TenantHasJobs, match="1 job:"):
        await store.delete_tenant("acme", now=T0 + SEC)


async def test_deleting_a_tenant_revokes_its_keys_and_no_others(store: ScheduleStore) -> None:
    for name in ("acme", "globex"):
        await store.create_tenant(name, now=T0)
    await store.create_job(make_job(1, tenant="globex"))
    write, read = make_key(1), make_key(2, role=Role.TENANT_READ)
    old = make_key(3, revoked_at=T0 + SEC)  # revoked already: keeps its instant
    theirs, admin = make_key(4, tenant="globex"), make_key(5, role=Role.ADMIN)
    for key in (write, read, old, theirs, admin):
        await store.create_key(key)

    await store.delete_tenant("acme", now=T0 + 9 * SEC)

    assert await store.get_tenant("acme") is None
    assert await tenant_names(store) == ["default", "globex"]
    assert await store.list_keys(tenant="acme") == [
        replace(write, revoked_at=T0 + 9 * SEC),
        replace(read, revoked_at=T0 + 9 * SEC),
        old,
    ]
    assert await store.get_key(theirs.id) == theirs
    assert await store.get_key(admin.id) == admin
    assert await store.key_by_hash(write.secret_hash) == replace(write, revoked_at=T0 + 9 * SEC)
    with pytest.raises(NotFound):
        await store.delete_tenant("acme", now=T0 + 10 * SEC)
    # The name is free again; the new tenant's keys are new keys.
    again = await store.create_tenant("acme", now=T0 + 10 * SEC)
    assert again.created_at == T0 + 10 * SEC
    assert all(k.revoked_at for k in await store.list_keys(tenant="acme"))


async def test_the_default_tenant_is_deleted_like_any_other(store: ScheduleStore) -> None:
    # Whether `default` may go is the API's rule, not the store's.
    await store.delete_tenant("default", now=T0)
    assert await store.list_tenants() == []


# -- dead letters of one tenant -------------------------------------------------------------------


async def dead_letters_of(store: ScheduleStore, jobs: dict[int, str]) -> dict[str, int]:
    """Create one job per {n: tenant}, fail each one's run for good; returns run ids by job id."""
    created = [make_job(n, tenant=tenant) for n, tenant in jobs.items()]
    for job in created:
        await store.create_job(job)
    fires = await claim(store, [plan_for(j, new_next=T0 + SEC) for j in created])
    assert await store.finish_runs([outcome(f, status=RunStatus.FAILED) for f in fires]) == len(
        created
    )
    return {f.job_id: f.run_id for f in fires}


async def test_dead_letters_are_listed_by_tenant(store: ScheduleStore) -> None:
    runs = await dead_letters_of(store, {1: "acme", 2: "globex", 3: "acme", 4: "default"})
    acme = sorted((runs[make_job(n).id] for n in (1, 3)), reverse=True)

    async def ids(**kw: object) -> list[int]:
        return [r.id for r in await store.list_dead_letters(**kw)]  # type: ignore[arg-type]

    assert await ids(tenant="acme") == acme
    assert await ids(tenant="globex") == [runs[make_job(2).id]]
    assert await ids(tenant="initech") == []
    assert len(await ids()) == 4
    assert await ids(tenant="acme", limit=1) == acme[:1]
    assert await ids(tenant="acme", before_id=acme[0]) == acme[1:]
    # With a job too, both filters apply.
    assert await ids(tenant="acme", job_id=make_job(3).id) == [runs[make_job(3).id]]
    assert await ids(tenant="globex", job_id=make_job(3).id) == []
    # Redriven, a run leaves its tenant's queue like any other's.
    assert await store.redrive([acme[0]], now=T0 + 5 * SEC) == 1
    assert await ids(tenant="acme") == acme[1:]


async def test_moving_a_job_moves_its_dead_letters_to_the_new_tenant(
    store: ScheduleStore,
) -> None:
    runs = await dead_letters_of(store, {1: "acme"})
    job = await store.get_job(make_job(1).id)
    await store.update_job(replace(job, tenant="globex", updated_at=T0 + SEC))
    assert await store.list_dead_letters(tenant="acme") == []
    assert [r.id for r in await store.list_dead_letters(tenant="globex")] == [runs[job.id]]
