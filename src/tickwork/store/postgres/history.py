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
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tickwork.clock import to_us
from tickwork.domain.history_partitions import Partition, PartitionPlan, plan_partitions
from tickwork.store.base import HistoryMaintenance
from tickwork.store.postgres.statements import SQL
from tickwork.store.sql.named import Statement

log = logging.getLogger("tickwork.store.postgres")

Conn = asyncpg.Connection | PoolConnectionProxy  # a plain connection, or one from the pool

# A fixed signed 64-bit key, like the migration lock's: sha256("tickwork-history-partitions").
MAINTAIN_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"tickwork-history-partitions").digest()[:8], "big", signed=True
)
LOCK_TIMEOUT = "2s"


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
            if not await _run(conn, SQL.try_maintenance_lock, key=MAINTAIN_LOCK_KEY, fetch=True):
                return HistoryMaintenance(skipped=True)
            await _run(conn, SQL.set_local_lock_timeout.format(timeout=LOCK_TIMEOUT))
            found = await conn.fetch(SQL.list_partitions.text)
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


async def _run(conn: Conn, statement: Statement, *, fetch: bool = False, **values: Any) -> Any:
    """Run a named statement with keyword values; `fetch`: return its first column."""
    if fetch:
        return await conn.fetchval(statement.text, *statement.args(values))
    return await conn.execute(statement.text, *statement.args(values))


async def _apply(conn: Conn, plan: PartitionPlan) -> HistoryMaintenance:
    mode = "ACCESS EXCLUSIVE" if plan.drop else "SHARE UPDATE EXCLUSIVE"
    await _run(conn, SQL.lock_history_parent.format(mode=mode))
    await _run(conn, SQL.lock_history_default)
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
    await _run(conn, SQL.create_partition.format(partition=name))
    await _run(
        conn,
        SQL.move_into_partition.format(partition=name),
        from_us=partition.from_us,
        to_us=partition.to_us,
    )
    # Bounds are our own integers, not user input; ATTACH cannot take them as parameters.
    bounds = {"from_us": f"{partition.from_us:d}", "to_us": f"{partition.to_us:d}"}
    await _run(conn, SQL.attach_partition.format(partition=name, **bounds))


async def _drop(conn: Conn, partition: Partition) -> int:
    name = quote_ident(partition.name)
    await _run(conn, SQL.detach_partition.format(partition=name))
    status = await _run(conn, SQL.keep_dead_letter_attempts.format(partition=name))
    await _run(conn, SQL.drop_partition.format(partition=name))
    return int(status.split()[-1])
