"""The bench's side of the shared PostgreSQL server: throwaway databases and counters.

The server itself is never stopped or reconfigured; every database the bench creates is named
`tw_bench_<run id>_<purpose>` and dropped when the bench ends (WITH (FORCE)).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from bench.meter import Attribution

SETTINGS = (
    "shared_buffers", "work_mem", "synchronous_commit", "fsync", "max_wal_size",
    "checkpoint_timeout", "autovacuum", "jit", "max_connections", "plan_cache_mode",
)  # fmt: skip
COUNTERS = (
    "xact_commit", "xact_rollback", "tup_returned", "tup_fetched", "tup_inserted",
    "tup_updated", "tup_deleted", "blks_read", "blks_hit",
)  # fmt: skip


def dsn_for(admin_dsn: str, dbname: str) -> str:
    parts = urlsplit(admin_dsn)
    return urlunsplit(parts._replace(path="/" + dbname))


# Set to an ICU locale (e.g. en-US) to create every benchmark database with it as its default
# collation instead of the server's.
ICU_LOCALE_ENV = "TICKWORK_BENCH_ICU_LOCALE"


class Admin:
    """One connection to the admin database; creates, copies and drops bench databases."""

    def __init__(self, admin_dsn: str, run_id: str) -> None:
        self.admin_dsn = admin_dsn
        self.prefix = f"tw_bench_{run_id}"
        self.created: list[str] = []
        self._conn: asyncpg.Connection | None = None

    @property
    def conn(self) -> asyncpg.Connection:
        if self._conn is None:
            raise RuntimeError("Admin used before open()")
        return self._conn

    async def open(self) -> None:
        self._conn = await asyncpg.connect(self.admin_dsn)

    async def close(self) -> None:
        for name in list(self.created):
            await self.drop(name)
        if self._conn is not None:
            await self._conn.close()

    async def create(self, purpose: str, *, template: str | None = None) -> str:
        """Create database `<prefix>_<purpose>` (a file copy of `template` if given)."""
        name = f"{self.prefix}_{purpose}"
        await self.drop(name)
        clause = f" TEMPLATE {template} STRATEGY FILE_COPY" if template else ""
        icu = os.environ.get(ICU_LOCALE_ENV)
        if icu and not template:
            # A database whose text compares like most production ones (a linguistic
            # collation), rather than this server's C.UTF-8 (ADR 0031's measurement).
            clause = f" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE '{icu}'"
        await self.conn.execute(f"CREATE DATABASE {name}{clause}")
        self.created.append(name)
        return name

    async def drop(self, name: str) -> None:
        await self.conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if name in self.created:
            self.created.remove(name)

    def dsn(self, name: str) -> str:
        return dsn_for(self.admin_dsn, name)

    async def backend_pid(self) -> int:
        return int(await self.conn.fetchval("SELECT pg_backend_pid()"))

    async def postmaster_pid(self) -> int | None:
        return _parent_pid(await self.backend_pid())

    async def server_facts(self) -> dict[str, Any]:
        rows = await self.conn.fetch(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1::text[])",
            list(SETTINGS),
        )
        settings = {r["name"]: r["setting"] + (r["unit"] or "") for r in rows}
        version = await self.conn.fetchval("SHOW server_version")
        return {"version": version, "settings": settings}

    async def counters(self, name: str, *, settle_s: float = 0.5) -> dict[str, int]:
        """pg_stat_database counters of one database, once its sessions have ended.

        Backends report their counters when they exit (or at most once a second while idle),
        so close the connections being counted first; this waits until none is left.
        """
        for _ in range(40):
            await asyncio.sleep(settle_s / 5)
            await self.conn.execute("SELECT pg_stat_clear_snapshot()")
            row = await self.conn.fetchrow(
                f"SELECT numbackends, {', '.join(COUNTERS)} FROM pg_stat_database "
                "WHERE datname = $1",
                name,
            )
            if row is not None and row["numbackends"] == 0:
                break
        await asyncio.sleep(settle_s)
        await self.conn.execute("SELECT pg_stat_clear_snapshot()")
        row = await self.conn.fetchrow(
            f"SELECT {', '.join(COUNTERS)} FROM pg_stat_database WHERE datname = $1", name
        )
        return {k: int(row[k]) for k in COUNTERS} if row else {}

    async def statement_times(self, name: str) -> dict[int, StatementTime] | None:
        """PostgreSQL's own time per statement in database `name` so far (pg_stat_statements),
        or None when the server does not keep it (the extension must be preloaded, as on the
        cluster `python -m bench.one_burst --pg-statements` starts; the shared server does not)."""
        try:
            rows = await self.conn.fetch(
                "SELECT s.queryid, s.query, s.calls, s.total_exec_time, s.rows"
                " FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
                " WHERE d.datname = $1",
                name,
            )
        except (asyncpg.UndefinedTableError, asyncpg.ObjectNotInPrerequisiteStateError):
            return None
        return {
            r["queryid"]: StatementTime(r["query"], r["calls"], r["total_exec_time"], r["rows"])
            for r in rows
        }


@dataclass(frozen=True)
class StatementTime:
    query: str
    calls: int
    total_ms: float
    rows: int


def time_by_statement(
    after: dict[int, StatementTime] | None,
    before: dict[int, StatementTime] | None,
    fires: int,
    *,
    most: int = 10,
) -> list[dict[str, Any]]:
    """What each statement cost between two snapshots, in µs of PostgreSQL execution time per
    fire, the costliest first: where the server's share of a fire goes (issue 22)."""
    if after is None or before is None or fires <= 0:
        return []
    spent = []
    for key, now in after.items():
        was = before.get(key, StatementTime(now.query, 0, 0.0, 0))
        calls, ms = now.calls - was.calls, now.total_ms - was.total_ms
        if calls > 0:
            spent.append({
                "us_per_fire": round(ms * 1000 / fires, 1),
                "calls": calls,
                "rows": now.rows - was.rows,
                "statement": " ".join(now.query.split())[:90],
            })  # fmt: skip
    spent.sort(key=lambda s: -float(s["us_per_fire"]))
    return spent[:most]


def _parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # the server is not on this machine (or not visible)
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


async def attribution_of(admin: Admin) -> Attribution:
    """Which processes are the bench's own: this driver, the server's postmaster, the admin
    connection's backend and the backends of databases named with the admin's prefix."""
    return Attribution(
        driver_pid=os.getpid(),
        postmaster_pid=await admin.postmaster_pid(),
        db_marker=admin.prefix,
        own_backends={await admin.backend_pid()},
    )
