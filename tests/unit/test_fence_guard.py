"""FenceGuard (tickwork.webhooks): the decision, the in-memory stores and the SQLite stores,
on real database files, with real threads and tasks racing each other."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import aiosqlite
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.webhooks import (
    AiosqliteFenceStore,
    AsyncFenceGuard,
    AsyncMemoryFenceStore,
    Decision,
    FenceGuard,
    MemoryFenceStore,
    SqliteFenceStore,
    UnfencedDeliveryError,
    Verified,
    WebhookVerificationError,
    fenced_id,
    generate_secret,
    parse_webhook_id,
    signature_headers,
    verify,
)

SECRET = generate_secret()
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OCC = "0192f3c1d2a87f3e9c1b2a3d4e5f6a7b:1772366400000"
OTHER = "0192f3c1d2a87f3e9c1b2a3d4e5f6a7b:1772366460000"


def delivery(occurrence: str = OCC, fence: int | None = 5) -> Verified:
    """A verified delivery, through the real signer and verifier."""
    msg_id = occurrence if fence is None else fenced_id(occurrence, fence)
    body = b'{"n": 1}'
    headers = signature_headers(
        msg_id=msg_id, timestamp=int(NOW.timestamp()), body=body, secrets=[SECRET]
    )
    return verify(headers=headers, body=body, secrets=[SECRET], now=NOW)


class Boom(Exception):
    """The receiver's effect failed."""


# -- the decision, on every store ---------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def guard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FenceGuard]:
    if request.param == "memory":
        yield FenceGuard(MemoryFenceStore())
        return
    conn = sqlite3.connect(tmp_path / "fences.db")
    try:
        yield FenceGuard(SqliteFenceStore(conn))
    finally:
        conn.close()


def test_first_delivery_is_accepted_and_a_repeat_is_a_duplicate(guard: FenceGuard) -> None:
    assert guard.check(delivery(fence=5)) is Decision.ACCEPT
    assert guard.check(delivery(fence=5)) is Decision.DUPLICATE


def test_a_later_lease_of_an_applied_occurrence_is_a_duplicate(guard: FenceGuard) -> None:
    # Sent again because tickwork never learnt of the first success: applying it again would
    # be the double effect.
    assert guard.check(delivery(fence=5)) is Decision.ACCEPT
    assert guard.check(delivery(fence=9)) is Decision.DUPLICATE


def test_a_superseded_lease_arriving_late_is_stale(guard: FenceGuard) -> None:
    assert guard.check(delivery(fence=7)) is Decision.ACCEPT  # the lease that took over
    assert guard.check(delivery(fence=6)) is Decision.STALE  # the zombie, late


def test_occurrences_are_judged_apart(guard: FenceGuard) -> None:
    # Fences of different occurrences of one job are not ordered: the next occurrence's first
    # lease may carry a smaller fence than an earlier occurrence's retry.
    assert guard.check(delivery(OCC, fence=12)) is Decision.ACCEPT
    assert guard.check(delivery(OTHER, fence=8)) is Decision.ACCEPT


def fail_inside(guard: FenceGuard, hook: Verified) -> None:
    with guard.applying(hook) as decision:
        assert decision is Decision.ACCEPT
        raise Boom


def test_a_failed_effect_records_nothing(guard: FenceGuard) -> None:
    with pytest.raises(Boom):
        fail_inside(guard, delivery(fence=5))
    # tickwork's retry (a new lease) is applied, and then only duplicates.
    with guard.applying(delivery(fence=6)) as decision:
        assert decision is Decision.ACCEPT
    assert guard.check(delivery(fence=6)) is Decision.DUPLICATE
    assert guard.check(delivery(fence=5)) is Decision.STALE


def test_a_delivery_without_a_signed_fence_is_refused_with_the_way_out(guard: FenceGuard) -> None:
    with pytest.raises(UnfencedDeliveryError, match=r"deduplicate it on Verified\.occurrence"):
        guard.check(delivery(fence=None))


# -- the in-memory store ------------------------------------------------------------------------


def test_memory_store_is_bounded_and_forgets_the_least_recent() -> None:
    store = MemoryFenceStore(max_occurrences=2)
    guard = FenceGuard(store)
    for n in range(3):
        assert guard.check(delivery(f"j:{n}", 1)) is Decision.ACCEPT
    assert len(store) == 2
    assert guard.check(delivery("j:2", 1)) is Decision.DUPLICATE
    assert guard.check(delivery("j:0", 1)) is Decision.ACCEPT  # evicted: a fast path only


@pytest.mark.parametrize("store", [MemoryFenceStore, AsyncMemoryFenceStore])
def test_memory_store_refuses_a_zero_bound(store: type[MemoryFenceStore]) -> None:
    with pytest.raises(ValueError, match="max_occurrences: must be at least 1"):
        store(max_occurrences=0)


