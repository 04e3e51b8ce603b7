"""The fire path's statements read the runs they name, not every pending run (ADR 0012).

In a burst, PostgreSQL's statistics still describe tw_runs as it was when it was last
analysed: a table of history in which pending runs are rare. Planned on that belief, the
workers' lease and outcome statements read every pending run for each batch, a cost that grows
with the burst. These tests build that situation on real PostgreSQL (statistics taken while
no run existed, then thousands of pending runs) and count the tw_runs rows each statement's
executed plan read, through PostgresStore's own connection settings. The table queue's lease
(lease_runs) still reads every leasable run in that situation (ADR 0012); it is checked with
fresh statistics instead, for the shape its two horizons gave it (ADR 0016).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import asyncpg
from bench import claim_seed

from tickwork.clock import SystemClock, from_us
from tickwork.domain.jobs import OverlapPolicy
from tickwork.domain.runs import Envelope
from tickwork.scheduler.planning import plan_claim
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.base import HELD_LEASE_US
from tickwork.store.postgres import SERVER_SETTINGS, SQL, PostgresStore
from tickwork.store.postgres.store import _claim_values as claim_values
from tickwork.store.sql.named import Statement
from tickwork.store.sql.reads import EARLIEST_US

PENDING = 30_000  # the planner's choice flips with the count; 12,000 was not enough
BATCH = 500


async def _pending_burst(dsn: str) -> tuple[list[Envelope], int]:
    """PENDING runs handed off and waiting, with statistics from before any run existed."""
    now_us = int(time.time() * 1e6)
    shape = claim_seed.Shape(
        rows=PENDING, due=PENDING, dirty=0, kind="every", misfire_grace_ms=3_600_000, now_us=now_us
    )
    await claim_seed.seed(dsn, shape)  # ends with VACUUM ANALYZE: tw_runs is empty then
    store = PostgresStore(dsn, migrate=False)
    await store.open()
    try:
        config = SchedulerConfig(node_id="s", lookahead_ms=0)
        scheduler = SchedulerService(store, SystemClock(), config, dispatch=None)
        handed_off: list[Envelope] = []
        while tick := (await scheduler.run_once(from_us(now_us))).handed_off:
            handed_off += tick
    finally:
        await store.close()
    assert len(handed_off) == PENDING
    return handed_off, now_us


def _runs_read(plan: dict[str, Any]) -> Iterator[int]:
    """Rows each scan of tw_runs in an executed plan returned, over all its loops."""
    if plan.get("Relation Name") == "tw_runs" and "Scan" in plan["Node Type"]:
        yield int(plan["Actual Rows"] * plan["Actual Loops"])
        # A bitmap heap scan's rows come from its index scan child, counted below too.
    for child in plan.get("Plans", []):
        yield from _runs_read(child)


# Finished runs, as tw_runs keeps for 30 days: without them the whole table is pending, and a
# sequential scan of it is as good a plan as any.
HISTORY_RUNS = 2 * PENDING
HISTORY = """
INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                     coalesced, lease_owner, lease_until_us, created_us, finished_us)
SELECT (SELECT min(id) FROM tw_jobs), 'history:' || g, 'schedule', $1::bigint - g * 1000,
       'succeeded', 1, 1, 0, NULL, NULL, $1::bigint - g * 1000, $1::bigint - g * 1000
