"""The herd: N jobs whose occurrence falls on the same instant, with a flexible window of 0, 5
and 30 seconds (issue 21; ADR 0022), end to end on PostgreSQL.

    uv run --group bench python -m bench.herd [--jobs 100000] [--windows 0,5,30] [--png FILE]

Per window, on a fresh database with fresh api, scheduler and worker processes (the table
queue, a no-op Python task, as `bench.e2e`'s task burst): N one-shots at T with
`schedule.window` W, created through the job service (which places each in the least loaded
second of [T, T + W] as it creates it), then fired. Measured from the runs table:

- the planned spread: jobs planned per second of the window (max and min);
- fires per second over time (started_us per second) and its peak;
- lateness against each run's planned instant (`started - coalesce(planned, scheduled)`),
  p50/p99/max: the window delays fires on purpose, so lateness counts from where it put them;
- the drain: from T to the last finish.

With matplotlib (the `bench` dependency group) it draws fires per second over time for every
window into one PNG (default docs/img/herd.png). The figures go to stdout and, with --json, as
one JSON object per window.
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
from collections import Counter
from datetime import UTC, datetime
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
from tickwork.domain.jobs import AtTrigger, Schedule, TaskTarget
from tickwork.services.jobs import JobService, JobSpec
from tickwork.store.postgres import PostgresStore, asyncpg_dsn

DEFAULT_PNG = Path("docs/img/herd.png")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.herd", description=__doc__)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--windows", default="0,5,30", help="seconds, comma-separated")
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN)
    parser.add_argument("--png", type=Path, default=DEFAULT_PNG)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    admin = Admin(args.pg_dsn, secrets.token_hex(3))
    await admin.open()
    results = []
    try:
        attribution = await attribution_of(admin)
        with tempfile.TemporaryDirectory(prefix="tickwork-herd-") as tmp:
            env = Env(
                run_id="herd", quick=False, tmp=Path(tmp), admin=admin, attribution=attribution
            )
            for window_s in [int(w) for w in args.windows.split(",")]:
                result = await herd_case(env, args.jobs, window_s)
                results.append(result)
                print(_line(result), flush=True)
                if args.json:
                    print(json.dumps(result, default=str), flush=True)
    finally:
        await admin.close()
    if args.png:
        _plot(results, args.png)
    return results


async def herd_case(env: Env, jobs: int, window_s: int) -> dict[str, Any]:
    await asyncio.to_thread(wait_for_quiet, env.attribution, max_wait_s=10.0)
    db = await env.admin.create(f"herd_{window_s}")
    url, tag = env.admin.dsn(db), f"herd-{window_s}"
    cfg = e2e.E2EConfig(burst_jobs=jobs)
    t_us = e2e.burst_instant(cfg)
    result: dict[str, Any] = {"jobs": jobs, "window_s": window_s}
    result["create_s"] = await _create(url, jobs, t_us, window_s)
    async with e2e.roles(env, url, None, tag, result, ("--import", "bench.noop_task")):
        result["ready_before_t_s"] = round(t_us / 1e6 - time.time(), 2)
        await asyncio.sleep(max(0.0, t_us / 1e6 - time.time()))
        result["waited_s"], _polls = await e2e._wait_for_runs(url, cfg)
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        runs = await conn.fetch(
            "SELECT scheduled_us, planned_us, started_us, finished_us, status FROM tw_runs"
        )
    finally:
        await conn.close()
    await env.admin.drop(db)
    return result | analyse(list(runs), t_us, jobs, window_s)


async def _create(url: str, jobs: int, t_us: int, window_s: int) -> float:
    """N one-shots at T with the window, through the job service (16 concurrent creators)."""
    started = time.monotonic()
    at = datetime.fromtimestamp(t_us / 1e6, UTC)
    spec = JobSpec(
        name="bench-herd",
        schedule=Schedule(
            trigger=AtTrigger(at=at), misfire_grace_ms=3_600_000, window_ms=window_s * 1000
        ),
        target=TaskTarget(name=NOOP_TASK),
    )
    store = PostgresStore(url, pool_size=16)
    await store.open()
    try:
        await e2e.create_concurrently(JobService(store, SystemClock()), spec, jobs)
    finally:
        await store.close()
    return round(time.monotonic() - started, 2)


def analyse(runs: list[Any], t_us: int, jobs: int, window_s: int) -> dict[str, Any]:
    done = [r for r in runs if r["status"] == "succeeded"]
    planned = [r["planned_us"] or r["scheduled_us"] for r in runs]
    planned_per_s = Counter((p - t_us) // 1_000_000 for p in planned)
    seconds = range(max(window_s, 1))  # [T, T + W): W whole seconds (T's own for W = 0)
    spread = [planned_per_s.get(s, 0) for s in seconds]
    started_per_s = Counter((r["started_us"] - t_us) // 1_000_000 for r in done)
    last = max(started_per_s, default=0)
    series = [started_per_s.get(s, 0) for s in range(0, last + 1)]
    # For the plot: fires started per 100 ms, as a rate per second, from T.
    per_tenth = Counter((r["started_us"] - t_us) // 100_000 for r in done)
    tenths = [10 * per_tenth.get(k, 0) for k in range(0, max(per_tenth, default=0) + 2)]
    late_ms = [(r["started_us"] - (r["planned_us"] or r["scheduled_us"])) / 1000 for r in done]
    last_us = max((r["finished_us"] for r in done), default=None)
    return {
        "missing": jobs - len(done),
        "planned_per_s_max": max(spread),
        "planned_per_s_min": min(spread),
        "peak_fires_per_s": max(series, default=0),
        "fires_per_s_series": series,
        "rate_by_100ms": tenths,
        "lateness_vs_planned_ms": summary(late_ms),
        "drain_s": math.nan if last_us is None else round((last_us - t_us) / 1e6, 2),
    }


def _line(r: dict[str, Any]) -> str:
    late = r["lateness_vs_planned_ms"]
    return (
        f"window {r['window_s']:>2} s: {r['jobs']} jobs, planned per second"
        f" {r['planned_per_s_min']}..{r['planned_per_s_max']}, peak {r['peak_fires_per_s']}"
        f" fires/s, lateness vs planned p50 {late.get('p50')} p99 {late.get('p99')}"
        f" max {late.get('max')} ms, drained {r['drain_s']} s after T, missing {r['missing']}"
    )


def _plot(results: list[dict[str, Any]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no matplotlib (uv run --group bench ...): {path} not drawn", flush=True)
        return
    figure, axes = plt.subplots(figsize=(8, 4))
    for r in results:
        rates = r["rate_by_100ms"]
        seconds = [k / 10 for k in range(len(rates))]
        axes.step(seconds, rates, where="post", label=f"window {r['window_s']} s")
    axes.set_xlabel("seconds after the herd's instant")
    axes.set_ylabel("fires started per second (100 ms bins)")
    axes.set_yscale("log")
    axes.set_title(f"{results[0]['jobs']:,} jobs due at one instant")
    axes.legend()
    axes.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    print(f"drew {path}", flush=True)


def main() -> None:
    try:
        asyncio.run(run(parse(sys.argv[1:])))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
