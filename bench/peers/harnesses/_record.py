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
`count_lines`, `count_keys`), and the failover step that SIGKILLs a child after N bodies
(`kill_after`, `kill_at`; `kill_group` for a child that has children of its own).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
    if "failover" in scenarios:
        ap.add_argument("--kill-after", type=int, help="bodies before the kill (30 %% of jobs)")
        ap.add_argument("--recovery-s", type=float, default=60.0,
                        help="the most to wait after the kill for every key to run")  # fmt: skip
    return ap


def kill_after_bodies(a: argparse.Namespace) -> int:
    """A failover's `--kill-after`; by default 30 % of the burst (the runner's own default)."""
    bodies: int = a.kill_after if a.kill_after is not None else a.jobs * 3 // 10
    return bodies


def count_lines(path: str) -> int:
    """Bodies recorded so far in a body log (complete lines; none if it is not there yet)."""
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def count_keys(path: str) -> int:
    """Distinct keys recorded so far: a failover waits for every key, and a key that ran twice
    (a duplicate) must not stand in for one that never ran."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    complete = data[: data.rfind(b"\n") + 1]  # a line being written is not a key yet
    return len({line.split(b" ", 1)[0] for line in complete.splitlines()})


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
    return kill_at(victim, body_log, bodies, deadline)


def kill_at(
    victim: subprocess.Popen[Any],
    body_log: str,
    bodies: int,
    deadline: float,
    *,
    group: bool = False,
) -> float:
    """`kill_after` for a victim already running: SIGKILL it (`group`: its whole process group,
    see `kill_group`) once the body log has `bodies` lines, it exits, or `deadline` passes;
    reap it. Returns the kill's epoch time."""
    try:
        # 10 ms polls: the kill should land close to `bodies`, mid-burst
        while count_lines(body_log) < bodies and not exited(victim):
            if time.time() > deadline:
                break
            time.sleep(0.01)
        killed_at = time.time()
    finally:
        if group:
            kill_group(victim)
        else:
            # Popen.send_signal, not os.kill: a victim already reaped is not signalled (its pid
            # may belong to another process by now)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
    return killed_at


def kill_group(child: subprocess.Popen[Any]) -> None:
    """SIGKILL every process of the child's process group, then reap the child. The child must
    lead a group of its own (started with start_new_session=True), and is signalled only while
    not reaped: until then the group id (its pid) cannot name anyone else's group."""
    if child.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def group_pids(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group, from /proc (Linux)."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # after the command name (in parentheses, may hold anything): state, ppid, pgrp
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] != b"Z" and int(fields[2]) == pgid:
            found.append(int(entry.name))
    return found


def exited(child: subprocess.Popen[Any]) -> bool:
    """Whether the child has exited, without reaping it (so its pid stays its own)."""
    if child.returncode is not None:
        return True
    return os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
