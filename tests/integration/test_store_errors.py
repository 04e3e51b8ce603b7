"""Driver errors never reach the API as a 500: a dropped or refused PostgreSQL connection is a
store error, answered 503 with Retry-After, and the store serves again once the database does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest

from tickwork.api.app import create_app
from tickwork.api.ops_app import create_ops_app
from tickwork.clock import SystemClock
from tickwork.errors import StoreError, StoreUnavailable
from tickwork.services.keys import KeyService
from tickwork.settings import Settings
from tickwork.store.postgres import PostgresStore
from tickwork.testing import ThrowawayPostgres, mint_key

pytestmark = pytest.mark.postgres

WAIT_S = 10.0
NEW_JOB = {"name": "x", "schedule": {"every": "PT1M"}, "target": {"type": "task", "name": "t"}}


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    opened = PostgresStore(pg_dsn, pool_size=2)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def client_for(store: PostgresStore) -> httpx.AsyncClient:
    """A client of an app on `store`, sending an admin key minted in it."""
    key = await mint_key(store)
    app = create_app(store=store, clock=SystemClock(), settings=Settings())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(
        transport=transport,
        base_url="http://tickwork.test",
        headers={"Authorization": f"Bearer {key}"},
    )


async def _backend_waiting_on_a_lock(admin: asyncpg.Connection) -> int:
    """The pid of the server process whose statement waits for a lock (the API's request)."""
    async with asyncio.timeout(WAIT_S):
        while True:
            pid = await admin.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if pid is not None:
                return int(pid)
            await asyncio.sleep(0.02)  # polling the server's own view: no event to await


async def test_a_connection_killed_under_a_request_is_a_503_with_retry_after(
    store: PostgresStore, pg_dsn: str
) -> None:
    admin = await asyncpg.connect(pg_dsn)
    try:
        async with await client_for(store) as client:
            # Hold the jobs table so the request's statement is in flight on the server.
            locker = admin.transaction()
            await locker.start()
            await admin.execute("LOCK TABLE tw_jobs IN ACCESS EXCLUSIVE MODE")
            request = asyncio.create_task(client.get("/v1/jobs"))
            victim = await _backend_waiting_on_a_lock(admin)
            await admin.execute("SELECT pg_terminate_backend($1)", victim)
            await locker.rollback()
            response = await request
            assert response.status_code == 503, response.text
            assert response.headers["retry-after"] == "1"
            error = response.json()["error"]
            assert error["code"] == "store_unavailable"
            assert "PostgreSQL" in error["message"]
            # The pool drops the dead connection: the next request is served.
            again = await client.get("/v1/jobs")
            assert again.status_code == 200, again.text
    finally:
        await admin.close()


async def test_a_database_that_went_away_is_a_503_on_every_route_it_backs(
    throwaway_pg: ThrowawayPostgres,
) -> None:
    store = PostgresStore(throwaway_pg.dsn(), pool_size=2)
    await store.open()
    try:
        async with await client_for(store) as client:
            assert (await client.get("/v1/jobs")).status_code == 200
            throwaway_pg.stop("immediate")  # a crash: every pooled connection dies
            for method, path in [
                ("GET", "/v1/jobs"),
                ("GET", "/v1/jobs/0123456789abcdef0123456789abcdef"),
                ("GET", "/v1/dead-letters"),
                ("POST", "/v1/jobs"),
            ]:
                body = None if method == "GET" else NEW_JOB
                response = await client.request(method, path, json=body)
                assert response.status_code == 503, (method, path, response.text)
                assert response.headers["retry-after"] == "1"
                assert response.json()["error"]["code"] == "store_unavailable"
            health = await client.get("/healthz")
            assert health.status_code == 503
        # A scheduler's or worker's ops server says the same (api/ops_app.py).
        ops = create_ops_app(
            store=store, keys=KeyService(store, SystemClock()), open_ops=False, max_body_bytes=1
        )
        transport = httpx.ASGITransport(app=ops, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://tickwork.test") as c:
            health = await c.get("/healthz")
        assert health.status_code == 503
        assert health.json()["error"]["code"] == "store_unavailable"
    finally:
        await store.close()


async def test_store_calls_raise_store_errors_not_driver_errors(
    throwaway_pg: ThrowawayPostgres,
) -> None:
    store = PostgresStore(throwaway_pg.dsn(), pool_size=1)
    await store.open()
    try:
        throwaway_pg.stop("immediate")
        with pytest.raises(StoreUnavailable):
            await store.list_dead_letters()
        with pytest.raises(StoreUnavailable):
            await store.extend_leases([(1, 1)], lease_until=SystemClock().now())
    finally:
        await store.close()
    refused = PostgresStore(throwaway_pg.dsn(), migrate=False)
    with pytest.raises(StoreError):
        await refused.open()
