"""Celery 5 with `apply_async(eta=T)` on a Redis broker: the one-shot burst without beat.

One `celery worker` (prefork pool, concurrency = cores: Celery's defaults) starts first; N
no-op tasks are then sent with eta=T. The worker reserves ETA tasks at once and holds them in
memory until T (Celery's documented behaviour), so this measures the worker's timer and pool.
Celery has no every-second schedule without beat: the precision scenario is celery_redbeat's.

failover: the same burst, the worker (its main process and its pool: its process group)
killed with SIGKILL once `--kill-after` bodies have run, and a new worker started at once on the
same Redis DB, as a supervisor would. The tasks the dead worker had reserved stay unacknowledged
in Redis; the Redis transport delivers them again only once its `visibility_timeout` (1 hour by
default, left so) has passed: within `--recovery-s` they are missing, which is the finding.

This file is also the worker's app module (`celery -A celery_eta`): the driver code runs only
as __main__; the app reads its broker and body log from the environment.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

import _celery
from _record import (
    count_keys,
    count_lines,
    group_pids,
    harness_parser,
    kill_after_bodies,
    kill_at,
    report,
    wait_until,
)
from celery import Celery
from kombu.transport.redis import Channel

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


def send_burst(a: argparse.Namespace) -> dict[str, Any]:
    """Send the N tasks with eta=T, T after the sends' estimated end; print `measuring`."""
    rate = send_rate()
    t_s = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S)
    eta = datetime.fromtimestamp(t_s, UTC)
    with app.producer_or_acquire() as producer:
        for i in range(a.jobs):
            noop.apply_async((f"b{i}", t_s), eta=eta, producer=producer)
    sent_before_t = round(t_s - time.time(), 2)
    print("measuring", flush=True)
    return {"t_s": t_s, "sent_before_t_s": sent_before_t, "send_rate_per_s": round(rate, 1)}


def burst(a: argparse.Namespace, end: float) -> dict[str, Any]:
    sent = send_burst(a)
    completed = wait_until(lambda: count_lines(a.body_log), a.jobs, end, poll_s=0.1)
    return {"t_s": sent["t_s"], "sent_before_t_s": sent["sent_before_t_s"],
            "completed": completed, "send_rate_per_s": sent["send_rate_per_s"]}  # fmt: skip


def failover(a: argparse.Namespace, worker: subprocess.Popen[bytes], end: float) -> dict[str, Any]:
    """The burst; SIGKILL of the worker's process group after K bodies; a new worker at once."""
    sent = send_burst(a)
    victims = group_pids(worker.pid)  # the worker and its pool processes
    killed_at = kill_at(worker, a.body_log, kill_after_bodies(a), end, group=True)
    before = count_lines(a.body_log)
    restarted_at = time.time()
    restarted = _celery.start("celery_eta", "worker-restarted", _celery.WORKER, a, session=True)
    try:
        time.sleep(0.5)  # the SIGKILL has taken effect on every pool process by then
        survived = [pid for pid in victims if pid in group_pids(worker.pid)]
        until = min(killed_at + a.recovery_s, end)
        completed = wait_until(lambda: count_keys(a.body_log), a.jobs, until, poll_s=0.1)
    finally:
        _celery.stop(restarted, group=True)
    with app.connection_for_write() as conn:
        # delivered, never acknowledged: what the transport delivers again after the timeout
        channel: Any = conn.default_channel
        unacked = channel.client.hlen(channel.unacked_key)
    options = app.conf.broker_transport_options or {}
    return {**sent, "jobs": a.jobs, "kill_after": kill_after_bodies(a), "killed_at_s": killed_at,
            "bodies_before_kill": before, "restarted_at_s": restarted_at,
            "recovery_s": a.recovery_s, "completed": completed,
            "killed_processes": len(victims), "survived_kill": len(survived),
            # not in broker_transport_options: the Redis transport's own default
            "visibility_timeout_s": options.get("visibility_timeout", Channel.visibility_timeout),
            "visibility_timeout_configured": "visibility_timeout" in options,
            "unacked_at_end": unacked}  # fmt: skip


def main() -> None:
    a = harness_parser(("burst", "failover"), service="redis-url").parse_args()
    end = time.time() + a.budget_s
    app.conf.broker_url = a.redis_url
    config = {"peer": "celery_eta", "celery": version("celery"), "redis_py": version("redis"),
              "broker": "redis", "pool": "prefork", "concurrency": os.cpu_count(),
              "prefetch_multiplier": app.conf.worker_prefetch_multiplier}  # fmt: skip
    # failover: in a session of its own, so that the kill takes its pool processes too
    group = a.scenario == "failover"
    worker = _celery.start("celery_eta", "worker", _celery.WORKER, a, session=group)
    try:
        _celery.wait_ready(app, worker)
        found = failover(a, worker, end) if group else burst(a, end)
        report(**config, **found)
    except Exception as exc:  # the host reads the report line either way
        report(**config, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        _celery.stop(worker, group=group)  # the killed one: already reaped, nothing to do


if __name__ == "__main__":
    main()
