"""APScheduler 3.11: BackgroundScheduler, SQLAlchemyJobStore on PostgreSQL, ThreadPoolExecutor.

burst: N `date` jobs at one instant T; precision: J `interval` jobs every second, their start
dates spread evenly over one second (the "spread" variant). Jobs are added while the scheduler
is started but paused (each add_job is an INSERT into the job store); T comes after the adds,
from a calibration of their rate; then the scheduler is resumed.

The scheduled instant of each execution: APScheduler does not hand it to the job function,
but its executor logs it ('Running job "..." (scheduled at ...)') in the worker thread just
before calling the function; a logging handler keeps it in a thread-local for the body.
"""

from __future__ import annotations

import argparse
import logging
import math
import threading
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

from _record import BodyLog, harness_parser, report, wait_until
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

THREADS = 10  # APScheduler's default ThreadPoolExecutor size
CALIBRATION_JOBS = 200
LEAD_S = 3.0  # T - estimated end of the adds
SETTLE_S = 2.0

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


def burst(
    sched: BackgroundScheduler, a: argparse.Namespace, rate: float, end: float
) -> dict[str, Any]:
    t_s = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S)
    run_date = datetime.fromtimestamp(t_s, UTC)
    for i in range(a.jobs):
        sched.add_job(noop, "date", run_date=run_date, args=[f"b{i}"], id=f"b{i}")
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


def main() -> None:
    global _body
    a = harness_parser(("burst", "precision"), service="pg-dsn").parse_args()
    began = time.time()
    logging.basicConfig(level=logging.WARNING)
    executor_log = logging.getLogger("apscheduler.executors.default")
    executor_log.setLevel(logging.INFO)  # the "Running job" record carries the run time
    executor_log.addHandler(ScheduledAt())
    executor_log.propagate = False
    _body = BodyLog(a.body_log)
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
        run = burst if a.scenario == "burst" else precision
        found = run(sched, a, rate, end)
        sched.shutdown(wait=False)
        report(**config, **found, add_rate_per_s=round(rate, 1))
    except Exception as exc:  # the host reads the report line either way
        report(**config, error=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    main()
