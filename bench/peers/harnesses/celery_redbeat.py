"""Celery 5 beat with RedBeat (the schedule in Redis) and one worker, on a Redis broker.

burst: N RedBeat entries with an rrule schedule of one occurrence (count=1) at T, the way
RedBeat expresses a one-shot; precision: J entries with an rrule SECONDLY schedule, which
starts on whole seconds only (every entry at the top of each second: the "aligned" variant).
Entries are saved straight into Redis before beat starts; `last_run_at` is the save time, so
the first occurrence is the rrule's first. One `celery beat -S ...` and one `celery worker`
(prefork, concurrency = cores: Celery's defaults), children of this script, stopped by pid.

The scheduled instant of each execution: beat does not send it, so the scheduler class is
RedBeat's with one override that adds it (the rrule's next occurrence after `last_run_at`, the
one beat is about to send) to the task's kwargs before RedBeat's own `maybe_due`.

This file is also the app module of both children (`celery -A celery_redbeat`).
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
from datetime import MINYEAR, UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from _record import BodyLog, report
from celery import Celery
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.schedules import rrule

LEAD_S = 4.0  # T - end of the saves: beat and worker start in this time
SETTLE_S = 2.0
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

_url = os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/9")
app = Celery("celery_redbeat", broker=_url)
app.conf.update(
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    timezone="UTC",
    enable_utc=True,
    redbeat_redis_url=_url,
    redbeat_key_prefix="tw-peer:",
)
_body: BodyLog | None = None


@app.task(name="noop")
def noop(key: str, scheduled_s: float = math.nan) -> None:
    """The job body: record that it ran. The log opens in the pool process that runs it."""
    global _body
    if _body is None:
        _body = BodyLog(os.environ["PEER_BODY_LOG"])
    _body.ran(key, scheduled_s)


class StampingRedBeat(RedBeatScheduler):  # type: ignore[misc]
    """RedBeat's scheduler, adding the occurrence's instant to the task it sends."""

    def maybe_due(self, entry: Any, **kwargs: Any) -> Any:
        since = entry.last_run_at or datetime(MINYEAR, 1, 2, tzinfo=UTC)
        due = entry.schedule.rrule.after(entry.schedule.maybe_make_aware(since))
        if due is not None:
            aware = entry.schedule.maybe_make_aware(due)
            entry.kwargs = {**(entry.kwargs or {}), "scheduled_s": aware.timestamp()}
        return super().maybe_due(entry, **kwargs)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", choices=("burst", "precision"), required=True)
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--seconds", type=int, default=0)
    ap.add_argument("--warmup-s", type=float, default=0.0)
    ap.add_argument("--body-log", required=True)
    ap.add_argument("--work-dir", default=".")
    ap.add_argument("--budget-s", type=float, default=290.0)
    ap.add_argument("--redis-url", required=True)
    return ap.parse_args()


def start(kind: str, a: argparse.Namespace) -> subprocess.Popen[bytes]:
    base = [sys.executable, "-m", "celery", "-A", "celery_redbeat"]
    if kind == "worker":
        cmd = [*base, "worker", "-l", "WARNING", "-P", "prefork", "-c", str(os.cpu_count() or 1),
               "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    else:
        cmd = [*base, "beat", "-l", "WARNING", "-S", "celery_redbeat.StampingRedBeat",
               "--pidfile=", "-s", str(Path(a.work_dir) / "beat-schedule")]  # fmt: skip
    log = open(Path(a.work_dir) / f"{kind}.log", "wb")  # noqa: SIM115 - the child keeps it
    env = dict(os.environ, PEER_REDIS_URL=a.redis_url, PEER_BODY_LOG=a.body_log)
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_ready(worker: subprocess.Popen[bytes]) -> None:
    """Until the worker answers a ping (it consumes from then on)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.returncode}")
        if app.control.ping(timeout=1.0):
            return
    raise RuntimeError("worker did not answer a ping")


def stop(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL, of this child's pid only."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def count_lines(path: str) -> int:
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def wait_for(path: str, count: int, deadline: float) -> bool:
    """Poll the body log until `count` lines or the deadline (a benchmark's bounded wait)."""
    while time.time() < deadline:
        if count_lines(path) >= count:
            return True
        time.sleep(0.1)
    return False


def save_entries(prefix: str, jobs: int, schedule: Any) -> float:
    """Save `jobs` entries of `schedule`; returns the seconds it took."""
    started = time.monotonic()
    now = datetime.now(UTC)
    for i in range(jobs):
        entry = RedBeatSchedulerEntry(
            name=f"{prefix}{i}", task="noop", schedule=schedule, args=[f"{prefix}{i}"], app=app
        )
        entry.last_run_at = now  # so the first due instant is the rrule's first occurrence
        entry.save()
    return time.monotonic() - started


def save_rate() -> float:
    """Entries saved per second, measured with entries that are then deleted."""
    far = datetime.fromtimestamp(math.ceil(time.time()) + 86_400, UTC)
    took = save_entries("cal", 200, rrule("SECONDLY", dtstart=far, count=1))
    for i in range(200):
        RedBeatSchedulerEntry(name=f"cal{i}", app=app).delete()
    return 200 / took


def run(a: argparse.Namespace, end: float) -> dict[str, Any]:
    rate = save_rate()
    start_s = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S)
    first = datetime.fromtimestamp(start_s, UTC)
    if a.scenario == "burst":
        schedule = rrule("SECONDLY", dtstart=first, count=1)
        stop_s = end
    else:
        stop_s = start_s + a.warmup_s + a.seconds + SETTLE_S
        schedule = rrule("SECONDLY", dtstart=first, until=datetime.fromtimestamp(stop_s, UTC))
    save_entries("b" if a.scenario == "burst" else "p", a.jobs, schedule)
    worker, beat = start("worker", a), start("beat", a)
    try:
        wait_ready(worker)
        ready_before = round(start_s - time.time(), 2)
        print("measuring", flush=True)
        if a.scenario == "burst":
            completed = wait_for(a.body_log, a.jobs, end)
            return {"t_s": start_s, "ready_before_t_s": ready_before, "completed": completed,
                    "save_rate_per_s": round(rate, 1)}  # fmt: skip
        time.sleep(max(0.0, min(stop_s, end) - time.time()))  # the window is fixed in time
        window_start = start_s + math.ceil(a.warmup_s)
        return {"window_start_s": window_start, "window_end_s": window_start + a.seconds,
                "jobs": a.jobs, "ready_before_start_s": ready_before,
                "save_rate_per_s": round(rate, 1)}  # fmt: skip
    finally:
        stop(beat)
        stop(worker)


def main() -> None:
    a = parse()
    end = time.time() + a.budget_s
    app.conf.broker_url = app.conf.redbeat_redis_url = a.redis_url
    config = {"peer": "celery_redbeat", "celery": version("celery"),
              "celery_redbeat": version("celery-redbeat"), "redis_py": version("redis"),
              "broker": "redis", "pool": "prefork", "concurrency": os.cpu_count(),
              "beat_max_loop_interval_s": StampingRedBeat.max_interval,
              "schedule": "rrule SECONDLY (count=1 for the burst)"}  # fmt: skip
    try:
        report(**config, **run(a, end))
    except Exception as exc:  # the host reads the report line either way
        report(**config, error=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    main()
