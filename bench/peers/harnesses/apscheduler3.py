"""APScheduler 3.11: BackgroundScheduler, SQLAlchemyJobStore on PostgreSQL, ThreadPoolExecutor.

burst: N `date` jobs at one instant T; precision: J `interval` jobs every second, their start
dates spread evenly over one second (the "spread" variant). Jobs are added while the scheduler
is started but paused (each add_job is an INSERT into the job store); T comes after the adds,
from a calibration of their rate; then the scheduler is resumed.

failover: the burst run by a child process (this script, `--role victim`) that adds the jobs
and runs them; SIGKILLed once `--kill-after` bodies have run, then another child (`--role
survivor`) starts a scheduler on the same job store at once (the jobs are not added again) and
runs what it finds there. A `date` job leaves the store right after the scheduler hands it to
its executor, before it has run: a job still queued in the dead process's executor is lost, and
one that ran before its removal runs again.

The scheduled instant of each execution: APScheduler does not hand it to the job function,
but its executor logs it ('Running job "..." (scheduled at ...)') in the worker thread just
before calling the function; a logging handler keeps it in a thread-local for the body.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

from _record import (
    BodyLog,
    count_keys,
    count_lines,
    harness_parser,
    kill_after,
    kill_after_bodies,
    report,
    wait_until,
)
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

THREADS = 10  # APScheduler's default ThreadPoolExecutor size
CALIBRATION_JOBS = 200
LEAD_S = 3.0  # T - estimated end of the adds
SETTLE_S = 2.0
CHILD_START_S = 2.0  # failover: the victim's start (imports, engine) before its adds

_current = threading.local()
_body: BodyLog | None = None
_count = 0
_count_lock = threading.Lock()


class ScheduledAt(logging.Handler):
    """Keeps the run time of the job about to run in this thread (from the executor's log)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("Running job") and record.args:
            args = record.args if isinstance(record.args, tuple) else ()
            if len(args) >= 2 and isinstance(args[1], datetime):
                _current.scheduled = args[1].timestamp()


def noop(key: str) -> None:
    """The job body: record that it ran (key, scheduled instant, now)."""
    global _count
    assert _body is not None
    _body.ran(key, getattr(_current, "scheduled", math.nan))
    with _count_lock:
        _count += 1


def executed() -> int:
    with _count_lock:
        return _count


def make_scheduler(dsn: str) -> BackgroundScheduler:
    url = dsn.replace("postgresql://", "postgresql+psycopg://", 1)
    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=url)},
        executors={"default": ThreadPoolExecutor(THREADS)},
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
        timezone=UTC,
    )


def add_rate(sched: BackgroundScheduler) -> float:
    """Jobs added per second, measured with far-future jobs that are then removed."""
    far = datetime.now(UTC) + timedelta(days=1)
    started = time.monotonic()
    for i in range(CALIBRATION_JOBS):
        sched.add_job(noop, "date", run_date=far, args=["cal"], id=f"cal{i}")
    rate = CALIBRATION_JOBS / (time.monotonic() - started)
    sched.remove_all_jobs()
    return rate


def add_burst(sched: BackgroundScheduler, jobs: int, t_s: float) -> None:
    run_date = datetime.fromtimestamp(t_s, UTC)
    for i in range(jobs):
        sched.add_job(noop, "date", run_date=run_date, args=[f"b{i}"], id=f"b{i}")


def burst(
    sched: BackgroundScheduler, a: argparse.Namespace, rate: float, end: float
) -> dict[str, Any]:
    t_s = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S)
    add_burst(sched, a.jobs, t_s)
    added_before_t = round(t_s - time.time(), 2)
    sched.resume()
    print("measuring", flush=True)
    completed = wait_until(executed, a.jobs, end, poll_s=0.05)
    return {"t_s": t_s, "added_before_t_s": added_before_t, "completed": completed}


def precision(
    sched: BackgroundScheduler, a: argparse.Namespace, rate: float, end: float
) -> dict[str, Any]:
    start = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S)
    stop = start + a.warmup_s + a.seconds + SETTLE_S
    last = datetime.fromtimestamp(stop, UTC)
    for i in range(a.jobs):
        first = datetime.fromtimestamp(start + i / a.jobs, UTC)
        sched.add_job(noop, "interval", seconds=1, start_date=first, end_date=last,
                      args=[f"p{i}"], id=f"p{i}")  # fmt: skip
    added_before_start = round(start - time.time(), 2)
    sched.resume()
    print("measuring", flush=True)
    time.sleep(max(0.0, min(stop, end) - time.time()))  # the window is fixed in time
    window_start = start + math.ceil(a.warmup_s)
    return {"window_start_s": window_start, "window_end_s": window_start + a.seconds,
            "jobs": a.jobs, "added_before_start_s": added_before_start}  # fmt: skip


