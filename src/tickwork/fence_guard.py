"""Receiver-side fencing: apply each tickwork occurrence once, never from a superseded lease.

Public through `tickwork.webhooks`. A receiver verifies a request (`verify`), then asks a guard
what to do with it:

    ACCEPT     the occurrence was not applied yet: apply it now
    DUPLICATE  it was applied already, by this lease or a superseded one: answer 2xx, do nothing
    STALE      it was applied already by a newer lease (larger fence): this request comes
               from a superseded lease; refuse it (409), tickwork rejects that lease's outcome

Why per occurrence and not per job: tickwork's fence tokens order the leases of ONE occurrence
(every lease of a run takes a larger one), but the runs of one job do not get increasing
ranges: the next occurrence may be leased with a fence smaller than an earlier occurrence's
retry. Comparing fences across occurrences would refuse legitimate deliveries. A superseded
lease of an older occurrence is still refused: its occurrence was applied by the lease that
superseded it. (Refusing an older occurrence because a newer one was applied is a different
rule, "newest wins", which only some receivers want: compare `scheduled_for` for that.)

Why a later lease of an applied occurrence is a DUPLICATE and not a new write: it carries the
same request, sent again because tickwork did not learn of the first success (a worker died
after the receiver answered, a timeout). Applying it again is the double effect that
idempotency keys exist to prevent.

`applying(...)` records the occurrence only if the block inside it succeeds:

- the SQL stores run the guard's INSERT in a transaction (a savepoint inside the caller's, if
  one is open) that commits when the block ends and rolls back if it raises, so a receiver
  whose effect writes to the same database through the same connection gets both or neither.
  A concurrent delivery of the same occurrence waits on the row until then.
- the in-memory stores hold the occurrence as "in progress" for the block: a concurrent
  delivery of it waits, then sees the outcome.

Pure decision logic is `decide`; the stores are the I/O around it.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import aiosqlite

DEFAULT_TABLE = "tickwork_fences"
DEFAULT_MAX_OCCURRENCES = 100_000
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


class Decision(StrEnum):
    ACCEPT = "accept"
    DUPLICATE = "duplicate"
    STALE = "stale"


class UnfencedDeliveryError(ValueError):
    """The delivery's signed webhook-id carries no fence, so a guard cannot order it."""


class FencedDelivery(Protocol):
    """What a guard reads from a delivery: `tickwork.webhooks.Verified` has both."""

    @property
    def occurrence(self) -> str: ...

    @property
    def fence(self) -> int | None: ...


def decide(applied_fence: int | None, fence: int) -> Decision:
    """What to do with a delivery at `fence`, given the fence its occurrence was applied at."""
    if applied_fence is None:
        return Decision.ACCEPT
    if fence < applied_fence:
        return Decision.STALE
    return Decision.DUPLICATE


def fence_of(delivery: FencedDelivery) -> tuple[str, int]:
    """(occurrence, fence) of a verified delivery; UnfencedDeliveryError if it has no fence."""
    fence = delivery.fence
    if fence is None:
        raise UnfencedDeliveryError(
            f"webhook-id of occurrence {delivery.occurrence[:80]!r} carries no signed fence"
            " ('@f<fence>'): it is a dead-letter alert or comes from a tickwork worker older"
            " than fenced ids; deduplicate it on Verified.occurrence instead"
        )
    return delivery.occurrence, fence


# -- stores -------------------------------------------------------------------------------------


class FenceStore(Protocol):
    def applying(self, occurrence: str, fence: int) -> AbstractContextManager[Decision]:
        """Decide; if ACCEPT, record the occurrence at `fence` when the block succeeds."""
        ...


class AsyncFenceStore(Protocol):
    def applying(self, occurrence: str, fence: int) -> AbstractAsyncContextManager[Decision]:
        """Decide; if ACCEPT, record the occurrence at `fence` when the block succeeds."""
        ...


class _AppliedTable:
    """The in-memory stores' state: applied occurrences (LRU-bounded) and those in progress.

    Not locked itself; the stores call it under their lock."""

    def __init__(self, max_occurrences: int) -> None:
        if max_occurrences < 1:
            raise ValueError(f"max_occurrences: must be at least 1, got {max_occurrences}")
        self._max = max_occurrences
        self._applied: OrderedDict[str, int] = OrderedDict()
        self.in_progress: set[str] = set()

    def begin(self, occurrence: str, fence: int) -> Decision:
        applied = self._applied.get(occurrence)
        if applied is not None:
            self._applied.move_to_end(occurrence)  # still being redelivered: keep it
        decision = decide(applied, fence)
        if decision is Decision.ACCEPT:
            self.in_progress.add(occurrence)
        return decision

    def finish(self, occurrence: str, fence: int, *, succeeded: bool) -> None:
        self.in_progress.discard(occurrence)
        if succeeded:
            self._applied[occurrence] = fence
            if len(self._applied) > self._max:
                self._applied.popitem(last=False)

    def __len__(self) -> int:
        return len(self._applied)


