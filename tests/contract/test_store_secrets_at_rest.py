"""Secrets at rest on the SQL stores: what the database holds, what the store gives back, and
`reseal_secrets` after a key rotation (tickwork.sealing, store/sql/sealed.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tickwork.domain.jobs import AlertTarget, TaskTarget, WebhookTarget
from tickwork.sealing import Keyring, SealedSecretError
from tickwork.store.base import ScheduleStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.postgres import store as postgres_store
from tickwork.store.sql.reseal import reseal_all
from tickwork.store.sqlite import SqliteStore
from tickwork.store.sqlite import store as sqlite_store
from tickwork.webhooks import generate_secret

from .store_helpers import T0, claim, make_job, plan_for

K1 = Keyring([("k1", bytes(range(32)))])
K2_THEN_K1 = Keyring([("k2", bytes(range(1, 33))), ("k1", bytes(range(32)))])
K2 = Keyring([("k2", bytes(range(1, 33)))])

CANARIES = ("hdr-canary-7f3a", "pw-canary-91c2", "alert-canary-55d0")
SIGNING = generate_secret()
TENANT_SIGNING = generate_secret()
SECRET_TARGET = WebhookTarget(
    url=f"https://bob:{CANARIES[1]}@example.com/hook",
    headers={"Authorization": f"Bearer {CANARIES[0]}", "accept": "application/json"},
    secrets=(SIGNING,),
)
ALERT = AlertTarget(url="https://example.com/alert", headers={"x-pager": CANARIES[2]})

Build = Callable[[Keyring | None], ScheduleStore]
Dump = Callable[[], Awaitable[str]]  # every row of the secret-bearing tables, as text


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "tickwork.db")
    return "postgres", str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def backend(database: tuple[str, str]) -> AsyncIterator[tuple[Build, Dump]]:
    opened: list[ScheduleStore] = []
    kind, where = database
    if kind == "sqlite":
        path = Path(where)

        def build(keyring: Keyring | None) -> ScheduleStore:
            store = SqliteStore(path, keyring=keyring)
            opened.append(store)
            return store

        async def dump() -> str:
            with sqlite3.connect(path) as conn:
                jobs = conn.execute("SELECT * FROM tw_jobs").fetchall()
                tenants = conn.execute("SELECT * FROM tw_tenants").fetchall()
            return repr(jobs) + repr(tenants)

        yield build, dump
    else:
        dsn = where

        def build(keyring: Keyring | None) -> ScheduleStore:
            store = PostgresStore(dsn, keyring=keyring)
            opened.append(store)
            return store

        async def dump() -> str:
            conn = await asyncpg.connect(dsn)
            try:
                jobs = await conn.fetch("SELECT * FROM tw_jobs")
                tenants = await conn.fetch("SELECT * FROM tw_tenants")
            finally:
                await conn.close()
            return repr([dict(r) for r in jobs]) + repr([dict(r) for r in tenants])

        yield build, dump
    for store in opened:
        await store.close()


async def opened_store(build: Build, keyring: Keyring | None) -> ScheduleStore:
    store = build(keyring)
    await store.open()
    return store


def leaked(text: str) -> list[str]:
    secrets = (*CANARIES, SIGNING.removeprefix("whsec_"), TENANT_SIGNING.removeprefix("whsec_"))
    return [s for s in secrets if s in text]


async def test_secrets_are_sealed_in_the_database_and_read_back_whole(
    backend: tuple[Build, Dump],
) -> None:
    build, dump = backend
    store = await opened_store(build, K1)
    job = make_job(1, target=SECRET_TARGET, on_failure=ALERT)
    await store.create_job(job)
    await store.create_tenant("acme", now=T0, webhook_secrets=(TENANT_SIGNING,))
    await store.set_tenant_secrets("default", (TENANT_SIGNING,), now=T0)

    raw = await dump()
    assert leaked(raw) == []
    assert "tw1:k1:" in raw

    read = await store.get_job(job.id)
    assert read.target == SECRET_TARGET
    assert read.on_failure == ALERT
    tenant = await store.get_tenant("acme")
    assert tenant is not None
    assert tenant.webhook_secrets == (TENANT_SIGNING,)
    claimed = await claim(store, [plan_for(job)])
    [fire] = list(claimed)
    assert fire.target == SECRET_TARGET
    assert fire.on_failure == ALERT
    assert fire.tenant_secrets == (TENANT_SIGNING,)


async def test_jobs_without_secrets_stay_plain_json(backend: tuple[Build, Dump]) -> None:
    build, dump = backend
    store = await opened_store(build, K1)
    await store.create_job(make_job(1, target=TaskTarget(name="noop")))
    await store.create_job(make_job(2, target=WebhookTarget(url="https://example.com/x")))
    assert "tw1:" not in await dump()


async def test_a_store_without_the_key_refuses_clearly(backend: tuple[Build, Dump]) -> None:
    build, _ = backend
    writer = await opened_store(build, K1)
    job = make_job(1, target=SECRET_TARGET)
    await writer.create_job(job)
    for keyring, expected in ((None, "no secret keys"), (K2, "'k1', which this process does not")):
        reader = await opened_store(build, keyring)
        with pytest.raises(SealedSecretError, match=expected) as info:
            await reader.get_job(job.id)
        assert leaked(str(info.value)) == []


async def test_reseal_after_rotation_moves_every_secret_to_the_new_key(
    backend: tuple[Build, Dump],
) -> None:
    build, dump = backend
    # rows from before encryption (a store without keys) and rows sealed with the old key
    legacy = await opened_store(build, None)
    await legacy.create_job(make_job(1, target=SECRET_TARGET, on_failure=ALERT))
    await legacy.set_tenant_secrets("default", (TENANT_SIGNING,), now=T0)
    assert leaked(await dump()) != []
    old = await opened_store(build, K1)
    await old.create_job(make_job(2, target=SECRET_TARGET, on_failure=ALERT))
    await old.create_job(make_job(3, target=TaskTarget(name="noop")))

    rotated = await opened_store(build, K2_THEN_K1)
    report = await rotated.reseal_secrets()
    assert (report.jobs_checked, report.jobs_resealed, report.skipped) == (3, 2, 0)
    assert report.tenants_resealed == 1
    raw = await dump()
    assert leaked(raw) == []
    assert "tw1:k1:" not in raw
    assert "tw1:k2:" in raw

    again = await rotated.reseal_secrets()
    assert (again.jobs_resealed, again.tenants_resealed) == (0, 0)

    only_new = await opened_store(build, K2)
    for n in (1, 2):
        job = await only_new.get_job(make_job(n).id)
        assert job.target == SECRET_TARGET
        assert job.on_failure == ALERT
    default = await only_new.get_tenant("default")
    assert default is not None
    assert default.webhook_secrets == (TENANT_SIGNING,)


async def test_an_edit_between_read_and_rewrite_wins(backend: tuple[Build, Dump]) -> None:
    """The rewrite is a compare-and-set on what was read: an edit made in between (sealed with
    whatever key its process has) is kept, counted as skipped, not overwritten."""
    build, _ = backend
    old = await opened_store(build, K1)
    job = make_job(1, target=SECRET_TARGET)
    await old.create_job(job)
    edited = replace(job, target=replace(SECRET_TARGET, headers={"Authorization": "Bearer newer"}))
    rotated = await opened_store(build, K2_THEN_K1)
    module = sqlite_store if isinstance(rotated, SqliteStore) else postgres_store
    query = rotated._query  # type: ignore[attr-defined]

    async def read_then_edit(statement: Any, params: Any) -> Any:
        rows = await query(statement, params)
        if statement is module.RESEAL.job_page and rows:
            await old.update_job(edited)
        return rows

    async def write(statement: Any, params: Any) -> Any:
        if isinstance(rotated, SqliteStore):
            return await rotated._write(  # type: ignore[attr-defined]
                lambda conn: conn.execute(statement.text, params).fetchall()
            )
        return await rotated._fetch(statement, params, "test")  # type: ignore[attr-defined]

    columns = rotated._columns  # type: ignore[attr-defined]
    report = await reseal_all(module.RESEAL, columns, read_then_edit, write)
    assert (report.jobs_resealed, report.skipped) == (0, 1)
    assert (await rotated.get_job(job.id)).target == edited.target
    assert (await rotated.reseal_secrets()).jobs_resealed == 1


async def test_a_job_this_process_cannot_decrypt_fails_alone(backend: tuple[Build, Dump]) -> None:
    """A claim with one job sealed under a key this store lacks still claims the others, and
    marks that one fire `unreadable` (its attempt fails with the reason) instead of failing."""
    build, _ = backend
    writer = await opened_store(build, K1)
    secret_job = make_job(1, target=SECRET_TARGET)
    plain_job = make_job(2, target=TaskTarget(name="noop"))
    await writer.create_job(secret_job)
    await writer.create_job(plain_job)
    other = await opened_store(build, K2)
    fires = {f.job_id: f for f in await claim(other, [plan_for(secret_job), plan_for(plain_job)])}
    assert fires[plain_job.id].unreadable is None
    assert fires[plain_job.id].target == TaskTarget(name="noop")
    reason = fires[secret_job.id].unreadable
    assert reason is not None
    assert "'k1', which this process does not have" in reason
    assert leaked(reason) == []
