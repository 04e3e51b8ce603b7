"""The fault schedule of a chaos run: pure, seeded, printable, replayable.

Times are seconds from the start of the load window. Targets are process names
(`scheduler-1`, `worker-3`, ...) or None for faults of a shared server. The driver may move a
fault to another process of the same role when its target is already down or paused; it logs
what it actually did.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

FaultKind = Literal[
    "kill_scheduler",  # SIGKILL, restarted after `hold_s`
    "kill_worker",
    "stop_scheduler",  # SIGSTOP past its lease, then SIGCONT
    "stop_worker",
    "pg_crash",  # pg_ctl stop -m immediate, started again after `hold_s`
    "queue_restart",  # the queue server SIGKILLed, started again after `hold_s`
    "drop_connections",  # pg_terminate_backend on every connection of one process
    "net_cut",  # one worker's TCP paths to the database and queue black-holed for `hold_s`
    "disk_full",  # the database's disk filled for `hold_s` (long mode, where a tmpfs is allowed)
]

SCHEDULERS = ("scheduler-1", "scheduler-2", "scheduler-3")
WORKERS = ("worker-1", "worker-2", "worker-3")
CUT_WORKER = "worker-3"  # the worker whose connections go through the harness's proxies


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    kind: FaultKind
    target: str | None
    hold_s: float

    def describe(self) -> str:
        who = f" {self.target}" if self.target else ""
        return f"t+{self.at_s:6.1f}s  {self.kind}{who}  hold {self.hold_s:.1f}s"


@dataclass(frozen=True, slots=True)
class FaultPlanConfig:
    duration_s: float
    lease_ttl_s: float
    short: bool
    external_queue: bool  # False for the table queue: there is no queue server to restart
    disk_full: bool = False  # the database sits on a disk the harness may fill


def plan_faults(seed: int, config: FaultPlanConfig) -> list[Fault]:
    """SIGKILLs every 20 +/- 5 s (12 +/- 3 s in short mode), plus one slot each for the other
    kinds, spread over the window so that no two of those overlap, and no SIGKILL lands
    while one of them is in force (it moves to just after). The last stretch of the window is
    left quiet so that recovery is judged too."""
    rng = random.Random(f"faults-{seed}")
    quiet_tail = 15.0 if config.short else 30.0
    last = config.duration_s - quiet_tail
    specials = _special_faults(rng, config, start=8.0, end=last)
    faults: list[Fault] = list(specials)
    period, spread = (12.0, 3.0) if config.short else (20.0, 5.0)
    at = 5.0 + rng.uniform(0, spread)
    while at < last:
        clash = next((s for s in specials if s.at_s - 2.0 <= at <= s.at_s + s.hold_s + 2.0), None)
        if clash is not None:
            at = clash.at_s + clash.hold_s + 2.0 + rng.uniform(0, 1.0)
            continue
        role = rng.choice(("scheduler", "worker"))
        target = rng.choice(SCHEDULERS if role == "scheduler" else WORKERS)
        kind: FaultKind = "kill_scheduler" if role == "scheduler" else "kill_worker"
        faults.append(Fault(at, kind, target, rng.uniform(1.0, 4.0)))
        at += period + rng.uniform(-spread, spread)
    return sorted(faults, key=lambda f: f.at_s)


def _special_faults(
    rng: random.Random, config: FaultPlanConfig, start: float, end: float
) -> list[Fault]:
    past_lease = config.lease_ttl_s + rng.uniform(2.0, 4.0)
    cut = 8.0 if config.short else 30.0
    wanted: list[tuple[FaultKind, str | None, float]] = [
        ("stop_worker", rng.choice(WORKERS[:2]), past_lease),
        ("pg_crash", None, rng.uniform(1.0, 3.0)),
        ("drop_connections", rng.choice(SCHEDULERS + WORKERS), 0.0),
        ("net_cut", CUT_WORKER, cut),
    ]
    if not config.short:  # the short mode (CI) has room for one of each of the others only
        wanted.append(("pg_crash", None, rng.uniform(1.0, 3.0)))
        wanted.append(("stop_scheduler", rng.choice(SCHEDULERS), past_lease))
    if config.external_queue:
        wanted.append(("queue_restart", None, rng.uniform(1.0, 3.0)))
    if config.disk_full:
        wanted.append(("disk_full", None, 10.0))
    rng.shuffle(wanted)
    # Each fault gets room for itself and the recovery after it (a lease plus a little); the
    # time left over is spread as random gaps, so the faults never overlap one another.
    recovery = config.lease_ttl_s + 3.0
    needed = sum(hold + recovery for _, _, hold in wanted)
    spare = max(end - start - needed, 0.0)
    cuts = sorted(rng.uniform(0, spare) for _ in wanted)
    faults = []
    at, used = start, 0.0
    for (kind, target, hold), cut in zip(wanted, cuts, strict=True):
        at += cut - used
        used = cut
        faults.append(Fault(at, kind, target, hold))
        at += hold + recovery
    return faults
