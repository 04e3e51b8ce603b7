"""The store's share of a fire on PostgreSQL, without processes, HTTP or timing noise from them.

    uv run python -m bench.store_path [--jobs 50000] [--reps 3]

One connection pool, one loop: N interval jobs due now (COPY-seeded with tickwork's own schema),
then the table queue's whole store path per batch of 1,000, in order: the scheduler's due scan
and hand-off claim, a worker's `lease_runs`, and `finish_runs` with a success for each. It
reports the wall time of each phase per fire and PostgreSQL's CPU per fire. Nothing runs
concurrently, so this is a floor for the store's cost, and the tool to compare schema or
statement changes with (run it before and after, several reps, on a quiet machine).
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from bench import claim_seed
from bench.cli import DEFAULT_PG_DSN
from bench.meter import Attribution, CpuMeter
from bench.pgutil import Admin, attribution_of
from tickwork.clock import SystemClock, from_us
from tickwork.domain.runs import Fire, RunOutcome, RunStatus
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.postgres import PostgresStore

BATCH = 1000
T = TypeVar("T")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.store_path", description=__doc__)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN)
    return parser.parse_args(argv)


class Phases:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    async def timed(self, name: str, call: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await call
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


async def one_rep(admin: Admin, attribution: Attribution, jobs: int) -> dict[str, Any]:
    db = await admin.create("store_path")
    url = admin.dsn(db)
    now_us = int(time.time() * 1e6)
    shape = claim_seed.Shape(
        rows=jobs, due=jobs, dirty=0, kind="every", misfire_grace_ms=3_600_000, now_us=now_us
    )
    await claim_seed.seed(url, shape)
    store = PostgresStore(url, migrate=False)
    await store.open()
    phases = Phases()
    scheduler = SchedulerService(
        store, SystemClock(), SchedulerConfig(node_id="sched", lookahead_ms=0), dispatch=None
    )
    fires = 0
    try:
        with CpuMeter(attribution) as meter:
            started = time.perf_counter()
            while True:
                tick = await phases.timed("claim", scheduler.run_once(from_us(now_us)))
                if not tick.handed_off:
                    break
                fires += await _work(store, phases, now_us, len(tick.handed_off))
            elapsed = time.perf_counter() - started
    finally:
        await store.close()
        await admin.drop(db)
    cpu = meter.report()
    pg_us = cpu["cores"].get("postgres", 0.0) * cpu["wall_s"] * 1e6 / max(fires, 1)
    return {
        "fires": fires,
        "fires_per_s": round(fires / elapsed, 1),
        "us_per_fire": {k: round(v * 1e6 / max(fires, 1), 1) for k, v in phases.seconds.items()},
        "postgres_cpu_us_per_fire": round(pg_us, 1),
        "noise": cpu["foreign_cores"],
    }


async def _work(store: PostgresStore, phases: Phases, now_us: int, count: int) -> int:
    """Lease and finish `count` runs the way one worker would, batch by batch."""
    done = 0
    now = from_us(now_us + 1)
    while done < count:
        fires = await phases.timed(
            "lease",
            store.lease_runs(
                now=now, owner="worker", lease_until=now + timedelta(minutes=1), limit=BATCH
            ),
        )
        if not fires:
            break
        outcomes = [_succeeded(f, now) for f in fires]
        await phases.timed("finish", store.finish_runs(outcomes))
        done += len(fires)
    return done


def _succeeded(fire: Fire, now: datetime) -> RunOutcome:
    return RunOutcome(
        run_id=fire.run_id,
        job_id=fire.job_id,
        attempt=fire.attempt,
        fence_token=fire.fence_token,
        status=RunStatus.SUCCEEDED,
        started_at=now,
        finished_at=now,
        http_status=200,
        worker="worker",
    )


def _medians(reps: list[dict[str, Any]]) -> str:
    def med(pick: Callable[[dict[str, Any]], float]) -> float:
        return round(statistics.median(pick(r) for r in reps), 1)

    phases = ", ".join(
        f"{name} {round(statistics.median(r['us_per_fire'][name] for r in reps), 1)} µs"
        for name in reps[0]["us_per_fire"]
    )
    return (
        f"median of {len(reps)}: {med(lambda r: r['fires_per_s'])} fires/s, PostgreSQL "
        f"{med(lambda r: r['postgres_cpu_us_per_fire'])} µs CPU per fire; wall per fire: {phases}"
    )


async def run(args: argparse.Namespace) -> None:
    admin = Admin(args.pg_dsn, secrets.token_hex(3))
    await admin.open()
    try:
        attribution = await attribution_of(admin)
        reps = []
        for _ in range(args.reps):
            rep = await one_rep(admin, attribution, args.jobs)
            reps.append(rep)
            print(f"  {rep}", flush=True)
        print(_medians(reps), flush=True)
    finally:
        await admin.close()


def main() -> None:
    try:
        asyncio.run(run(parse(sys.argv[1:])))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
