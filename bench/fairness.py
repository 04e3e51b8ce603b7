"""Fairness under overload (issue 21; ADR 0026), end to end on PostgreSQL.

    uv run python -m bench.fairness [--a-jobs 200000] [--b-jobs 100]

Tenant A has N one-shots due at the same instant T; tenant B has 100 jobs every second (their
anchors spread over the second), running before, during and after A's drain. Two cases on
fresh databases with fresh api, scheduler and worker processes (table queue, no-op Python
task, as `bench.e2e`'s task burst):

- unshared: A alone: A's drain rate (N / (last finish - T));
- shared: A and B: A's drain rate, and B's lateness (started - scheduled) over the
  occurrences due while A drains.

Targets (issue 21): B's p99 under 50 ms while A drains at no less than 80 % of its unshared
rate. Printed, and with --json as one object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import secrets
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from bench import e2e
from bench.cli import DEFAULT_PG_DSN
from bench.env import Env
from bench.meter import wait_for_quiet
from bench.noop_task import NOOP_TASK
from bench.pgutil import Admin, attribution_of
from bench.stats import summary
from tickwork.clock import SystemClock
from tickwork.domain.jobs import AtTrigger, EveryTrigger, Schedule, TaskTarget
from tickwork.services.jobs import JobService, JobSpec
from tickwork.store.postgres import PostgresStore, asyncpg_dsn

TARGET = TaskTarget(name=NOOP_TASK)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--a-jobs", type=int, default=200_000)
    parser.add_argument("--b-jobs", type=int, default=100)
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN)
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--shared-only", action="store_true", help="skip A alone (B's lateness only, no ratio)"
    )
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    admin = Admin(args.pg_dsn, secrets.token_hex(3))
    await admin.open()
    try:
        attribution = await attribution_of(admin)
        with tempfile.TemporaryDirectory(prefix="tickwork-fair-") as tmp:
            env = Env(
                run_id="fair", quick=False, tmp=Path(tmp), admin=admin, attribution=attribution
            )
            alone = None if args.shared_only else await case(env, args.a_jobs, 0)
            if alone is not None:
                print(_line("unshared", alone), flush=True)
            shared = await case(env, args.a_jobs, args.b_jobs)
            print(_line("shared", shared), flush=True)
    finally:
        await admin.close()
    ratio = (
        shared["a_fires_per_s"] / alone["a_fires_per_s"]
        if alone and alone["a_fires_per_s"]
        else 0.0
    )
    result = {"unshared": alone, "shared": shared, "a_rate_shared_vs_alone": round(ratio, 3)}
    print(
        f"A drains at {100 * ratio:.1f} % of its unshared rate; B p99"
        f" {shared['b_lateness_ms'].get('p99')} ms during the drain",
        flush=True,
    )
    if args.json:
        print(json.dumps(result, default=str), flush=True)
    return result


async def case(env: Env, a_jobs: int, b_jobs: int) -> dict[str, Any]:
    await asyncio.to_thread(wait_for_quiet, env.attribution, max_wait_s=10.0)
    db = await env.admin.create(f"fair_{b_jobs}")
    url, tag = env.admin.dsn(db), f"fair-{b_jobs}"
    cfg = e2e.E2EConfig(burst_jobs=a_jobs)
    t_us = e2e.burst_instant(cfg)
    result: dict[str, Any] = {"a_jobs": a_jobs, "b_jobs": b_jobs}
    result["create_s"] = await _create(url, a_jobs, b_jobs, t_us)
    async with e2e.roles(env, url, None, tag, result, ("--import", "bench.noop_task")):
        result["ready_before_t_s"] = round(t_us / 1e6 - time.time(), 2)
        await asyncio.sleep(max(0.0, t_us / 1e6 - time.time()))
        result["waited_s"] = await _wait_for_a(url, a_jobs)
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        runs = await conn.fetch(
            "SELECT j.tenant, r.scheduled_us, r.created_us, r.started_us, r.finished_us, r.status"
            " FROM tw_runs r JOIN tw_jobs j ON j.id = r.job_id"
        )
    finally:
        await conn.close()
    await env.admin.drop(db)
    return result | analyse(list(runs), t_us, a_jobs)


async def _create(url: str, a_jobs: int, b_jobs: int, t_us: int) -> float:
    started = time.monotonic()
    at = datetime.fromtimestamp(t_us / 1e6, UTC)
    store = PostgresStore(url, pool_size=16)
    await store.open()
    try:
        now = datetime.now(UTC)
        for tenant in ("a", "b"):
            await store.create_tenant(tenant, now=now)
        service = JobService(store, SystemClock())
        one_shot = JobSpec(
            name="a",
            tenant="a",
            schedule=Schedule(trigger=AtTrigger(at=at), misfire_grace_ms=3_600_000),
            target=TARGET,
        )
        await e2e.create_concurrently(service, one_shot, a_jobs)
        for k in range(b_jobs):  # every second, anchors spread over it
            anchor = at + timedelta(microseconds=k * 1_000_000 // max(b_jobs, 1))
            every = Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=anchor))
            await service.create(JobSpec(name=f"b{k}", tenant="b", schedule=every, target=TARGET))
    finally:
        await store.close()
    return round(time.monotonic() - started, 2)


async def _wait_for_a(url: str, a_jobs: int, stall_s: float = 30.0) -> float:
    """Poll until A's runs all finished (or none finished for `stall_s`)."""
    started = time.monotonic()
    last, last_change = -1, started
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        while time.monotonic() - started < 900:
            count = await conn.fetchval(
                "SELECT count(*) FROM tw_runs r JOIN tw_jobs j ON j.id = r.job_id"
                " WHERE j.tenant = 'a' AND r.status <> 'pending'"
            )
            now = time.monotonic()
            if count != last:
                last, last_change = count, now
            if count >= a_jobs or now - last_change > stall_s:
                break
            await asyncio.sleep(0.5)
    finally:
        await conn.close()
    return round(time.monotonic() - started, 2)


