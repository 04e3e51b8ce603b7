"""FenceGuard on real PostgreSQL (asyncpg), and end to end: real tickwork fires, signed and
sent by the real executor, to a real receiver on 127.0.0.1 that verifies and guards them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiosqlite
import asyncpg
import pytest
from aiohttp import web

from tickwork.clock import SystemClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import Fire, RunStatus
from tickwork.store.base import ClaimPlan
from tickwork.store.sqlite import SqliteStore
from tickwork.webhooks import (
    AiosqliteFenceStore,
    AsyncFenceGuard,
    AsyncpgFenceStore,
    Decision,
    Verified,
    WebhookVerificationError,
    fenced_id,
    generate_secret,
    signature_headers,
    verify,
)
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.webhook import WebhookRunner
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

SECRET = generate_secret()
LOOPBACK = AddressPolicy(allow=["127.0.0.1/32"])
OCC = "0192f3c1d2a87f3e9c1b2a3d4e5f6a7b:1772366400000"
RACERS = 8


def delivery(occurrence: str = OCC, fence: int = 5) -> Verified:
    msg_id = fenced_id(occurrence, fence)
    now = datetime.now(UTC)
    headers = signature_headers(
        msg_id=msg_id, timestamp=int(now.timestamp()), body=b"", secrets=[SECRET]
    )
    return verify(headers=headers, body=b"", secrets=[SECRET], now=now)


# -- PostgreSQL ---------------------------------------------------------------------------------


@pytest.fixture
async def pg(pg_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(pg_dsn, min_size=1, max_size=RACERS + 2)
    async with pool.acquire() as conn:
        await AsyncpgFenceStore.create(conn)
        await conn.execute("CREATE TABLE reports (occurrence TEXT, fence BIGINT)")
    yield pool
    await pool.close()


async def test_pg_decisions(pg: asyncpg.Pool) -> None:
    async with pg.acquire() as conn:
        guard = AsyncFenceGuard(AsyncpgFenceStore(conn))
        assert await guard.check(delivery(fence=7)) is Decision.ACCEPT
        assert await guard.check(delivery(fence=7)) is Decision.DUPLICATE
        assert await guard.check(delivery(fence=8)) is Decision.DUPLICATE
        assert await guard.check(delivery(fence=6)) is Decision.STALE
        assert await guard.check(delivery(OCC + ":manual", fence=1)) is Decision.ACCEPT


async def test_pg_create_is_idempotent_and_concurrent_safe(pg: asyncpg.Pool) -> None:
    async def create() -> None:
        async with pg.acquire() as conn:
            await AsyncpgFenceStore.create(conn, table="other_fences")

    await asyncio.gather(*(create() for _ in range(4)))


async def test_pg_connections_racing_accept_once(pg: asyncpg.Pool) -> None:
    start = asyncio.Barrier(RACERS)

    async def deliver(fence: int) -> Decision:
        async with pg.acquire() as conn:
            guard = AsyncFenceGuard(AsyncpgFenceStore(conn))
            await start.wait()
            async with guard.applying(delivery(fence=fence)) as decision:
                if decision is Decision.ACCEPT:
                    await conn.execute("INSERT INTO reports VALUES ($1, $2)", OCC, fence)
                return decision

    results = await asyncio.gather(*(deliver(5 + n % 2) for n in range(RACERS)))
    assert results.count(Decision.ACCEPT) == 1
    async with pg.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM reports") == 1


async def test_pg_a_concurrent_delivery_waits_for_the_outcome(pg: asyncpg.Pool) -> None:
    """The second delivery blocks on the first one's row; it then sees what really happened."""
    async with pg.acquire() as first, pg.acquire() as second:
        guard_a = AsyncFenceGuard(AsyncpgFenceStore(first))
        guard_b = AsyncFenceGuard(AsyncpgFenceStore(second))
        for effect_fails, then in ((True, Decision.ACCEPT), (False, Decision.DUPLICATE)):
            occurrence = f"{OCC}:{effect_fails}"
            inside, finish = asyncio.Event(), asyncio.Event()

            async def hold(occurrence: str, fails: bool, inside: asyncio.Event,
                           finish: asyncio.Event) -> Decision:  # fmt: skip
                async with guard_a.applying(delivery(occurrence, fence=5)) as decision:
                    inside.set()
                    await finish.wait()
                    if fails:
                        raise RuntimeError("effect failed")
                    return decision

            holding = asyncio.create_task(hold(occurrence, effect_fails, inside, finish))
            await inside.wait()
            waiting = asyncio.create_task(guard_b.check(delivery(occurrence, fence=6)))
            await wait_until_blocked(pg, waiting)
            assert not waiting.done()
            finish.set()
            if effect_fails:
                with pytest.raises(RuntimeError):
                    await holding
            else:
                assert await holding is Decision.ACCEPT
            assert await waiting is then


