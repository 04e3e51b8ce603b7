"""PostgreSQL upkeep of tw_attempts' daily partitions (ADR 0007): apply `plan_partitions`.

One transaction per call, in this order, so that concurrent inserts never fail and never
deadlock with it:

1. `pg_try_advisory_xact_lock`: one process maintains at a time; the others skip (they would
   only find the same plan done). Released by the commit, or by the server if we die.
2. Read the partitions from the catalog and plan under that lock, so the plan is current.
3. Lock the parent table first, then DEFAULT: the same order as an insert (parent, then the
   partition its row routes to), so maintenance and `finish_runs` cannot deadlock. The parent
   takes SHARE UPDATE EXCLUSIVE (what ATTACH needs; inserts go on) or, when a partition is to
   be dropped, ACCESS EXCLUSIVE (DETACH and DROP need it; inserts wait for this short
   transaction). `lock_timeout` bounds the wait: if a long query holds the table, we give up
   this pass instead of queueing every insert behind our lock request.
4. Create each missing day as a plain table, move that day's rows out of DEFAULT into it, and
   ATTACH it. `CREATE TABLE ... PARTITION OF` would fail as soon as DEFAULT holds a row of that
   day (late or back-dated attempts, or the first run after migration 0004, when DEFAULT holds
   all the history), and it takes ACCESS EXCLUSIVE on the parent; create + move + attach works
   whatever DEFAULT holds, takes the weaker lock, and since DEFAULT stays locked from the move
   to the attach, no row of that day can slip into DEFAULT in between.
5. For each expired partition: DETACH it, copy the attempts of dead-lettered runs back into
   tw_attempts (no partition covers that range any more, so they land in DEFAULT, where
   prune_history deletes them once the run is redriven or purged), DROP it. Dropping a table is
   O(1) and leaves no dead tuples to vacuum, which is the point of partitioning.
"""

from __future__ import annotations

import hashlib
import logging
import re
from datetime import datetime, timedelta

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tickwork.clock import to_us
from tickwork.domain.history_partitions import Partition, PartitionPlan, plan_partitions
from tickwork.store.base import HistoryMaintenance
from tickwork.store.sql import statements as sql

log = logging.getLogger("tickwork.store.postgres")

Conn = asyncpg.Connection | PoolConnectionProxy  # a plain connection, or one from the pool

TABLE = "tw_attempts"
DEFAULT_PARTITION = "tw_attempts_default"
# A fixed signed 64-bit key, like the migration lock's: sha256("tickwork-history-partitions").
MAINTAIN_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"tickwork-history-partitions").digest()[:8], "big", signed=True
)
LOCK_TIMEOUT = "2s"
COLUMNS = (
    "id, run_id, job_id, attempt, fence_token, worker, started_us, finished_us, status, "
    "http_status, error"
)
# Every partition of tw_attempts with its bound as PostgreSQL prints it.
LIST_PARTITIONS = f"""
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = '{TABLE}'::regclass
"""
# Batched delete of the DEFAULT partition only: daily partitions are never deleted row by row.
PRUNE_DEFAULT = sql.PRUNE_ATTEMPTS_IN.format(table=DEFAULT_PARTITION)

# Bounds of a bigint range partition, e.g. "FOR VALUES FROM ('1764633600000000') TO (...)";
# MINVALUE/MAXVALUE appear only in partitions an operator made by hand.
_BOUND = re.compile(r"FOR VALUES FROM \((.+?)\) TO \((.+?)\)")
_MIN_US, _MAX_US = -(2**63), 2**63 - 1


def parse_bound(name: str, bound: str) -> Partition | None:
    """The range of one partition from `pg_get_expr(relpartbound)`; None for DEFAULT."""
    found = _BOUND.fullmatch(bound.strip())
    if found is None:
        return None
    low, high = (_bound_value(v) for v in found.groups())
    return Partition(name=name, from_us=low, to_us=high)


def _bound_value(text: str) -> int:
    value = text.strip().strip("'")
    if value == "MINVALUE":
        return _MIN_US
    if value == "MAXVALUE":
        return _MAX_US
    return int(value)


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


async def maintain(conn: Conn, *, now: datetime, retention: timedelta) -> HistoryMaintenance:
    """Apply the partition plan in one transaction on `conn` (see the module docstring)."""
    try:
        async with conn.transaction():
            if not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", MAINTAIN_LOCK_KEY):
                return HistoryMaintenance(skipped=True)
            await conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            found = await conn.fetch(LIST_PARTITIONS)
            existing = [p for r in found if (p := parse_bound(r["name"], r["bound"]))]
            plan = plan_partitions(now_us=to_us(now), retention=retention, existing=existing)
            if plan.empty:
                return HistoryMaintenance()
            return await _apply(conn, plan)
    except asyncpg.LockNotAvailableError:
        log.warning(
            "history partitions not maintained: tw_attempts was busy for %s; next pass retries",
            LOCK_TIMEOUT,
            extra={"action": "history_partitions_busy"},
        )
        return HistoryMaintenance(skipped=True)


async def _apply(conn: Conn, plan: PartitionPlan) -> HistoryMaintenance:
    mode = "ACCESS EXCLUSIVE" if plan.drop else "SHARE UPDATE EXCLUSIVE"
    await conn.execute(f"LOCK TABLE ONLY {TABLE} IN {mode} MODE")
    await conn.execute(f"LOCK TABLE {DEFAULT_PARTITION} IN ACCESS EXCLUSIVE MODE")
    for partition in plan.create:
        await _create(conn, partition)
    kept = 0
    for partition in plan.drop:
        kept += await _drop(conn, partition)
    return HistoryMaintenance(
        created=tuple(p.name for p in plan.create),
        dropped=tuple(p.name for p in plan.drop),
        kept_attempts=kept,
    )


async def _create(conn: Conn, partition: Partition) -> None:
    name = quote_ident(partition.name)
    # LIKE copies columns and NOT NULLs but not the identity: ids come from the parent's.
    await conn.execute(f"CREATE TABLE {name} (LIKE {TABLE})")
    await conn.execute(
        f"""WITH moved AS (
            DELETE FROM {DEFAULT_PARTITION} WHERE finished_us >= $1 AND finished_us < $2
            RETURNING {COLUMNS})
        INSERT INTO {name} ({COLUMNS}) SELECT {COLUMNS} FROM moved""",
        partition.from_us,
        partition.to_us,
    )
    # Bounds are our own integers, not user input; ATTACH cannot take them as parameters.
    await conn.execute(
        f"ALTER TABLE {TABLE} ATTACH PARTITION {name} "
        f"FOR VALUES FROM ({partition.from_us:d}) TO ({partition.to_us:d})"
    )


async def _drop(conn: Conn, partition: Partition) -> int:
    name = quote_ident(partition.name)
    await conn.execute(f"ALTER TABLE {TABLE} DETACH PARTITION {name}")
    status = await conn.execute(
        f"""INSERT INTO {TABLE} ({COLUMNS})
        SELECT {COLUMNS} FROM {name} a
        WHERE EXISTS (SELECT 1 FROM tw_runs r
                      WHERE r.id = a.run_id AND r.dead_lettered_us IS NOT NULL)"""
    )
    await conn.execute(f"DROP TABLE {name}")
    return int(status.split()[-1])
