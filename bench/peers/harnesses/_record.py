"""What every peer harness shares (stdlib only: it runs inside each peer's own venv).

A harness is a script run by a peer venv's Python. Its job body records one line per
execution with `BodyLog.ran`; the host side (bench/peers) reads the file and computes every
figure the same way for every peer, tickwork included: lateness = ran - scheduled, fires/s,
duplicates (a key recorded twice), missing keys.

Line format, one per body execution: `<key> <scheduled epoch us> <ran epoch us>\n`, appended
with one os.write on an O_APPEND descriptor, so lines from threads and processes never
interleave and a kill -9 loses nothing already written.

The harness's last stdout line is one JSON object (`report`): its configuration (versions,
concurrency, pool sizes, polling) and anything the host cannot see in the body log.

Also here, because several harnesses need the same: the runner's calling convention as an
argparse parser (`harness_parser`), bounded waits for N bodies (`wait_until`, `await_until`,
`count_lines`), and the failover step that SIGKILLs a child after N bodies (`kill_after`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any


class BodyLog:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def ran(self, key: str, scheduled_s: float) -> None:
        """Record that the body of `key`, scheduled for `scheduled_s` (epoch seconds), runs now."""
        now_us = time.time_ns() // 1000
        os.write(self._fd, f"{key} {round(scheduled_s * 1e6)} {now_us}\n".encode())


def report(**fields: Any) -> None:
    """The harness's result line (the host reads the last line of stdout)."""
    sys.stdout.write(json.dumps(fields, default=str) + "\n")
    sys.stdout.flush()


def harness_parser(scenarios: Sequence[str], *, service: str) -> argparse.ArgumentParser:
    """The runner's calling convention (bench/peers/peer_case.py passes every one of these),
    `service` the connection flag it adds ("pg-dsn" or "redis-url"). A harness adds its own
    arguments to the parser before parsing. (procrastinate3, dbos3 and pg_cron keep parsers of
    their own: they are also run by hand, with defaults for these flags and more scenarios.)"""
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", choices=tuple(scenarios), required=True)
    ap.add_argument("--jobs", type=int, required=True)
    ap.add_argument("--seconds", type=int, default=0)
    ap.add_argument("--warmup-s", type=float, default=0.0)
    ap.add_argument("--body-log", required=True)
    ap.add_argument("--work-dir", default=".")
    ap.add_argument("--budget-s", type=float, default=290.0)
    ap.add_argument(f"--{service}", required=True)
    return ap


def count_lines(path: str) -> int:
    """Bodies recorded so far in a body log (complete lines; none if it is not there yet)."""
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def wait_until(ran: Callable[[], int], count: int, deadline: float, poll_s: float) -> bool:
    """Poll `ran()` (bodies run: an in-process counter, or the body log's lines when the bodies
    run in other processes) until `count` or the epoch `deadline`: a benchmark's bounded wait.
    True if `count` was reached."""
    while time.time() < deadline:
        if ran() >= count:
            return True
        time.sleep(poll_s)
    return False


async def await_until(ran: Callable[[], int], count: int, deadline: float, poll_s: float) -> bool:
    """`wait_until` for a harness whose scheduler runs in the same event loop (so the wait
    must not block it)."""
    while time.time() < deadline:
        if ran() >= count:
            return True
        await asyncio.sleep(poll_s)
    return False


def kill_after(victim_argv: Sequence[str], body_log: str, bodies: int, deadline: float) -> float:
    """The failover step: start the victim (this harness run as a child), print `measuring`,
    and SIGKILL the victim once the body log has `bodies` lines (or it exits, or the epoch
    `deadline` passes). Returns the kill's epoch time."""
    victim = subprocess.Popen(victim_argv)
    print("measuring", flush=True)
    try:
        # 10 ms polls: the kill should land close to `bodies`, mid-burst
        while count_lines(body_log) < bodies and victim.poll() is None:
            if time.time() > deadline:
                break
            time.sleep(0.01)
        killed_at = time.time()
        # Popen.send_signal, not os.kill: a victim already reaped is not signalled (its pid
        # may belong to another process by now)
        victim.send_signal(signal.SIGKILL)
    finally:
        victim.wait()
    return killed_at