def analyse(runs: list[Any], t_us: int, a_jobs: int) -> dict[str, Any]:
    a_done = [r for r in runs if r["tenant"] == "a" and r["status"] == "succeeded"]
    last_us = max((r["finished_us"] for r in a_done), default=None)
    drain_s = math.nan if last_us is None else (last_us - t_us) / 1e6
    during = [
        r
        for r in runs
        if r["tenant"] == "b"
        and r["started_us"] is not None
        and last_us is not None
        and t_us <= r["scheduled_us"] <= last_us
    ]
    late_ms = [(r["started_us"] - r["scheduled_us"]) / 1000 for r in during]
    # When the scheduler claimed them (created) against their instant: negative is ahead.
    claimed_ms = [(r["created_us"] - r["scheduled_us"]) / 1000 for r in during]
    pairs = zip(late_ms, during, strict=True)
    at_instant = [late for late, r in pairs if r["scheduled_us"] < t_us + 100_000]
    return {
        "a_missing": a_jobs - len(a_done),
        "a_drain_s": round(drain_s, 2),
        "a_fires_per_s": round(len(a_done) / drain_s, 1) if drain_s > 0 else 0.0,
        "b_occurrences_during_drain": len(during),
        "b_lateness_ms": summary(late_ms),
        "b_claimed_ms": summary(claimed_ms),
        # B's fires due in the first 100 ms after T, when A's herd starts (ADR 0029).
        "b_at_instant_ms": summary(at_instant),
        # The latest of B's fires: (due after T, ms; late, ms), to see where they fall.
        "b_worst": [
            (round((r["scheduled_us"] - t_us) / 1000, 1), late)
            for late, r in sorted(zip(late_ms, during, strict=True), key=lambda p: -p[0])[:8]
        ],
    }


def _line(name: str, r: dict[str, Any]) -> str:
    b = r["b_lateness_ms"]
    c = r["b_claimed_ms"]
    b_text = (
        f", B p50 {b.get('p50')} p99 {b.get('p99')} max {b.get('max')} ms"
        f" (due in A's first 100 ms: max {r['b_at_instant_ms'].get('max')} ms)"
        f" (claimed p50 {c.get('p50')} p99 {c.get('p99')} ms; latest {r['b_worst']})"
        if b.get("n")
        else ""
    )
    return (
        f"{name}: A {r['a_jobs']} drained in {r['a_drain_s']} s ({r['a_fires_per_s']} fires/s,"
        f" missing {r['a_missing']}){b_text} over {r['b_occurrences_during_drain']} B fires"
    )


def main() -> None:
    try:
        asyncio.run(run(parse(sys.argv[1:])))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
