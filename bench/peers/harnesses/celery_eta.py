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
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

import _celery
from _record import count_lines, harness_parser, report, wait_until
from celery import Celery

CALIBRATION_TASKS = 300
LEAD_S = 3.0  # T - estimated end of the sends

app = Celery("celery_eta", broker=os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/8"))
app.conf.update(_celery.CONF)


@app.task(name="noop")
def noop(key: str, scheduled_s: float) -> None:
    """The job body: record that it ran."""
    _celery.ran(key, scheduled_s)


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
    completed = wait_until(lambda: count_lines(a.body_log), a.jobs, end, poll_s=0.1)
    return {"t_s": t_s, "sent_before_t_s": sent_before_t, "completed": completed,
            "send_rate_per_s": round(rate, 1)}  # fmt: skip


def main() -> None:
    a = harness_parser(("burst",), service="redis-url").parse_args()
    end = time.time() + a.budget_s
    app.conf.broker_url = a.redis_url
    config = {"peer": "celery_eta", "celery": version("celery"), "redis_py": version("redis"),
              "broker": "redis", "pool": "prefork", "concurrency": os.cpu_count(),
              "prefetch_multiplier": app.conf.worker_prefetch_multiplier}  # fmt: skip
    worker = _celery.start("celery_eta", "worker", _celery.WORKER, a)
    try:
        _celery.wait_ready(app, worker)
        report(**config, **burst(a, end))
    except Exception as exc:  # the host reads the report line either way
        report(**config, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        _celery.stop(worker)


if __name__ == "__main__":
    main()