class MemoryFenceStore:
    """In-process, thread-safe store of the `max_occurrences` most recently applied ones.

    A fast path only, like `MemorySeenKeys`: it forgets on restart and is not shared between
    processes, and an occurrence evicted from it is accepted again. Use a SQL store for the
    durable check."""

    def __init__(self, max_occurrences: int = DEFAULT_MAX_OCCURRENCES) -> None:
        self._table = _AppliedTable(max_occurrences)
        self._changed = threading.Condition()

    @contextmanager
    def applying(self, occurrence: str, fence: int) -> Iterator[Decision]:
        with self._changed:
            self._changed.wait_for(lambda: occurrence not in self._table.in_progress)
            decision = self._table.begin(occurrence, fence)
        if decision is not Decision.ACCEPT:
            yield decision
            return
        succeeded = False
        try:
            yield decision
            succeeded = True
        finally:
            with self._changed:
                self._table.finish(occurrence, fence, succeeded=succeeded)
                self._changed.notify_all()

    def __len__(self) -> int:
        return len(self._table)


class AsyncMemoryFenceStore:
    """The asyncio twin of `MemoryFenceStore` (for one event loop; the same limits)."""

    def __init__(self, max_occurrences: int = DEFAULT_MAX_OCCURRENCES) -> None:
        self._table = _AppliedTable(max_occurrences)
        self._changed = asyncio.Condition()

    @asynccontextmanager
    async def applying(self, occurrence: str, fence: int) -> AsyncIterator[Decision]:
        async with self._changed:
            await self._changed.wait_for(lambda: occurrence not in self._table.in_progress)
            decision = self._table.begin(occurrence, fence)
        if decision is not Decision.ACCEPT:
            yield decision
            return
        succeeded = False
        try:
            yield decision
            succeeded = True
        finally:
            # Shielded: a cancelled handler must still release the occurrence for the others.
            await asyncio.shield(self._finish(occurrence, fence, succeeded))

    async def _finish(self, occurrence: str, fence: int, succeeded: bool) -> None:
        async with self._changed:
            self._table.finish(occurrence, fence, succeeded=succeeded)
            self._changed.notify_all()

    def __len__(self) -> int:
        return len(self._table)


def _table_name(table: str) -> str:
    if not _TABLE_NAME.fullmatch(table):
        raise ValueError(
            f"table: {table[:80]!r} is not a plain SQL identifier; use letters, digits and _"
            f" (e.g. {DEFAULT_TABLE!r})"
        )
    return table


class _Sql:
    """The statements, for one table. `?` placeholders; asyncpg's `$n` are derived."""

    def __init__(self, table: str) -> None:
        self.table = _table_name(table)
        self.create = (
            f"CREATE TABLE IF NOT EXISTS {self.table} ("
            " occurrence TEXT PRIMARY KEY, fence BIGINT NOT NULL,"
            " applied_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP)"
        )
        # One atomic statement decides who applies: among concurrent deliveries, the one whose
        # row commits first; the others wait on the row, then find it.
        self.insert = (
            f"INSERT INTO {self.table} (occurrence, fence) VALUES (?, ?)"
            " ON CONFLICT (occurrence) DO NOTHING"
        )
        self.select = f"SELECT fence FROM {self.table} WHERE occurrence = ?"

    def numbered(self, statement: str) -> str:
        count = 0

        def number(_: re.Match[str]) -> str:
            nonlocal count
            count += 1
            return f"${count}"

        return re.sub(r"\?", number, statement)


class SqliteFenceStore:
    """A durable store in a SQLite database, through a `sqlite3.Connection` of the caller's.

    Creates its table if missing. `applying` runs in a savepoint: inside the connection's open
    transaction if there is one (the caller commits), else as its own transaction that commits
    when the block ends. Do the effect through the same connection inside the block and both
    commit together. Use one connection per thread (sqlite3's rule); deliveries on other
    connections wait for the lock up to the connection's `timeout`.
    """

    def __init__(self, connection: sqlite3.Connection, *, table: str = DEFAULT_TABLE) -> None:
        self._conn = connection
        self._sql = _Sql(table)
        self._savepoint = f"{self._sql.table}_guard"
        connection.execute(self._sql.create)
        if not connection.in_transaction:
            connection.commit()

    @contextmanager
    def applying(self, occurrence: str, fence: int) -> Iterator[Decision]:
        conn = self._conn
        conn.execute(f"SAVEPOINT {self._savepoint}")
        try:
            inserted = conn.execute(self._sql.insert, (occurrence, fence)).rowcount == 1
            decision = Decision.ACCEPT if inserted else decide(self._applied(occurrence), fence)
            yield decision
        except BaseException:
            conn.execute(f"ROLLBACK TO {self._savepoint}")
            conn.execute(f"RELEASE {self._savepoint}")
            raise
        conn.execute(f"RELEASE {self._savepoint}")

    def _applied(self, occurrence: str) -> int | None:
        row = self._conn.execute(self._sql.select, (occurrence,)).fetchone()
        return None if row is None else int(row[0])


