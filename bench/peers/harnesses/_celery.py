"""What celery_eta and celery_redbeat share (stdlib only, like _record): the app settings, the
task body, and the Celery children (worker, beat) they start, wait for and stop.

Each harness file is also its children's app module (`celery -A <module>`); the children get
the broker and the body log from the environment (PEER_REDIS_URL, PEER_BODY_LOG), write their
output to `<work dir>/<kind>.log`, and are stopped by their own pid only; a child started in a
session of its own (a failover's worker, killed with its pool) by its own process group.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _record import BodyLog, exited, kill_group

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0

# Settings of both apps: results ignored (the body log is the result), the broker connection
# retried at startup (Celery 5.3+ warns unless this is set), the harness's logging left alone,
# times in UTC.
CONF: dict[str, Any] = {
    "task_ignore_result": True,
    "broker_connection_retry_on_startup": True,
    "worker_hijack_root_logger": False,
    "timezone": "UTC",
    "enable_utc": True,
}

# One worker with Celery's defaults (prefork pool, concurrency = cores); without gossip, mingle
# and heartbeat: the run has one worker, so no other worker to hear from or sync with, and no
# monitor reading its heartbeats.
WORKER = ("worker", "-l", "WARNING", "-P", "prefork", "-c", str(os.cpu_count() or 1),
          "--without-gossip", "--without-mingle", "--without-heartbeat")  # fmt: skip


_body: BodyLog | None = None


def ran(key: str, scheduled_s: float) -> None:
    """The no-op task's body: record that it ran. The log opens in the pool process that runs
    it, on first use (the path comes from the environment the worker was started with)."""
    global _body
    if _body is None:
        _body = BodyLog(os.environ["PEER_BODY_LOG"])
    _body.ran(key, scheduled_s)


def start(
    app_module: str, kind: str, command: Sequence[str], a: argparse.Namespace, *,
    session: bool = False,
) -> subprocess.Popen[bytes]:  # fmt: skip
    """`celery -A app_module *command` as a child; its output goes to `<work dir>/<kind>.log`.
    `session`: in a session (so a process group) of its own, which its pool processes share:
    what `_record.kill_group` and `stop(group=True)` signal."""
    cmd = [sys.executable, "-m", "celery", "-A", app_module, *command]
    log = open(Path(a.work_dir) / f"{kind}.log", "wb")  # noqa: SIM115 - the child keeps it
    env = dict(os.environ, PEER_REDIS_URL=a.redis_url, PEER_BODY_LOG=a.body_log)
    return subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=session
    )


def wait_ready(app: Any, worker: subprocess.Popen[bytes]) -> None:
    """Until the worker answers a ping of `app` (it consumes from then on)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited with {worker.returncode}")
        if app.control.ping(timeout=1.0):
            return
    raise RuntimeError("worker did not answer a ping")


def stop(child: subprocess.Popen[bytes], *, group: bool = False) -> None:
    """SIGTERM (a worker's warm shutdown), then SIGKILL, of this child's pid only; `group` (a
    child started with `session`): then SIGKILL to whatever is left of its process group."""
    if not group:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        return
    if child.returncode is None:
        os.kill(child.pid, signal.SIGTERM)  # not reaped yet, so the pid is still the child's
        deadline = time.monotonic() + STOP_TIMEOUT_S
        # waited for without reaping it: kill_group signals its group only while it is not
        while time.monotonic() < deadline and not exited(child):
            time.sleep(0.05)
    kill_group(child)
