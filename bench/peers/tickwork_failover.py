"""tickwork's failover case in the peer run: `kill -9` of its scheduler and worker mid-burst.

The peers' harnesses kill the one process that schedules and runs their jobs once a share of a
burst has run, and start it again at once, as a supervisor would. tickwork's counterpart kills
both of its fire-path processes (the scheduler and the worker; the API process only takes
requests) the same way, at the same point, and starts a new one of each:

- the dead scheduler's partitions come back when their lease lapses
  (partition_lease_ttl_ms, 5 s by default) or through the takeover of overdue jobs;
- the runs the dead worker had leased run again when their lease lapses (lease_ttl_ms, 5 s),
  so a body that ran but whose outcome was not yet written runs a second time: tickwork
  executes at least once, and gives each body the occurrence's idempotency key so that its
  effect applies once. The body log counts executions, so such a repeat shows as a duplicate.

Figures come from the same body log and arithmetic as every peer's (analysis.failover).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import Any

from bench import e2e, procs
from bench.env import Env
from bench.meter import CpuMeter, wait_for_quiet
from bench.noop_task import BODY_LOG_ENV, NOOP_TASK
from bench.peers import analysis
from bench.peers.harnesses._record import count_keys, count_lines
from tickwork.domain.jobs import TaskTarget

RECOVERY_S = 60.0  # after the kill, the most the case waits for every job to have run
KILLED_ROLES = ("scheduler", "worker")
POLL_S = 0.01  # the kill should land close to its share of the burst


@dataclasses.dataclass(frozen=True, kw_only=True)
class FailoverPlan:
    jobs: int
    kill_after: int  # bodies recorded before the kill (peer_case.kill_after: as every peer's)
    recovery_s: float = RECOVERY_S


async def run(env: Env, plan: FailoverPlan) -> dict[str, Any]:
    """One failover case; the result has analysis.failover's figures and the case's own."""
    quiet = await asyncio.to_thread(wait_for_quiet, env.attribution, max_wait_s=10.0)
    cfg = dataclasses.replace(
        e2e.E2EConfig(), burst_jobs=plan.jobs, create_rate_guess=500.0,
        lead_s=8.0 if env.quick else 15.0,
    )  # fmt: skip
    db = await env.admin.create("failover_task")
    url = env.admin.dsn(db)
    body_log = env.tmp / f"tickwork-failover-{plan.jobs}.body"
    t_us = e2e.burst_instant(cfg)
    result: dict[str, Any] = {"peer": "tickwork", "scenario": "failover", "jobs": plan.jobs,
                              "foreign_before": quiet, "t_s": t_us / 1e6,
                              "recovery_s": plan.recovery_s}  # fmt: skip
    try:
        result["create_s"] = await e2e.create_at_jobs(url, TaskTarget(name=NOOP_TASK), t_us, cfg)
        # The worker inherits the driver's environment (bench.procs.start): this case only.
        os.environ[BODY_LOG_ENV] = str(body_log)
        try:
            result |= await _kill_and_restart(env, url, plan, body_log, t_us)
        finally:
            os.environ.pop(BODY_LOG_ENV, None)
    finally:
        await env.admin.drop(db)
    executions = analysis.read_body_log(body_log)
    return result | analysis.failover(
        executions, t_us / 1e6, plan.jobs, result["killed_at_s"], result["restarted_at_s"]
    )


async def _kill_and_restart(
    env: Env, url: str, plan: FailoverPlan, body_log: Path, t_us: int
) -> dict[str, Any]:
    worker_args = ["--import", "bench.noop_task"]
    extra = {"TICKWORK_DATA_DIR": str(env.tmp / "data-failover"), "TICKWORK_API_KEY_RATE": "0"}
    args = {"api": ["--port", str(e2e.free_port())], "scheduler": [], "worker": worker_args}
    children: list[procs.Child] = []
    try:
        first = (e2e.start_role(env, r, url, args[r], "failover", extra) for r in e2e.ROLES)
        await _start(children, first)
        out: dict[str, Any] = {"ready_before_t_s": round(t_us / 1e6 - time.time(), 2)}
        await e2e.sleep_until(t_us / 1e6)
        with CpuMeter(env.attribution) as meter:
            deadline = t_us / 1e6 + e2e.E2EConfig().burst_timeout_s
            await _wait_for_bodies(body_log, plan.kill_after, deadline)
            out["killed_at_s"] = time.time()
            for child in children:
                if child.name in KILLED_ROLES:
                    child.proc.send_signal(signal.SIGKILL)
                    await child.proc.wait()
            out["bodies_before_kill"] = count_lines(str(body_log))
            out["restarted_at_s"] = time.time()
            # Both at once, as a supervisor restarts each of its services.
            again = (e2e.start_role(env, r, url, args[r], "failover-again", extra)
                     for r in KILLED_ROLES)  # fmt: skip
            await _start(children, again)
            out["restarted_ready_s"] = round(time.time() - out["restarted_at_s"], 2)
            out["completed"] = await _wait_for_every_key(
                body_log, plan.jobs, out["killed_at_s"] + plan.recovery_s
            )
        out["cpu"] = meter.report()
        return out
    finally:
        await asyncio.gather(*(c.stop() for c in children))


async def _start(children: list[procs.Child], starts: Iterable[Awaitable[procs.Child]]) -> None:
    """Start processes concurrently into `children` (stopped by the caller, even those that
    started when another failed to)."""
    found = await asyncio.gather(*starts, return_exceptions=True)
    children += [c for c in found if isinstance(c, procs.Child)]
    for c in found:
        if isinstance(c, BaseException):
            raise c


async def _wait_for_bodies(body_log: Path, bodies: int, deadline: float) -> None:
    """Until the body log has `bodies` lines (another process writes it: polled) or the
    deadline passes."""
    while time.time() < deadline:
        if count_lines(str(body_log)) >= bodies:
            return
        await asyncio.sleep(POLL_S)


async def _wait_for_every_key(body_log: Path, jobs: int, deadline: float) -> bool:
    """Until every job has run once or the deadline passes; True if every one ran."""
    while time.time() < deadline:
        if count_keys(str(body_log)) >= jobs:
            return True
        await asyncio.sleep(0.5)
    return False
