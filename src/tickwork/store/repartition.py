"""Change P, the number of partitions of a database, while no tickwork process runs.

    repartition(url, partitions) -> Repartitioned

In one transaction, under the same lock as a migration (so two of these, or one and an upgrade,
never interleave): refuse while any scheduler or worker is still announced (every process reads
P once, at start, and one still running would put new jobs in the old partitions); set P in
`tw_meta`; recompute every job's partition (`domain.partitions.partition_of`); and replace the
lease rows with 0..P-1, each at the highest epoch any old row had, so that the first owner of a
new partition takes it at a higher epoch than any claim made before (a claim under an old epoch
can never match). Then start the processes again.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

import asyncpg

from tickwork.domain.partitions import check_partitions, partition_of
from tickwork.errors import Conflict, InvalidInput, StoreError
from tickwork.settings import sqlite_path
from tickwork.store.migrate import MIGRATE_LOCK_KEY
from tickwork.store.postgres.connect import asyncpg_dsn
from tickwork.store.postgres.errors import translated

__all__ = ["Repartitioned", "repartition"]

BATCH = 10_000  # job ids read and rewritten per round trip

# The same as migration 0005's: the last 8 hex digits, modulo P, for ids that end in them.
PG_HEX_PARTITION = """
UPDATE tw_jobs SET partition = (('x' || right(id, 8))::bit(32)::bigint & 4294967295) % $1
WHERE right(id, 8) ~ '^[0-9a-fA-F]{8}$'
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Repartitioned:
    before: int  # P before
    after: int  # P now
    jobs: int  # jobs whose partition was recomputed
    epoch: int  # every new lease row starts at this epoch


async def repartition(url: str, partitions: int) -> Repartitioned:
    """Set P to `partitions` (see the module docstring). Raises InvalidInput for a bad count,
    Conflict while a scheduler or worker is announced, StoreError when the store fails."""
    try:
        check_partitions(partitions)
    except ValueError as exc:
        raise InvalidInput("partitions", str(exc)) from None
    path = sqlite_path(url)
    if path is not None:
        return _sqlite(str(path), partitions)
    return await _postgres(url, partitions)


async def _postgres(url: str, partitions: int) -> Repartitioned:
    with translated("repartitioning"):
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATE_LOCK_KEY)
                await conn.execute("LOCK TABLE tw_partition_leases IN EXCLUSIVE MODE")
                _refuse_running(await conn.fetch(_LIVE_NODES))
                before = int(
                    await conn.fetchval("SELECT value FROM tw_meta WHERE key = 'partitions'")
                )
                await conn.execute(PG_HEX_PARTITION, partitions)
                others = await conn.fetch(
                    "SELECT id FROM tw_jobs WHERE right(id, 8) !~ '^[0-9a-fA-F]{8}$'"
                )
                await conn.executemany(
                    "UPDATE tw_jobs SET partition = $1 WHERE id = $2",
                    [(partition_of(r["id"], partitions), r["id"]) for r in others],
                )
                jobs = int(await conn.fetchval("SELECT count(*) FROM tw_jobs"))
                epoch = await _new_leases_pg(conn, partitions)
                await conn.execute(
                    "UPDATE tw_meta SET value = $1 WHERE key = 'partitions'", str(partitions)
                )
        finally:
            await conn.close()
    return Repartitioned(before=before, after=partitions, jobs=jobs, epoch=epoch)


async def _new_leases_pg(conn: asyncpg.Connection, partitions: int) -> int:
    epoch = int(await conn.fetchval("SELECT coalesce(max(epoch), 0) FROM tw_partition_leases"))
    await conn.execute("DELETE FROM tw_partition_leases")
    await conn.execute(
        "INSERT INTO tw_partition_leases (partition, epoch) SELECT generate_series(0, $1), $2",
        partitions - 1,
        epoch,
    )
    return epoch


def _sqlite(path: str, partitions: int) -> Repartitioned:
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open {path}: {exc}") from exc
    try:
        conn.execute("BEGIN EXCLUSIVE")
        try:
            done = _sqlite_locked(conn, partitions)
        except BaseException:
            conn.rollback()
            raise
        conn.commit()
        return done
    except sqlite3.Error as exc:
        raise StoreError(f"repartitioning {path} failed: {exc}") from exc
    finally:
        conn.close()


def _sqlite_locked(conn: sqlite3.Connection, partitions: int) -> Repartitioned:
    _refuse_running(conn.execute(_LIVE_NODES_SQLITE).fetchall())
    (before,) = conn.execute("SELECT value FROM tw_meta WHERE key = 'partitions'").fetchone()
    ids = [row[0] for row in conn.execute("SELECT id FROM tw_jobs")]
    conn.executemany(
        "UPDATE tw_jobs SET partition = ? WHERE id = ?",
        [(partition_of(job_id, partitions), job_id) for job_id in ids],
    )
    (epoch,) = conn.execute("SELECT coalesce(max(epoch), 0) FROM tw_partition_leases").fetchone()
    conn.execute("DELETE FROM tw_partition_leases")
    conn.executemany(
        "INSERT INTO tw_partition_leases (partition, epoch) VALUES (?, ?)",
        [(p, epoch) for p in range(partitions)],
    )
    conn.execute("UPDATE tw_meta SET value = ? WHERE key = 'partitions'", (str(partitions),))
    return Repartitioned(before=int(before), after=partitions, jobs=len(ids), epoch=int(epoch))


_LIVE_NODES = """
SELECT id, role FROM tw_nodes
WHERE expires_us > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint ORDER BY id
"""
_LIVE_NODES_SQLITE = """
SELECT id, role FROM tw_nodes
WHERE expires_us > CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) ORDER BY id
"""


def _refuse_running(nodes: list[asyncpg.Record] | list[tuple[str, str]]) -> None:
    if nodes:
        running = ", ".join(f"{row[1]} {row[0]}" for row in nodes)
        raise Conflict(
            f"tickwork processes are still running ({running}): stop every scheduler, worker "
            "and API process first (a stopped one's heartbeat ends within its lease TTL), "
            "repartition, then start them again"
        )