def failover(a: argparse.Namespace, rate: float, end: float) -> dict[str, Any]:
    """The burst in a victim child, SIGKILLed after K bodies; then a survivor child at once."""
    t_s = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S + CHILD_START_S)
    argv = [sys.executable, __file__, "--scenario", "failover", "--jobs", str(a.jobs),
            "--body-log", a.body_log, "--work-dir", a.work_dir, "--budget-s", str(a.budget_s),
            "--pg-dsn", a.pg_dsn, "--at", str(t_s)]  # fmt: skip
    victim = [*argv, "--role", "victim", "--until", str(end)]
    killed_at = kill_after(victim, a.body_log, kill_after_bodies(a), end)
    before = count_lines(a.body_log)
    until = min(killed_at + a.recovery_s, end)
    restarted_at = time.time()
    survivor = [*argv, "--role", "survivor", "--until", str(until)]
    out = subprocess.run(survivor, check=True, stdout=subprocess.PIPE, text=True,
                         timeout=until - restarted_at + 30.0).stdout  # fmt: skip
    return {"t_s": t_s, "jobs": a.jobs, "kill_after": kill_after_bodies(a),
            "killed_at_s": killed_at, "bodies_before_kill": before,
            "restarted_at_s": restarted_at, "recovery_s": a.recovery_s,
            **json.loads(out.strip().splitlines()[-1])}  # fmt: skip


def run_victim(a: argparse.Namespace) -> None:
    """Failover child: add the burst to the job store and run it until the parent kills it."""
    sched = make_scheduler(a.pg_dsn)
    sched.start(paused=True)
    add_burst(sched, a.jobs, a.at)
    print(f"victim: {a.jobs} jobs added {a.at - time.time():.2f} s before T", file=sys.stderr)
    sched.resume()
    wait_until(executed, a.jobs, a.until, poll_s=0.05)
    sched.shutdown(wait=False)


def run_survivor(a: argparse.Namespace) -> dict[str, Any]:
    """Failover restart: a scheduler on the job store the victim left (nothing added), until
    every key has run (the victim's bodies included) or `--until`."""
    sched = make_scheduler(a.pg_dsn)
    sched.start(paused=True)
    in_store = len(sched.get_jobs())
    started_at = time.time()
    sched.resume()
    completed = wait_until(lambda: count_keys(a.body_log), a.jobs, a.until, poll_s=0.1)
    sched.shutdown(wait=False)
    return {"completed": completed, "jobs_in_store_at_restart": in_store,
            "survivor_resumed_at_s": started_at, "ran_after_restart": executed()}  # fmt: skip


def main() -> None:
    global _body
    ap = harness_parser(("burst", "precision", "failover"), service="pg-dsn")
    # internal: the failover parent runs this script as its children with these
    ap.add_argument("--role", choices=("victim", "survivor"), help=argparse.SUPPRESS)
    ap.add_argument("--at", type=float, help=argparse.SUPPRESS)  # T
    ap.add_argument("--until", type=float, help=argparse.SUPPRESS)  # the end of the wait
    a = ap.parse_args()
    began = time.time()
    logging.basicConfig(level=logging.WARNING)
    executor_log = logging.getLogger("apscheduler.executors.default")
    executor_log.setLevel(logging.INFO)  # the "Running job" record carries the run time
    executor_log.addHandler(ScheduledAt())
    executor_log.propagate = False
    _body = BodyLog(a.body_log)
    if a.role == "victim":
        run_victim(a)
        return
    if a.role == "survivor":
        report(**run_survivor(a))
        return
    sched = make_scheduler(a.pg_dsn)
    config = {"peer": "apscheduler", "apscheduler": version("apscheduler"),
              "sqlalchemy": version("sqlalchemy"), "psycopg": version("psycopg"),
              "scheduler": "BackgroundScheduler",
              "jobstore": "SQLAlchemyJobStore(postgresql+psycopg)",
              "executor": f"ThreadPoolExecutor({THREADS})", "misfire_grace_time": None,
              "coalesce": False}  # fmt: skip
    try:
        sched.start(paused=True)
        rate = add_rate(sched)
        end = began + a.budget_s
        if a.scenario == "failover":
            sched.shutdown(wait=False)  # the children run schedulers of their own
            found = failover(a, rate, end)
        else:
            run = burst if a.scenario == "burst" else precision
            found = run(sched, a, rate, end)
            sched.shutdown(wait=False)
        report(**config, **found, add_rate_per_s=round(rate, 1))
    except Exception as exc:  # the host reads the report line either way
        report(**config, error=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    main()