class AiosqliteFenceStore:
    """`SqliteFenceStore` for asyncio, over an `aiosqlite.Connection` of the caller's.

    Create it with `await AiosqliteFenceStore.create(connection)` (that creates the table)."""

    def __init__(self, connection: aiosqlite.Connection, *, table: str = DEFAULT_TABLE) -> None:
        self._conn = connection
        self._sql = _Sql(table)
        self._savepoint = f"{self._sql.table}_guard"

    @classmethod
    async def create(
        cls, connection: aiosqlite.Connection, *, table: str = DEFAULT_TABLE
    ) -> AiosqliteFenceStore:
        store = cls(connection, table=table)
        await connection.execute(store._sql.create)
        if not connection.in_transaction:
            await connection.commit()
        return store

    @asynccontextmanager
    async def applying(self, occurrence: str, fence: int) -> AsyncIterator[Decision]:
        conn = self._conn
        await conn.execute(f"SAVEPOINT {self._savepoint}")
        try:
            cursor = await conn.execute(self._sql.insert, (occurrence, fence))
            if cursor.rowcount == 1:
                decision = Decision.ACCEPT
            else:
                row = await (await conn.execute(self._sql.select, (occurrence,))).fetchone()
                decision = decide(None if row is None else int(row[0]), fence)
            yield decision
        except BaseException:
            await asyncio.shield(self._undo(conn))
            raise
        await conn.execute(f"RELEASE {self._savepoint}")

    async def _undo(self, conn: aiosqlite.Connection) -> None:
        await conn.execute(f"ROLLBACK TO {self._savepoint}")
        await conn.execute(f"RELEASE {self._savepoint}")


class AsyncpgFenceStore:
    """A durable store in PostgreSQL, over an `asyncpg` connection of the caller's.

    Create it with `await AsyncpgFenceStore.create(connection)` (that creates the table).
    `applying` runs in `connection.transaction()`, which is a savepoint inside the caller's
    transaction if one is open. Needs READ COMMITTED (PostgreSQL's default): a delivery that
    waited on a concurrent one's row must see that row once it commits.
    """

    def __init__(self, connection: Any, *, table: str = DEFAULT_TABLE) -> None:
        # Any: asyncpg.Connection, or a pool's connection proxy; both have the same methods.
        self._conn = connection
        sql = _Sql(table)
        self._create = sql.create.replace("TIMESTAMP NOT NULL", "TIMESTAMPTZ NOT NULL")
        self._insert = sql.numbered(sql.insert)
        self._select = sql.numbered(sql.select)

    @classmethod
    async def create(cls, connection: Any, *, table: str = DEFAULT_TABLE) -> AsyncpgFenceStore:
        store = cls(connection, table=table)
        # Serialised: two receivers creating the table at once would collide in the catalog.
        async with connection.transaction():
            await connection.execute("SELECT pg_advisory_xact_lock(hashtext($1))", table)
            await connection.execute(store._create)
        return store

    @asynccontextmanager
    async def applying(self, occurrence: str, fence: int) -> AsyncIterator[Decision]:
        async with self._conn.transaction():
            status: str = await self._conn.execute(self._insert, occurrence, fence)
            if status.endswith(" 1"):  # "INSERT 0 1": the row is ours
                decision = Decision.ACCEPT
            else:
                applied = await self._conn.fetchval(self._select, occurrence)
                decision = decide(None if applied is None else int(applied), fence)
            yield decision


# -- guards -------------------------------------------------------------------------------------


class FenceGuard:
    """Decides what a receiver does with a verified tickwork delivery; see the module doc.

    `check(hook)` decides and records at once (for a SQL store inside the caller's open
    transaction, it commits with it). `applying(hook)` records only if the block succeeds.
    """

    def __init__(self, store: FenceStore) -> None:
        self._store = store

    def check(self, delivery: FencedDelivery) -> Decision:
        with self._store.applying(*fence_of(delivery)) as decision:
            return decision

    def applying(self, delivery: FencedDelivery) -> AbstractContextManager[Decision]:
        return self._store.applying(*fence_of(delivery))


class AsyncFenceGuard:
    """The asyncio twin of `FenceGuard`, over an `AsyncFenceStore`."""

    def __init__(self, store: AsyncFenceStore) -> None:
        self._store = store

    async def check(self, delivery: FencedDelivery) -> Decision:
        async with self._store.applying(*fence_of(delivery)) as decision:
            return decision

    def applying(self, delivery: FencedDelivery) -> AbstractAsyncContextManager[Decision]:
        return self._store.applying(*fence_of(delivery))
