"""No sqlite3 cursor leaves its connection's thread (store/sqlite/connection.py): freed on the
event loop's thread, it reset a prepared statement the writer thread was reusing, and SQLite
refused that thread's next statement ("bad parameter or other API misuse")."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tickwork.store.sqlite.connection import ConfinementError, Connection, immediate


@pytest.fixture
async def conn(tmp_path: Path) -> AsyncIterator[Connection]:
    connection = Connection(tmp_path / "t.db", readonly=False)
    await connection.open()
    await connection.run(lambda c: c.execute("CREATE TABLE t (a INTEGER)").close())
    yield connection
    await connection.close()


async def count(conn: Connection) -> int:
    found: int = await conn.run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0])
    return found


async def test_a_write_that_returns_its_cursor_fails_and_writes_nothing(conn: Connection) -> None:
    def insert(c: sqlite3.Connection) -> sqlite3.Cursor:
        return c.execute("INSERT INTO t VALUES (1)")

    with pytest.raises(ConfinementError, match="must not leave"):
        await conn.run(lambda c: immediate(c, insert))
    assert await count(conn) == 0  # rolled back, not committed


async def test_a_read_that_returns_its_cursor_fails(conn: Connection) -> None:
    with pytest.raises(ConfinementError):
        await conn.run(lambda c: c.execute("SELECT a FROM t"))


async def test_rows_and_counts_come_back(conn: Connection) -> None:
    def insert(c: sqlite3.Connection) -> int:
        return c.executemany("INSERT INTO t VALUES (?)", [(1,), (2,)]).rowcount

    assert await conn.run(lambda c: immediate(c, insert)) == 2
    rows = await conn.run(lambda c: c.execute("SELECT a FROM t ORDER BY a").fetchall())
    assert [tuple(r) for r in rows] == [(1,), (2,)]
