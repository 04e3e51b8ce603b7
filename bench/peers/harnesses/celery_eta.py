"""Celery 5 with `apply_async(eta=T)` on a Redis broker: the one-shot burst without beat.

One `celery worker` (prefork pool, concurrency = cores: Celery's defaults) starts first; N
no-op tasks are then sent with eta=T. The worker reserves ETA tasks at once and holds them in
memory until T (Celery's documented behaviour), so this measures the worker's timer and pool.
Celery has no every-second schedule without beat: the precision scenario is celery_redbeat's.

This file is also the worker's app module (`celery -A celery_eta`): the driver code runs only
as __main__; the app reads its broker and body log from the environment.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from _record import BodyLog, report
from celery import Celery

CALIBRATION_TASKS = 300
LEAD_S = 3.0  # T - estimated end of the sends
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

app = Celery("celery_eta", broker=os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/8"))
app.conf.update(
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    timezone="UTC",
    enable_utc=True,
)
_body: BodyLog | None = None


@app.task(name="noop")
def noop(key: str, scheduled_s: float) -> None:
    """The job body: record that it ran. The log opens in the pool process that runs it."""
    global _body
    if _body is None:
        _body = BodyLog(os.environ["PEER_BODY_LOG"])
    _body.ran(key, scheduled_s)


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", choices=("burst",), required=True)
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--seconds", type=int, default=0)
    ap.add_argument("--warmup-s", type=float, default=0.0)
    ap.add_argument("--body-log", required=True)
    ap.add_argument("--work-dir", default=".")
    ap.add_argument("--budget-s", type=float, default=290.0)
    ap.add_argument("--redis-url", required=True)
    return ap.parse_args()


def start_worker(a: argparse.Namespace) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "celery", "-A", "celery_eta", "worker", "-l", "WARNING",
           "-P", "prefork", "-c", str(os.cpu_count() or 1),
           "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    log = open(Path(a.work_dir) / "worker.log", "wb")  # noqa: SIM115 - the child keeps it
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
    """SIGTERM (warm shutdown), then SIGKILL, of this child's pid only."""
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


def send_rate() -> float:
    """Tasks sent per second, measured on a queue no worker consumes."""
    far = datetime.now(UTC) + timedelta(days=1)
    started = time.monotonic()
    with app.producer_or_acquire() as producer:
        for _ in range(CALIBRATION_TASKS):
            noop.apply_async(("cal", 0.0), eta=far, queue="calibration", producer=producer)
    return CALIBRATION_TASKS / (time.monotonic() - started)


def burst(a: argparse.Namespace, end: float) -> dict[str, Any]:
    rate = send_rate()
    t_s = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S)
    eta = datetime.fromtimestamp(t_s, UTC)
    with app.producer_or_acquire() as producer:
        for i in range(a.jobs):
            noop.apply_async((f"b{i}", t_s), eta=eta, producer=producer)
    sent_before_t = round(t_s - time.time(), 2)
    print("measuring", flush=True)
    completed = wait_for(a.body_log, a.jobs, end)
    return {"t_s": t_s, "sent_before_t_s": sent_before_t, "completed": completed,
            "send_rate_per_s": round(rate, 1)}  # fmt: skip


def main() -> None:
    a = parse()
    end = time.time() + a.budget_s
    app.conf.broker_url = a.redis_url
    config = {"peer": "celery_eta", "celery": version("celery"), "redis_py": version("redis"),
              "broker": "redis", "pool": "prefork", "concurrency": os.cpu_count(),
              "prefetch_multiplier": app.conf.worker_prefetch_multiplier}  # fmt: skip
    worker = start_worker(a)
    try:
        wait_ready(worker)
        report(**config, **burst(a, end))
    except Exception as exc:  # the host reads the report line either way
        report(**config, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        stop(worker)


if __name__ == "__main__":
    main()