async def wait_until_blocked(pool: asyncpg.Pool, task: asyncio.Task[Any]) -> None:
    """Until PostgreSQL shows a session waiting on a lock (an event we poll for, bounded)."""
    async with pool.acquire() as conn, asyncio.timeout(10):
        while not task.done():
            waiting = await conn.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting:
                return
            await asyncio.sleep(0.01)


async def test_pg_effect_and_fence_share_the_callers_transaction(pg: asyncpg.Pool) -> None:
    async with pg.acquire() as conn:
        guard = AsyncFenceGuard(AsyncpgFenceStore(conn))

        async def effect_then_failure() -> None:
            async with conn.transaction():
                await conn.execute("INSERT INTO reports VALUES ($1, 5)", OCC)
                assert await guard.check(delivery(fence=5)) is Decision.ACCEPT
                raise RuntimeError("rolled back after the guard recorded")

        with pytest.raises(RuntimeError, match="rolled back"):
            await effect_then_failure()
        assert await conn.fetchval("SELECT count(*) FROM reports") == 0
        assert await guard.check(delivery(fence=6)) is Decision.ACCEPT


# -- end to end ---------------------------------------------------------------------------------


@dataclass
class GuardedReceiver:
    """A receiver as the docs tell one to write: verify, guard, effect in one transaction."""

    guard: AsyncFenceGuard
    transaction: Callable[[], AbstractAsyncContextManager[Any]]
    record_effect: Callable[[str, int], Awaitable[None]]
    decisions: list[tuple[int, Decision]] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    port: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            hook = verify(headers=request.headers, body=body, secrets=[SECRET])
        except WebhookVerificationError as exc:
            return web.json_response({"error": exc.reason}, status=401)
        async with self.transaction(), self.guard.applying(hook) as decision:
            if decision is Decision.ACCEPT:
                assert hook.fence is not None
                await self.record_effect(hook.occurrence, hook.fence)
        async with self.changed:
            self.decisions.append((hook.fence or 0, decision))
            self.changed.notify_all()
        if decision is Decision.STALE:
            return web.json_response({"error": "superseded lease"}, status=409)
        return web.json_response({"decision": decision.value})

    async def wait_for(self, count: int) -> list[tuple[int, Decision]]:
        async with asyncio.timeout(30), self.changed:
            await self.changed.wait_for(lambda: len(self.decisions) >= count)
        return self.decisions


