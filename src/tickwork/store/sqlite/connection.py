"""One sqlite3 connection confined to one thread, and SQLite's error map.

`run(fn)` runs `fn(connection)` on the connection's own thread, so no other coroutine's
statement can interleave with it, and translates sqlite3's errors in this one place:

    driver error                               store error        why
    sqlite3.OperationalError "database is      StoreUnavailable   another process holds the
      locked" / "database is busy"                                write lock past busy_timeout
    sqlite3.OperationalError "unable to open", StoreUnavailable   the file or its directory is
      "disk I/O error"                                            missing, unreadable or failing
    any other sqlite3.Error                    StoreError         the statement was refused
                                                                  (missing schema, constraint)

A failed statement inside a transaction rolls the transaction back before the error leaves.

No cursor leaves the thread either (rows may): a function that returns one is a bug
(`ConfinementError`). Freed on the event loop's thread, the cursor would reset its prepared
statement there while the connection's statement cache has handed the same statement to this
thread's next caller, whose statement SQLite then refuses ("bad parameter or other API misuse").
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from tickwork.errors import StoreError, StoreUnavailable

__all__ = ["ConfinementError", "Connection", "create_private", "immediate", "store_error"]

T = TypeVar("T")


def create_private(path: Path) -> None:
    """Make the database's folder (0700 if this creates it) and an empty database file readable
    by its owner only (0600), before SQLite creates it with the umask's mode: the file holds
    webhook credentials and API key hashes. An existing file or folder keeps its mode."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.close(fd)  # an empty file is an empty SQLite database


BUSY_TIMEOUT_S = 30.0
# Messages of OperationalError that mean "not now" rather than "never": (fragment, what).
_UNAVAILABLE = (
    ("locked", "the database is locked by another writer"),
    ("busy", "the database is busy"),
    ("unable to open", "cannot open the database file"),
    ("disk i/o error", "a disk I/O error"),
)


def store_error(exc: sqlite3.Error, path: Path) -> StoreError:
    """The store error for a sqlite3 error on the database at `path`."""
    if isinstance(exc, sqlite3.OperationalError):
        text = str(exc).lower()
        for fragment, what in _UNAVAILABLE:
            if fragment in text:
                return StoreUnavailable(f"SQLite at {path}: {what} ({exc})")
    return StoreError(f"SQLite error on {path}: {exc}")


class ConfinementError(TypeError):
    """A function run on the connection's thread returned a cursor (module docstring)."""

    def __init__(self) -> None:
        super().__init__(
            "a sqlite3 cursor must not leave its connection's thread: return its rows or its "
            "rowcount, or close it"
        )


def _confined(result: T) -> T:
    """`result`, once it is known to hold no open cursor. A returned cursor is closed here, on
    its own thread, before the error says so."""
    if isinstance(result, sqlite3.Cursor):
        result.close()
        raise ConfinementError()
    return result


class Connection:
    """One sqlite3 connection confined to one thread."""

    def __init__(self, path: Path, *, readonly: bool) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tickwork-sqlite")
        self._path = path
        self._readonly = readonly
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        await self.run(lambda _: None)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._call, fn)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            if self._conn is None:
                self._conn = self._connect()
            return _confined(fn(self._conn))
        except sqlite3.Error as exc:
            if self._conn is not None and self._conn.in_transaction:
                self._conn.rollback()
            raise store_error(exc, self._path) from exc

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode = WAL")
        # FULL: a committed claim survives power loss, not just a process crash.
        conn.execute("PRAGMA synchronous = FULL")
        if self._readonly:
            conn.execute("PRAGMA query_only = ON")
        return conn

    async def close(self) -> None:
        def _close(_: sqlite3.Connection) -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        if self._conn is not None:
            await self.run(_close)
        self._pool.shutdown(wait=True)


def immediate(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run `fn` in one BEGIN IMMEDIATE transaction: the write lock is taken before anything
    is read, so a compare-and-set inside sees no other writer's changes half-way."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = _confined(fn(conn))  # before the commit: such a bug writes nothing
    except BaseException:
        conn.rollback()
        raise
    conn.commit()
    return result
