"""The claim benchmark's bare ceilings read the due index the way the schema allows.

The due index is (partition, next_run_us). A bare statement that orders the whole table by
next_run_us cannot read it in order and sorts every due row on every batch: on 2026-12-07 that
made the "ceiling" seven times slower than tickwork's own claim. These tests keep the bare
statements on the index (one range per partition, merged) and check that a batch claims the
earliest due jobs, in time order, once each.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from bench import claim, claim_seed

ROWS, DUE, BATCH = 20_000, 4_000, 1_000


async def _seeded(dsn: str) -> int:
    now_us = int(time.time() * 1e6)
    shape = claim_seed.Shape(
        rows=ROWS, due=DUE, dirty=2_000, kind="every", misfire_grace_ms=3_600_000, now_us=now_us
    )
    await claim_seed.seed(dsn, shape)
    return now_us


def _args(name: str, now_us: int) -> tuple[Any, ...]:
    return (now_us, BATCH) if name == "bare_b" else (now_us, BATCH, "bench", now_us + 1)


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


@pytest.mark.parametrize("name", ["bare_b", "bare_c"])
async def test_a_bare_ceiling_merges_the_partitions_ranges_of_the_due_index(
    pg_dsn: str, name: str
) -> None:
    now_us = await _seeded(pg_dsn)
    conn = await asyncpg.connect(pg_dsn)
    try:
        partitions = await claim_seed.partition_count(conn)
        sql = claim.bare_sql(name, partitions)
        explained = await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql, *_args(name, now_us))
    finally:
        await conn.close()
    nodes = list(_nodes(json.loads(explained)[0]["Plan"]))
    (merged,) = [n for n in nodes if n["Node Type"] == "Merge Append"]
    due_reads = [n for n in _nodes(merged) if n.get("Relation Name") == "tw_jobs"]
    assert {n.get("Index Name") for n in due_reads} == {"tw_jobs_due"}
    assert len(due_reads) == partitions
    # No sort of tw_jobs rows: the order comes from the index (bare_c's sorts are of its CTEs).
    sorts = [n for n in nodes if n["Node Type"] == "Sort"]
    assert not [m for s in sorts for m in _nodes(s) if m.get("Relation Name") == "tw_jobs"]


@pytest.mark.parametrize("name", ["bare_b", "bare_c"])
async def test_a_bare_ceiling_claims_the_earliest_due_jobs_once_each(
    pg_dsn: str, name: str
) -> None:
    now_us = await _seeded(pg_dsn)
    conn = await asyncpg.connect(pg_dsn)
    try:
        earliest = await conn.fetch(
            "SELECT id FROM tw_jobs WHERE state = 'scheduled' AND next_run_us <= $1"
            " ORDER BY next_run_us LIMIT $2",
            now_us, BATCH,
        )  # fmt: skip
        sql = claim.bare_sql(name, await claim_seed.partition_count(conn))
        batches = [await conn.fetch(sql, *_args(name, now_us)) for _ in range(DUE // BATCH + 1)]
        advanced = await conn.fetchval(
            "SELECT count(*) FROM tw_jobs WHERE fence_token = 1 AND state = 'scheduled'"
        )
    finally:
        await conn.close()
    id_column = "id" if name == "bare_b" else "job_id"
    assert {r[id_column] for r in batches[0]} == {r["id"] for r in earliest}
    assert [len(b) for b in batches] == [BATCH] * (DUE // BATCH) + [0]
    assert advanced == DUE