FROM generate_series(1, $2::int) g
"""


def _scans_examined(plan: dict[str, Any], table: str) -> Iterator[tuple[str, int]]:
    """(index or "seq", rows) for each scan of `table` in an executed plan: the rows it read,
    those its filter removed included, over all its loops."""
    if plan.get("Relation Name") == table and "Scan" in plan["Node Type"]:
        rows = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        yield plan.get("Index Name", "seq"), int(rows * plan["Actual Loops"])
    for child in plan.get("Plans", []):
        yield from _scans_examined(child, table)


async def _explain(conn: asyncpg.Connection, statement: Statement, **values: object) -> list[int]:
    return list(_runs_read(await _executed_plan(conn, statement, **values)))


async def _executed_plan(
    conn: asyncpg.Connection, statement: Statement, **values: object
) -> dict[str, Any]:
    tx = conn.transaction()
    await tx.start()
    try:
        explain = f"EXPLAIN (ANALYZE, FORMAT JSON) {statement.text}"
        [row] = await conn.fetch(explain, *statement.args(values))
    finally:
        await tx.rollback()  # the next statement sees the same pending runs
    [doc] = json.loads(row[0])
    return doc["Plan"]  # type: ignore[no-any-return]


def _finish_values(batch: list[Envelope], now_us: int) -> dict[str, object]:
    n = len(batch)
    return {
        "ids": [e.run_id for e in batch],
        "fences": [e.fence_token for e in batch],
        "statuses": ["succeeded"] * n,
        "started_us": [now_us] * n,
        "finished_us": [now_us] * n,
        "http_statuses": [200] * n,
        "errors": [None] * n,
        "dead_us": [None] * n,
        "retry_us": [None] * n,
        "job_ids": [e.job_id for e in batch],
        "attempts": [1] * n,
        "workers": ["w"] * n,
        "held": HELD_LEASE_US,
    }


async def test_a_batch_reads_about_as_many_runs_as_it_writes(pg_dsn: str) -> None:
    handed_off, now_us = await _pending_burst(pg_dsn)
    batch = handed_off[:BATCH]  # the first to be due, as a worker takes them
    lease_until = now_us + 60_000_000
    ids, fences = [e.run_id for e in batch], [e.fence_token for e in batch]
    conn = await asyncpg.connect(pg_dsn, server_settings=SERVER_SETTINGS)
    try:
        read = {
            "lease by fence": await _explain(
                conn,
                SQL.lease_fenced_runs,
                ids=ids,
                fences=fences,
                owner="w",
                lease_until=lease_until,
                now=now_us,
            ),
            # Outcomes at the runs' fences as they are now (unleased): the compare-and-set
            # applies, as it does for a worker's current lease.
            "finish": await _explain(conn, SQL.finish_runs, **_finish_values(batch, now_us)),
        }
    finally:
        await conn.close()
    # Each run of the batch is looked up a few times (lock, update, join); a plan that walks
    # the pending runs reads all PENDING of them at least once.
    assert {name: sum(rows) <= 4 * BATCH for name, rows in read.items()} == {
        name: True for name in read
    }, read


async def test_the_lease_stops_after_its_batch_and_passes_over_hand_offs_in_flight_once(
    pg_dsn: str,
) -> None:
    # lease_runs has two horizons (ADR 0016): hand-offs no worker has leased yet wait for the
    # earlier one behind an external queue; they are told apart by a filter on the queue rows
    # the lease reads (ADR 0030). On the table queue the horizons are equal: the scan of
    # tw_queue_lease must still stop after its batch. Behind a queue it reads each queued
    # run at most once, and of tw_runs only the runs it leases (no scan of the history).
    # Statistics are fresh here: with stale ones the table queue's lease reads every leasable
    # run, with one horizon as with two (ADR 0012, left open).
    handed_off, now_us = await _pending_burst(pg_dsn)
    expired = handed_off[-10:]  # leased by a worker that died: free again since now_us - 1
    store = PostgresStore(pg_dsn, migrate=False)
    await store.open()
    try:
        await store.lease_fenced_runs(
            [(e.run_id, e.fence_token) for e in expired],
            owner="dead",
            lease_until=from_us(now_us - 1),
            now=from_us(now_us - 5_000_000),
        )
    finally:
        await store.close()
    conn = await asyncpg.connect(pg_dsn, server_settings=SERVER_SETTINGS)
    try:
        await conn.execute(HISTORY, now_us, HISTORY_RUNS)
        await conn.execute("ANALYZE tw_runs, tw_queue")
        # `after`: no lower bound, as the store binds it unless a worker leases beyond its room.
        lease = {"owner": "w", "lease_until": now_us + 5_000_000, "limit": BATCH}
        lease |= {"after": EARLIEST_US}
        table = await _executed_plan(conn, SQL.lease_runs, now=now_us, hand_offs_by=now_us, **lease)
        # Every hand-off's instant lies within the hour before now_us: all are "in flight".
        behind_a_queue = await _executed_plan(
            conn, SQL.lease_runs, now=now_us, hand_offs_by=now_us - 3_600_000_000, **lease
        )
    finally:
        await conn.close()
    assert (table["Actual Rows"], behind_a_queue["Actual Rows"]) == (BATCH, len(expired))
    # The lease's scan of the queue (the first listed; the second is the queue's update by
    # primary key); tw_runs is read only by primary key, for the runs chosen.
    scans = list(_scans_examined(table, "tw_queue"))
    assert scans == [("tw_queue_lease", BATCH), ("tw_queue_pkey", BATCH)], scans
    assert {index for index, _ in _scans_examined(table, "tw_runs")} == {"tw_runs_pkey"}
    # Behind a queue the planner may read the whole queue rather than the index's range: the
    # queue holds only the pending runs (ADR 0030), so that is still no scan of the history.
    _, examined = next(_scans_examined(behind_a_queue, "tw_queue"))
    assert examined <= PENDING + len(expired), examined
    assert {index for index, _ in _scans_examined(behind_a_queue, "tw_runs")} == {"tw_runs_pkey"}


async def test_the_due_scan_of_every_partition_is_prepared_once(pg_dsn: str) -> None:
    """The 64-branch due-scan is longer than asyncpg's default cacheable statement: the scan
    pool must keep it prepared, or every tick parses and plans it again."""
    store = PostgresStore(pg_dsn)
    await store.open()
    try:
        assert store.partition_count() == 64
        for _ in range(3):
            await store.due_jobs(SystemClock().now(), 1000)
        assert store._scan_pool is not None
        prepared = await store._scan_pool.fetch(
            "SELECT length(statement) AS chars FROM pg_prepared_statements"
        )
        assert [r["chars"] for r in prepared if r["chars"] > 15_360], prepared
    finally:
        await store.close()


async def test_a_claim_looks_up_runs_only_for_jobs_with_an_overlap_policy(pg_dsn: str) -> None:
    # Overlap policies (docs/policies.md) are decided in the claim: a plan with `allow` must
    # read no run at all, one with another policy only its job's runs still going (through
    # tw_queue_guarded: ADR 0030), even with statistics from before any run existed.
    _, now_us = await _pending_burst(pg_dsn)  # every job has one run still going
    store = PostgresStore(pg_dsn, migrate=False)
    await store.open()
    try:
        due = await store.due_jobs(from_us(now_us) + timedelta(days=1), BATCH)
    finally:
        await store.close()
    plans = [plan_claim(d, d.next_run_at) for d in due]
    now = from_us(now_us)
    conn = await asyncpg.connect(pg_dsn, server_settings=SERVER_SETTINGS)
    try:
        await conn.execute(LEDGER, now_us, HISTORY_RUNS)  # 30 days of skips, of other jobs
        await conn.execute("ANALYZE tw_occurrences")
        read = {}
        for policy in (OverlapPolicy.ALLOW, OverlapPolicy.SKIP, OverlapPolicy.CANCEL_PREVIOUS):
            values = claim_values([replace(p, overlap=policy) for p in plans], "s", now, 500)
            plan = await _executed_plan(conn, SQL.claim_hand_off, **values)
            read[policy.value] = sum(_runs_read(plan))
            read[f"{policy.value} queue"] = sum(_rows_read(plan, "tw_queue"))
            read[f"{policy.value} ledger"] = sum(_rows_read(plan, "tw_occurrences"))
    finally:
        await conn.close()
    assert len(plans) == BATCH
    assert read["allow"] == read["allow queue"] == 0, read
    # skip: two probes per job (a run going, a run held back), finding its one run;
    # cancel_previous: those, and the cancel's lookup and update of that run.
    assert read["skip"] + read["skip queue"] <= 2 * BATCH, read
    assert read["cancel_previous"] + read["cancel_previous queue"] <= 4 * BATCH, read
    # The ledger: a skip reads the job's latest row (none here), nothing else.
    assert read["skip ledger"] <= BATCH, read
    assert read["allow ledger"] == read["cancel_previous ledger"] == 0, read


# Ledger rows of jobs that are not claimed here.
LEDGER = """
INSERT INTO tw_occurrences (job_id, first_us, last_us, count, reason, run_id, recorded_us)
SELECT 'other-' || g, $1::bigint - g * 1000, $1::bigint - g * 1000, 1, 'skipped_overlap', g,
       $1::bigint - g * 1000