def test_memory_store_makes_a_concurrent_delivery_wait_for_the_outcome() -> None:
    guard = FenceGuard(MemoryFenceStore())
    inside = threading.Event()
    finish = threading.Event()
    seen: list[Decision] = []

    def first() -> None:
        with guard.applying(delivery(fence=5)) as decision:
            seen.append(decision)
            inside.set()
            finish.wait(10)

    def second() -> None:
        seen.append(guard.check(delivery(fence=6)))

    a = threading.Thread(target=first)
    a.start()
    assert inside.wait(10)
    b = threading.Thread(target=second)
    b.start()
    b.join(0.2)
    assert b.is_alive()  # waiting on the occurrence in progress, not answering DUPLICATE yet
    finish.set()
    a.join(10)
    b.join(10)
    assert seen == [Decision.ACCEPT, Decision.DUPLICATE]


# -- races: exactly one ACCEPT ------------------------------------------------------------------


RACERS = 8


def race_threads(check: list[FenceGuard]) -> list[Decision]:
    """Every guard checks the same delivery at once, from its own thread."""
    start = threading.Barrier(len(check))
    results: list[Decision] = []
    lock = threading.Lock()

    def run(guard: FenceGuard, fence: int) -> None:
        start.wait(10)
        decision = guard.check(delivery(fence=fence))
        with lock:
            results.append(decision)

    threads = [threading.Thread(target=run, args=(g, 5 + n % 2)) for n, g in enumerate(check)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_threads_racing_on_one_memory_store_accept_once() -> None:
    guard = FenceGuard(MemoryFenceStore())
    results = race_threads([guard] * RACERS)
    assert len(results) == RACERS
    assert results.count(Decision.ACCEPT) == 1


def test_threads_racing_on_one_sqlite_file_accept_once(tmp_path: Path) -> None:
    # One connection per thread (sqlite3's rule), all on the same file.
    conns = [
        sqlite3.connect(tmp_path / "fences.db", timeout=30, check_same_thread=False)
        for _ in range(RACERS)
    ]
    try:
        results = race_threads([FenceGuard(SqliteFenceStore(c)) for c in conns])
    finally:
        for conn in conns:
            conn.close()
    assert len(results) == RACERS
    assert results.count(Decision.ACCEPT) == 1


# -- SQLite: the same transaction as the effect -------------------------------------------------


def effect_table(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS reports (occurrence TEXT, n INTEGER)")
    conn.commit()


def test_sqlite_effect_and_fence_commit_together(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    effect_table(conn)
    guard = FenceGuard(SqliteFenceStore(conn))
    hook = delivery(fence=5)
    with guard.applying(hook) as decision:
        assert decision is Decision.ACCEPT
        conn.execute("INSERT INTO reports VALUES (?, 1)", (hook.occurrence,))
    conn.close()
    # Another connection (another process) sees both: the block committed them.
    other = sqlite3.connect(path)
    assert other.execute("SELECT occurrence, n FROM reports").fetchall() == [(OCC, 1)]
    assert FenceGuard(SqliteFenceStore(other)).check(hook) is Decision.DUPLICATE
    other.close()


def test_sqlite_failed_effect_rolls_back_both(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "app.db")
    effect_table(conn)
    guard = FenceGuard(SqliteFenceStore(conn))

    def failing_effect() -> None:
        with guard.applying(delivery(fence=5)):
            conn.execute("INSERT INTO reports VALUES (?, 1)", (OCC,))
            raise Boom

    with pytest.raises(Boom):
        failing_effect()
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM reports").fetchone() == (0,)
    assert guard.check(delivery(fence=6)) is Decision.ACCEPT
    conn.close()


def test_sqlite_check_joins_the_callers_open_transaction(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "app.db")
    effect_table(conn)
    guard = FenceGuard(SqliteFenceStore(conn))
    conn.execute("INSERT INTO reports VALUES (?, 1)", (OCC,))  # opens the transaction
    assert guard.check(delivery(fence=5)) is Decision.ACCEPT
    assert conn.in_transaction  # the guard did not commit the caller's transaction
    conn.rollback()
    assert guard.check(delivery(fence=5)) is Decision.ACCEPT  # rolled back with it
    conn.close()


@pytest.mark.parametrize("table", ["fences; DROP TABLE reports", "1abc", "", "a" * 64])
def test_sqlite_store_refuses_a_table_name_that_is_not_an_identifier(table: str) -> None:
    with pytest.raises(ValueError, match=r"table: .* is not a plain SQL identifier"):
        SqliteFenceStore(sqlite3.connect(":memory:"), table=table)


def test_sqlite_store_keeps_to_its_table(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "app.db")
    a = FenceGuard(SqliteFenceStore(conn, table="fences_a"))
    b = FenceGuard(SqliteFenceStore(conn, table="fences_b"))
    assert a.check(delivery(fence=5)) is Decision.ACCEPT
    assert b.check(delivery(fence=5)) is Decision.ACCEPT
    conn.close()


# -- async: the in-memory and aiosqlite stores --------------------------------------------------


@pytest.fixture(params=["memory", "aiosqlite"])
async def async_guard(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[AsyncFenceGuard]:
    if request.param == "memory":
        yield AsyncFenceGuard(AsyncMemoryFenceStore())
        return
    async with aiosqlite.connect(tmp_path / "fences.db") as conn:
        yield AsyncFenceGuard(await AiosqliteFenceStore.create(conn))


async def test_async_guard_decides_like_the_sync_one(async_guard: AsyncFenceGuard) -> None:
    assert await async_guard.check(delivery(fence=7)) is Decision.ACCEPT
    assert await async_guard.check(delivery(fence=7)) is Decision.DUPLICATE
    assert await async_guard.check(delivery(fence=9)) is Decision.DUPLICATE
    assert await async_guard.check(delivery(fence=6)) is Decision.STALE
    assert await async_guard.check(delivery(OTHER, fence=1)) is Decision.ACCEPT


async def test_async_failed_effect_records_nothing(async_guard: AsyncFenceGuard) -> None:
    async def failing_effect() -> None:
        async with async_guard.applying(delivery(fence=5)) as decision:
            assert decision is Decision.ACCEPT
            raise Boom

    with pytest.raises(Boom):
        await failing_effect()
    assert await async_guard.check(delivery(fence=6)) is Decision.ACCEPT


async def test_async_unfenced_delivery_is_refused(async_guard: AsyncFenceGuard) -> None:
    with pytest.raises(UnfencedDeliveryError):
        await async_guard.check(delivery(fence=None))


async def test_tasks_racing_on_the_async_memory_store_accept_once() -> None:
    guard = AsyncFenceGuard(AsyncMemoryFenceStore())
    gate = asyncio.Event()

    async def deliver(fence: int) -> Decision:
        async with guard.applying(delivery(fence=fence)) as decision:
            await gate.wait()  # everyone is inside or waiting before anyone finishes
            return decision

    tasks = [asyncio.create_task(deliver(5 + n % 2)) for n in range(RACERS)]
    await asyncio.sleep(0)
    gate.set()
    results = await asyncio.gather(*tasks)
    assert results.count(Decision.ACCEPT) == 1
    assert set(results) <= {Decision.ACCEPT, Decision.DUPLICATE, Decision.STALE}


async def test_a_cancelled_handler_releases_the_occurrence() -> None:
    guard = AsyncFenceGuard(AsyncMemoryFenceStore())
    inside = asyncio.Event()

    async def hang() -> None:
        async with guard.applying(delivery(fence=5)):
            inside.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(hang())
    await inside.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    async with asyncio.timeout(5):  # not stuck behind the cancelled one
        assert await guard.check(delivery(fence=6)) is Decision.ACCEPT


async def test_connections_racing_on_one_aiosqlite_file_accept_once(tmp_path: Path) -> None:
    path = tmp_path / "fences.db"
    async with aiosqlite.connect(path) as setup:
        await AiosqliteFenceStore.create(setup)
    conns = [await aiosqlite.connect(path, timeout=30) for _ in range(RACERS)]
    try:
        guards = [AsyncFenceGuard(AiosqliteFenceStore(c)) for c in conns]
        results = await asyncio.gather(
            *(g.check(delivery(fence=5 + n % 2)) for n, g in enumerate(guards))
        )
    finally:
        for conn in conns:
            await conn.close()
    assert results.count(Decision.ACCEPT) == 1


# -- the id parser and verify never crash -------------------------------------------------------


@given(st.text(max_size=60))
def test_parse_webhook_id_never_crashes(msg_id: str) -> None:
    occurrence, fence = parse_webhook_id(msg_id)
    assert fence is None or (fence >= 0 and fenced_id(occurrence, fence) == msg_id)
    assert fence is not None or occurrence == msg_id


fence_tails = st.sampled_from(["", "@f", "@f0", "@f41", "@f-1", "@f" + "9" * 25, "@fx", "@@f3"])


@given(
    key=st.text(min_size=1, max_size=30),
    tail=fence_tails,
    header=st.none() | st.text(max_size=25) | st.integers(0, 10**20).map(str),
    body=st.binary(max_size=64),
)
def test_verify_with_any_id_and_fence_header_verifies_or_says_why(
    key: str, tail: str, header: str | None, body: bytes
) -> None:
    msg_id = (key + tail).strip()
    if not msg_id:
        return
    headers = signature_headers(
        msg_id=msg_id, timestamp=int(NOW.timestamp()), body=body, secrets=[SECRET]
    )
    if header is not None:
        headers["tickwork-fence"] = header
    reason: str | None
    try:
        got = verify(headers=headers, body=body, secrets=[SECRET], now=NOW)
    except WebhookVerificationError as error:
        reason = error.reason
    else:
        reason = None
    if reason is not None:
        assert reason.strip()
        return
    assert (got.occurrence, got.fence) == parse_webhook_id(msg_id)
    if got.fence is not None and header is not None:
        assert int(header) == got.fence  # a disagreeing header never gets through
