"""Seeding the claim benchmark's table: tickwork's own schema, filled by COPY.

The table holds `rows` jobs: `due` interval (or cron) jobs due now, `dirty` completed one-shots
(rows the partial due index must not see), and the rest due hours from now. Which row is which
follows a multiplicative hash of its position, so the due rows are scattered over the heap and
their order by next_run_us is unrelated to their physical order.

Instants are relative to one `now_us` fixed at seeding: every contender claims with that same
`now`, so each one finds exactly the same due rows whenever it runs. Due rows lie within the 50
minutes before `now_us` and advance by one hour when claimed, so nothing comes due twice.

Each row's `partition` is the one tickwork itself gives its id (`domain.partitions.partition_of`
with the database's P from `tw_meta`), so a partitioned due-scan finds the rows where a store that
inserted them would have put them (ADR 0015).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import asyncpg

from tickwork.domain.jobs import WebhookTarget
from tickwork.domain.partitions import DEFAULT_PARTITIONS, partition_of
from tickwork.store.migrate import upgrade
from tickwork.store.sql.sealed import SealedColumns

COLUMNS = (
    "id", "tenant", "name", "state", "schedule_kind", "cron_expr", "timezone", "every_ms",
    "anchor_us", "at_us", "misfire", "misfire_grace_ms", "target", "next_run_us", "fence_token",
    "last_fired_us", "created_us", "updated_us", "partition",
)  # fmt: skip
SCATTER = 2_654_435_761  # prime: g -> g * SCATTER mod n is a permutation of range(n)
SECOND_US = 1_000_000
MINUTE_US = 60 * SECOND_US
HOUR_US = 3600 * SECOND_US
DUE_SPAN_US = 50 * MINUTE_US
TARGET = SealedColumns(None).write_target(WebhookTarget(url="http://127.0.0.1:9/hook"))


@dataclass(frozen=True, kw_only=True)
class Shape:
    rows: int
    due: int
    dirty: int
    kind: str  # "every" or "cron"
    misfire_grace_ms: int
    now_us: int
    partitions: int = DEFAULT_PARTITIONS  # P of the database (seed() reads it from tw_meta)


def job_id(g: int) -> str:
    """32 hex characters, ascending with g, like tickwork's own time-sortable ids."""
    return f"{(0x019A << 112) | g:032x}"


def seed_rows(shape: Shape) -> Iterator[tuple[Any, ...]]:
    n = shape.rows
    for g in range(n):
        h = g * SCATTER % n
        if h < shape.due:
            yield _scheduled(g, shape, shape.now_us - SECOND_US - h * DUE_SPAN_US // shape.due)
        elif h < shape.due + shape.dirty:
            yield _completed(g, shape, shape.now_us - 24 * HOUR_US - h * HOUR_US // n)
        else:
            yield _scheduled(g, shape, shape.now_us + 6 * HOUR_US + h * 24 * HOUR_US // n)


def _scheduled(g: int, shape: Shape, next_us: int) -> tuple[Any, ...]:
    jid = job_id(g)
    timing: tuple[Any, ...]
    if shape.kind == "cron":
        next_us -= next_us % MINUTE_US  # a real occurrence of "M * * * *"
        minute = next_us // MINUTE_US % 60
        timing = ("cron", f"{minute} * * * *", "UTC", None, None)
    else:
        timing = ("every", None, None, 3_600_000, next_us)
    return (
        jid, "default", f"bench-{g}", "scheduled", *timing, None, "coalesce",
        shape.misfire_grace_ms, TARGET, next_us, 0, None, shape.now_us, shape.now_us,
        partition_of(jid, shape.partitions),
    )  # fmt: skip


def _completed(g: int, shape: Shape, at_us: int) -> tuple[Any, ...]:
    jid = job_id(g)
    return (
        jid, "default", f"bench-{g}", "completed", "at", None, None, None, None, at_us,
        "coalesce", shape.misfire_grace_ms, TARGET, at_us, 1, at_us, at_us, at_us,
        partition_of(jid, shape.partitions),
    )  # fmt: skip


async def seed(url: str, shape: Shape) -> dict[str, float]:
    """Migrate with tickwork's own migration, COPY the rows, VACUUM ANALYZE. Returns timings."""
    started = time.monotonic()
    await upgrade(url)
    migrated = time.monotonic()
    conn = await asyncpg.connect(url)
    try:
        shape = replace(shape, partitions=await partition_count(conn))
        await conn.copy_records_to_table("tw_jobs", records=seed_rows(shape), columns=COLUMNS)
        copied = time.monotonic()
        await conn.execute("VACUUM ANALYZE tw_jobs")
        await conn.execute("VACUUM ANALYZE tw_runs")
        size = await conn.fetchval("SELECT pg_total_relation_size('tw_jobs')")
    finally:
        await conn.close()
    done = time.monotonic()
    return {
        "migrate_s": round(migrated - started, 2),
        "copy_s": round(copied - migrated, 2),
        "vacuum_s": round(done - copied, 2),
        "tw_jobs_mib": round(size / 2**20, 1),
    }


async def partition_count(conn: asyncpg.Connection) -> int:
    """P, as the migration stored it in tw_meta (the default where a schema predates it)."""
    try:
        found = await conn.fetchval("SELECT value FROM tw_meta WHERE key = 'partitions'")
    except asyncpg.UndefinedTableError:
        return DEFAULT_PARTITIONS
    return int(found) if found is not None else DEFAULT_PARTITIONS