FROM generate_series(1, $2::int) g
"""


def _rows_read(plan: dict[str, Any], table: str) -> Iterator[int]:
    """Rows each scan of `table` in an executed plan returned, over all its loops."""
    if plan.get("Relation Name") == table and "Scan" in plan["Node Type"]:
        yield int(plan["Actual Rows"] * plan["Actual Loops"])
    for child in plan.get("Plans", []):
        yield from _rows_read(child, table)


def _rows_examined(plan: dict[str, Any], table: str) -> int:
    """Rows every scan of `table` in an executed plan read, those its filter removed included,
    over all its loops."""
    own = 0
    if plan.get("Relation Name") == table and "Scan" in plan["Node Type"]:
        own = int(
            (plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)) * plan["Actual Loops"]
        )
    return own + sum(_rows_examined(child, table) for child in plan.get("Plans", []))


async def test_counting_due_jobs_per_level_reads_each_level_up_to_its_cap(pg_dsn: str) -> None:
    # A scheduler behind its work counts each tenant's due jobs per priority level (fair scan,
    # ADR 0026). With one tenant and one level in the table, the planner reckons that every due
    # row matches any level it is asked about; it then read the whole due range once per level
    # (9 walks of it, the ninth of which found the rows), 300 ms per tick at 20,000 due. The
    # count must read, per level, no more than the cap, and nothing for an empty level.
    now_us = int(time.time() * 1e6)
    shape = claim_seed.Shape(
        rows=PENDING, due=PENDING, dirty=0, kind="every", misfire_grace_ms=3_600_000, now_us=now_us
    )
    await claim_seed.seed(pg_dsn, shape)  # one tenant, every job at the middle priority
    cap = 1000
    conn = await asyncpg.connect(pg_dsn, server_settings=SERVER_SETTINGS)
    try:
        parts = [r["partition"] for r in await conn.fetch("SELECT DISTINCT partition FROM tw_jobs")]
        values = {"until": now_us, "not_before": 0, "parts": parts, "cap": cap}
        plan = await _executed_plan(conn, SQL.due_counts, tenants=["default", "other"], **values)
        counted = await conn.fetch(
            SQL.due_counts.text, *SQL.due_counts.args({"tenants": ["default", "other"], **values})
        )
    finally:
        await conn.close()
    assert [(r["tenant"], r["priority"], r["due"]) for r in counted] == [("default", 5, cap)]
    assert _rows_examined(plan, "tw_jobs") <= cap + 10, plan
