"""What one fire writes on PostgreSQL, per phase: statements, commits, rows, HOT updates.

    uv run python -m bench.writes [--jobs 20000] [--pg-dsn ...]

Counts, not timings, so a noisy machine does not move them. One connection pool and one loop,
as `bench.store_path`: N interval jobs due now (COPY-seeded with tickwork's schema), then the
table queue's store path one phase at a time over all N, so that each phase's counters are its
own:

- claim: the scheduler's due scans and hand-off claims (`SchedulerService.run_once`) until
  nothing is due;
- lease: a worker's `lease_runs`, a batch of 1,000 at a time, until nothing is leasable;
- finish: `finish_runs` with a success for each run.

Per phase and per fire: the statements sent (asyncpg query loggers, pool resets left out), the
commits (`pg_stat_database.xact_commit` of the bench's own database, this tool's own reads taken
out), and for each table the rows inserted, updated (and of those, HOT: no index entry written),
deleted (`pg_stat_user_tables`), with its index count: a non-HOT update or an insert writes an
entry in each index whose predicate the row meets. PostgreSQL flushes an idle backend's table
counters up to 10 s late, so after each phase every connection of the store's pools asks for
its flush (`pg_stat_force_next_flush()`) and the tool waits until the counters stop moving.
Nothing is written to docs/; compare runs before and after a schema or statement change.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import asyncpg

from bench import claim_seed
from bench.cli import DEFAULT_PG_DSN
from bench.counting import QueryCounter
from bench.pgutil import Admin
from bench.store_path import BATCH, _succeeded
from tickwork.clock import SystemClock, from_us
from tickwork.domain.runs import Fire
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.postgres import PostgresStore
from tickwork.store.postgres.connect import asyncpg_dsn

TABLE_COUNTERS = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid) AS indexes
FROM pg_stat_user_tables s WHERE relname LIKE 'tw_%'
"""
COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
SETTLE_S = 1.2  # PostgreSQL flushes an idle backend's counters at most once a second


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.writes", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


