"""Procrastinate 3.10 on PostgreSQL, in an empty database of its own (`--pg-dsn`; the caller
creates and drops it; this script applies Procrastinate's schema).

Scenarios (one per run, `--scenario`):
  burst      N one-shots deferred with `schedule_at=T` (batch_defer_async, 1,000 per call), then
             one worker (`run_worker_async`, asyncio concurrency `--concurrency`) in this process.
  precision  K periodic tasks (`@app.periodic`, cron with a seconds field: every second) run by
             the same worker for `--seconds` seconds after `--warmup-s`.
  failover   a burst in a child process of this script, killed with SIGKILL once `--kill-after`
             bodies have run, then a fresh worker on the same database. Procrastinate does not
             re-run the killed worker's `doing` jobs on its own; with `--retry-stalled` the
             restarted worker first retries them (the recipe in its docs: get_stalled_jobs ->
             retry_job), which is where duplicates can come from.

Why the polling interval matters: LISTEN/NOTIFY fires when a job is deferred, not when its
`schedule_at` comes, so a scheduled job is noticed only by the worker's next poll
(`fetch_job_polling_interval`, 5 s by default).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import logging
import subprocess
import sys
import time
from typing import Any

import procrastinate
import psycopg
from _record import BodyLog, count_lines, kill_after, report

BATCH = 1000
UTC = dt.UTC


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=["burst", "precision", "failover"], required=True)
    p.add_argument("--body-log", required=True)
    p.add_argument("--pg-dsn", required=True, help="an empty database of its own")
    p.add_argument("--jobs", type=int, default=10_000, help="burst: N; precision: K")
    p.add_argument("--seconds", type=int, default=60, help="precision: seconds measured")
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--work-dir", default=".")
    p.add_argument("--budget-s", type=float, default=290.0, help="the whole run, at most")
    p.add_argument("--lead", type=float, default=20.0, help="seconds from start to T (burst)")
    p.add_argument("--concurrency", type=int, default=10, help="worker asyncio concurrency")
    p.add_argument("--poll", type=float, default=0.5, help="fetch_job_polling_interval (s)")
    p.add_argument("--pool-max", type=int, default=20, help="connector pool max_size")
    p.add_argument("--kill-after", type=int, default=3000, help="failover: bodies before kill")
    p.add_argument("--retry-stalled", action="store_true", help="failover: retry stalled jobs")
    # internal: the failover parent runs itself with these
    p.add_argument("--role", choices=["victim", "survivor"], help=argparse.SUPPRESS)
    p.add_argument("--at", type=float, help=argparse.SUPPRESS)
    p.add_argument("--started", type=float, help=argparse.SUPPRESS)
    return p.parse_args()


class Harness:
    """The app, its no-op task and the body log; `ran` counts bodies run in this process."""

    def __init__(self, dsn: str, log_path: str, pool_max: int) -> None:
        self.log = BodyLog(log_path)
        self.ran = 0
        self.target = 0  # wait_count's goal: the body sets all_ran when it is reached
        self.all_ran = asyncio.Event()
        self.app = procrastinate.App(
            connector=procrastinate.PsycopgConnector(conninfo=dsn, min_size=2, max_size=pool_max)
        )

        @self.app.task(name="noop", queue="default")
        async def noop(key: str, scheduled_s: float) -> None:
            self.log.ran(key, scheduled_s)
            self.ran += 1
            if self.ran >= self.target:
                self.all_ran.set()

        @self.app.task(name="tick", queue="default")
        async def tick(timestamp: int, pid: str) -> None:
            self.log.ran(f"{pid}@{timestamp}", float(timestamp))
            self.ran += 1

        self.noop = noop
        self.tick = tick

    def start_worker(self, args: argparse.Namespace) -> asyncio.Task[None]:
        return asyncio.create_task(
            self.app.run_worker_async(
                concurrency=args.concurrency,
                fetch_job_polling_interval=args.poll,
                install_signal_handlers=False,
                wait=True,
            )
        )


async def stop_worker(worker: asyncio.Task[None]) -> None:
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(worker, timeout=30)


async def wait_count(h: Harness, target: int, deadline: float) -> None:
    h.target = target
    if h.ran >= target:
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(h.all_ran.wait(), max(0.0, deadline - time.time()))


async def defer_burst(h: Harness, n: int, at: float) -> float:
    """Defer n one-shots due at `at`; returns when the last batch was committed."""
    when = dt.datetime.fromtimestamp(at, UTC)
    deferrer = h.noop.configure(schedule_at=when)
    for start in range(0, n, BATCH):
        batch: list[dict[str, Any]] = [
            {"key": f"b-{i}", "scheduled_s": at} for i in range(start, min(n, start + BATCH))
        ]
        await deferrer.batch_defer_async(*batch)
    return time.time()


def config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "peer": "procrastinate",
        "version": procrastinate.__version__,
        "psycopg": psycopg.__version__,
        "concurrency": args.concurrency,
        "fetch_job_polling_interval_s": args.poll,
        "listen_notify": True,
        "pool_max": args.pool_max,
        "worker_processes": 1,
    }


def deadline(args: argparse.Namespace, started: float) -> float:
    """When to stop waiting, so the whole run stays within --budget-s (cleanup included)."""
    budget: float = args.budget_s
    return started + budget - 30.0


async def run_burst(args: argparse.Namespace, started: float) -> dict[str, Any]:
    h = Harness(args.pg_dsn, args.body_log, args.pool_max)
    async with h.app.open_async():
        await h.app.schema_manager.apply_schema_async()
        at = float(int(time.time() + args.lead))
        t0 = time.time()
        deferred_at = await defer_burst(h, args.jobs, at)
        worker = h.start_worker(args)
        print("measuring", flush=True)
        await wait_count(h, args.jobs, deadline(args, started))
        await stop_worker(worker)
    return {
        "t_s": at,
        "jobs": args.jobs,
        "defer_s": round(deferred_at - t0, 3),
        "all_deferred_before_t": deferred_at < at,
    }


async def run_precision(args: argparse.Namespace) -> dict[str, Any]:
    h = Harness(args.pg_dsn, args.body_log, args.pool_max)
    for j in range(args.jobs):
        pid = f"p{j}"
        # six cron fields: croniter reads the sixth as seconds
        h.app.periodic(cron="* * * * * *", periodic_id=pid, task_kwargs={"pid": pid})(h.tick)
    async with h.app.open_async():
        await h.app.schema_manager.apply_schema_async()
        worker = h.start_worker(args)
        start = float(int(time.time() + args.warmup_s) + 1)
        end = start + args.seconds
        print("measuring", flush=True)
        # the window's last occurrences get a few seconds to run (later ones count as late)
        await asyncio.sleep(max(0.0, end + 5.0 - time.time()))
        await stop_worker(worker)
    return {
        "window_start_s": start,
        "window_end_s": end,
        "jobs": args.jobs,
        "cron": "* * * * * * (sixth field: seconds)",
    }


async def run_victim(args: argparse.Namespace, started: float) -> None:
    """Failover child: defer the burst and work it until the parent kills this process."""
    h = Harness(args.pg_dsn, args.body_log, args.pool_max)
    async with h.app.open_async():
        await h.app.schema_manager.apply_schema_async()
        await defer_burst(h, args.jobs, args.at)
        worker = h.start_worker(args)
        await wait_count(h, args.jobs, deadline(args, started))
        await stop_worker(worker)


async def run_survivor(args: argparse.Namespace, started: float) -> dict[str, Any]:
    h = Harness(args.pg_dsn, args.body_log, args.pool_max)
    retried = 0
    async with h.app.open_async():
        if args.retry_stalled:
            # The docs' recipe for a worker that died: retry the jobs it left in `doing`.
            # seconds_since_heartbeat=0 because we know it is dead (we killed it).
            stalled = await h.app.job_manager.get_stalled_jobs(seconds_since_heartbeat=0)
            for job in stalled:
                await h.app.job_manager.retry_job(job)
                retried += 1
        worker = h.start_worker(args)
        with psycopg.connect(args.pg_dsn, autocommit=True) as conn:
            while time.time() < deadline(args, started):
                row = conn.execute(
                    "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo'"
                ).fetchone()
                if row is not None and row[0] == 0:
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)  # the last fetched jobs finish
            left = conn.execute(
                "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1"
            ).fetchall()
        await stop_worker(worker)
    return {"retried_stalled": retried, "jobs_by_status_after": {s: n for s, n in left}}


def run_failover(args: argparse.Namespace, started: float) -> dict[str, Any]:
    at = float(int(time.time() + args.lead))
    argv = [sys.executable, __file__, "--scenario", "failover", "--body-log", args.body_log,
            "--pg-dsn", args.pg_dsn, "--at", str(at), "--jobs", str(args.jobs),
            "--concurrency", str(args.concurrency), "--poll", str(args.poll),
            "--pool-max", str(args.pool_max), "--budget-s", str(args.budget_s),
            "--started", str(started)]  # fmt: skip
    victim = [*argv, "--role", "victim"]
    killed_at = kill_after(victim, args.body_log, args.kill_after, deadline(args, started))
    before = count_lines(args.body_log)
    survivor = [*argv, "--role", "survivor"]
    if args.retry_stalled:
        survivor.append("--retry-stalled")
    out = subprocess.run(survivor, check=True, capture_output=True, text=True).stdout
    return {
        "t_s": at,
        "jobs": args.jobs,
        "killed_at_s": killed_at,
        "bodies_before_kill": before,
        "retry_stalled": args.retry_stalled,
        "survivor": json.loads(out.strip().splitlines()[-1]),
    }


def main() -> None:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    started = args.started or time.time()
    if args.role == "victim":
        asyncio.run(run_victim(args, started))
        return
    if args.role == "survivor":
        print(json.dumps(asyncio.run(run_survivor(args, started))), flush=True)
        return
    if args.scenario == "burst":
        result = asyncio.run(run_burst(args, started))
    elif args.scenario == "precision":
        result = asyncio.run(run_precision(args))
    else:
        result = run_failover(args, started)
    report(**config(args), **result)


if __name__ == "__main__":
    main()