@pytest.fixture(params=["aiosqlite", "asyncpg"])
def receiver_dsn(request: pytest.FixtureRequest) -> str | None:
    """Where the receiver keeps its data: None for a SQLite file, else a PostgreSQL DSN.

    Sync, so that it may ask for the async pg_dsn fixture only when it is needed."""
    return None if request.param == "aiosqlite" else str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def guarded(
    receiver_dsn: str | None, tmp_path: Path
) -> AsyncIterator[tuple[GuardedReceiver, Callable[[], Awaitable[list[tuple[str, int]]]]]]:
    """The receiver on 127.0.0.1, and a function that reads the effects it committed."""
    async with _receiver_db(receiver_dsn, tmp_path) as (rx, effects):
        app = web.Application()
        app.router.add_post("/hook", rx.handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        rx.port = runner.addresses[0][1]
        try:
            yield rx, effects
        finally:
            await runner.cleanup()


def _receiver_db(dsn: str | None, tmp_path: Path) -> Any:
    @asynccontextmanager
    async def on_sqlite() -> AsyncIterator[tuple[GuardedReceiver, Any]]:
        async with aiosqlite.connect(tmp_path / "receiver.db") as conn:
            await conn.execute("CREATE TABLE reports (occurrence TEXT, fence INTEGER)")
            await conn.commit()
            store = await AiosqliteFenceStore.create(conn)

            @asynccontextmanager
            async def transaction() -> AsyncIterator[None]:
                yield  # the guard's savepoint is the transaction; it commits on exit

            async def record(occurrence: str, fence: int) -> None:
                await conn.execute("INSERT INTO reports VALUES (?, ?)", (occurrence, fence))

            async def effects() -> list[tuple[str, int]]:
                rows = await conn.execute_fetchall("SELECT occurrence, fence FROM reports")
                return [(r[0], r[1]) for r in rows]

            yield GuardedReceiver(AsyncFenceGuard(store), transaction, record), effects

    @asynccontextmanager
    async def on_postgres() -> AsyncIterator[tuple[GuardedReceiver, Any]]:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute("CREATE TABLE reports (occurrence TEXT, fence BIGINT)")
            store = await AsyncpgFenceStore.create(conn)

            async def record(occurrence: str, fence: int) -> None:
                await conn.execute("INSERT INTO reports VALUES ($1, $2)", occurrence, fence)

            async def effects() -> list[tuple[str, int]]:
                rows = await conn.fetch("SELECT occurrence, fence FROM reports")
                return [(r["occurrence"], r["fence"]) for r in rows]

            receiver = GuardedReceiver(AsyncFenceGuard(store), conn.transaction, record)
            yield receiver, effects
        finally:
            await conn.close()

    return on_sqlite() if dsn is None else on_postgres()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    db = SqliteStore(tmp_path / "tickwork.db")
    await db.open()
    yield db
    await db.close()


async def lost_fire(store: SqliteStore, url: str) -> Fire:
    """One occurrence claimed by a worker that then "froze": its lease is already over."""
    now = datetime.now(UTC)
    job = await store.create_job(
        Job(
            id=f"{7:032x}",
            name="report",
            schedule=Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=now)),
            target=WebhookTarget(url=url, body={"report": "daily"}),
            retry=RetryPolicy(max_attempts=1),
            state=JobState.SCHEDULED,
            next_run_at=now,
            created_at=now,
            updated_at=now,
        )
    )
    plan = ClaimPlan(
        job_id=job.id,
        expected_fence=job.fence_token,
        expected_next_run_at=now,
        scheduled_for=now,
        coalesced=0,
        new_next_run_at=now + timedelta(minutes=1),
    )
    [fire] = await store.claim([plan], owner="frozen", lease_until=now, now=now)
    return fire


async def test_a_superseded_lease_is_refused_end_to_end(
    store: SqliteStore,
    guarded: tuple[GuardedReceiver, Callable[[], Awaitable[list[tuple[str, int]]]]],
) -> None:
    rx, effects = guarded
    zombie = await lost_fire(store, f"http://127.0.0.1:{rx.port}/hook")
    async with WebhookRunner(policy=LOOPBACK, secrets=[SECRET]) as runner:
        # Another worker takes the expired lease over (a larger fence) and delivers.
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="rescuer"))
        leaser = StoreLeaser(store, SystemClock(), executor, LeaserConfig(node_id="rescuer"))
        assert (await leaser.run_once()).started == 1
        await executor.drain()
        [(fence, decision)] = await rx.wait_for(1)
        assert (fence, decision) == (zombie.fence_token + 1, Decision.ACCEPT)
        # The frozen worker wakes up and sends its request after all: a real signed request
        # with the old fence, which must not be applied.
        late = await runner(zombie)
    assert (late.ok, late.http_status) == (False, 409)
    assert (await rx.wait_for(2))[1] == (zombie.fence_token, Decision.STALE)
    assert await effects() == [(zombie.key, zombie.fence_token + 1)]
    [run] = await store.list_runs(zombie.job_id)
    assert (run.status, run.fence_token) == (RunStatus.SUCCEEDED, zombie.fence_token + 1)