class Counters:
    """The bench database's table counters and commits, read from a connection of its own."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self.reads = 0  # this reader's own commits, one per statement (autocommit)

    async def read(self) -> dict[str, Any]:
        rows = await self._conn.fetch(TABLE_COUNTERS)
        commits = await self._conn.fetchval(COMMITS)
        self.reads += 2
        return {
            "tables": {r["relname"]: dict(r) for r in rows},
            "commits": int(commits) - self.reads,
        }

    async def settled(self, timeout_s: float = 30.0) -> dict[str, Any]:
        """The counters once they have stopped moving (every backend flushed its own)."""
        last = await self.read()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            await asyncio.sleep(SETTLE_S)
            now = await self.read()
            if _rows_of(now) == _rows_of(last) and now["commits"] == last["commits"]:
                return now
            last = now
        return last


@contextlib.contextmanager
def tracked(connections: list[asyncpg.Connection]) -> Iterator[None]:
    """Collect every connection the pools created inside this block open (to flush them)."""
    original = asyncpg.create_pool

    def create_pool(*args: Any, init: Any = None, **kwargs: Any) -> Any:
        async def init_tracked(conn: asyncpg.Connection) -> None:
            connections.append(conn)
            if init is not None:
                await init(conn)

        return original(*args, init=init_tracked, **kwargs)

    asyncpg.create_pool = create_pool
    try:
        yield
    finally:
        asyncpg.create_pool = original


async def flush(connections: list[asyncpg.Connection]) -> int:
    """Have each idle connection's backend flush its table counters when it goes idle next;
    how many statements (commits) that took."""
    open_ones = [conn for conn in connections if not conn.is_closed()]
    for conn in open_ones:
        await conn.execute("SELECT pg_stat_force_next_flush()")
    return len(open_ones)


def _rows_of(reading: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sorted(
        (name, t["n_tup_ins"], t["n_tup_upd"], t["n_tup_del"])
        for name, t in reading["tables"].items()
    )


def per_fire(before: dict[str, Any], after: dict[str, Any], fires: int) -> dict[str, Any]:
    """The difference of two readings, per fire, for the tables that moved."""
    tables: dict[str, Any] = {}
    for name, end in after["tables"].items():
        start = before["tables"].get(name, {})
        delta = {
            key: end[key] - start.get(key, 0)
            for key in ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del")
        }
        if any(delta.values()):
            tables[name] = {
                "inserted": round(delta["n_tup_ins"] / fires, 3),
                "updated": round(delta["n_tup_upd"] / fires, 3),
                "hot_updated": round(delta["n_tup_hot_upd"] / fires, 3),
                "deleted": round(delta["n_tup_del"] / fires, 3),
                "indexes": end["indexes"],
            }
    return {"commits": round((after["commits"] - before["commits"]) / fires, 3), "tables": tables}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    admin = Admin(args.pg_dsn, secrets.token_hex(3))
    await admin.open()
    db = await admin.create("writes")
    url = admin.dsn(db)
    try:
        now_us = int(time.time() * 1e6)
        shape = claim_seed.Shape(
            rows=args.jobs,
            due=args.jobs,
            dirty=0,
            kind="every",
            misfire_grace_ms=3_600_000,
            now_us=now_us,
        )
        await claim_seed.seed(url, shape)
        reader = await asyncpg.connect(asyncpg_dsn(url))
        try:
            return await _phases(url, Counters(reader), now_us, args.jobs)
        finally:
            await reader.close()
    finally:
        await admin.drop(db)
        await admin.close()


async def _phases(url: str, counters: Counters, now_us: int, jobs: int) -> dict[str, Any]:
    queries = QueryCounter()
    connections: list[asyncpg.Connection] = []
    with tracked(connections), queries.patch_pools():
        store = PostgresStore(url, migrate=False)
        await store.open()
    scheduler = SchedulerService(
        store, SystemClock(), SchedulerConfig(node_id="sched", lookahead_ms=0), dispatch=None
    )
    now = from_us(now_us + 1)
    report: dict[str, Any] = {"jobs": jobs, "phases": {}}
    try:
        fires: list[Fire] = []

        async def claim() -> int:
            claimed = 0
            while tick := (await scheduler.run_once(from_us(now_us))).handed_off:
                claimed += len(tick)
            return claimed

        async def lease() -> int:
            while batch := await store.lease_runs(
                now=now, owner="worker", lease_until=now + timedelta(minutes=1), limit=BATCH
            ):
                fires.extend(batch)
            return len(fires)

        async def finish() -> int:
            for start in range(0, len(fires), BATCH):
                await store.finish_runs([_succeeded(f, now) for f in fires[start : start + BATCH]])
            return len(fires)

        for name, phase in (("claim", claim), ("lease", lease), ("finish", finish)):
            await flush(connections)
            before = await counters.settled()
            queries.reset()
            count = await phase()
            flushes = await flush(connections)
            after = await counters.settled()
            after["commits"] -= flushes  # the flush requests are not the phase's
            statements = sum(n for kind, n in queries.counts().items() if kind != "pool_reset")
            report["phases"][name] = {
                "fires": count,
                "statements": round(statements / max(count, 1), 4),
                **per_fire(before, after, max(count, 1)),
            }
    finally:
        await store.close()
    return report


def _print(report: dict[str, Any]) -> None:
    print(f"{report['jobs']} interval jobs, per fire:")
    for name, phase in report["phases"].items():
        print(f"  {name}: {phase['fires']} fires, {phase['statements']} statements,"
              f" {phase['commits']} commits")  # fmt: skip
        for table, t in phase["tables"].items():
            print(
                f"    {table}: +{t['inserted']} rows, {t['updated']} updated"
                f" ({t['hot_updated']} HOT), -{t['deleted']}; {t['indexes']} indexes"
            )


def main() -> None:
    args = parse(sys.argv[1:])
    try:
        report = asyncio.run(run(args))
    except KeyboardInterrupt:
        sys.exit(130)
    _print(report)
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()
