"""tickwork in the peer run, through the existing benchmarks' own machinery.

- burst: `e2e.task_burst_case` (api, scheduler and worker processes, table queue, the no-op
  Python task), its body writing the same body log as every peer's (`bench.noop_task`), so
  its figures come from `analysis.burst` like theirs; e2e's own figures (from tw_runs) are
  kept beside them.
- ceiling: `raw_fire_loop.burst_case`, the fire loop in bare SQL with the same N.
- precision: `lateness.run_case` on PostgreSQL (`tickwork up`, every-second webhook jobs).
- sustained: one step of the ramp (`sustained.py`) is the precision case at R jobs, with the
  no-op Python task (`bench.noop_task`) as the peers' no-op body rather than a webhook.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from bench import e2e, lateness, raw_fire_loop
from bench.env import Env
from bench.noop_task import BODY_LOG_ENV
from bench.peers import analysis


async def burst(env: Env, jobs: int) -> dict[str, Any]:
    # e2e places T at N / create_rate_guess + lead_s from now. Its guess (1,200 jobs/s) is a
    # quiet machine's: on a busy one the creation ends later and the processes start after T
    # (measured: 31 s after T for 100,000), which the peers' harnesses never allow. So T is
    # placed for 500 jobs/s; `ready_before_t_s` says whether that held.
    cfg = dataclasses.replace(
        e2e.E2EConfig(), burst_jobs=jobs, burst_timeout_s=300.0, create_rate_guess=500.0,
        lead_s=8.0 if env.quick else 15.0,
    )  # fmt: skip
    body_log = env.tmp / f"tickwork-burst-{jobs}.body"
    # The worker inherits the driver's environment (bench.procs.start): set for this case only.
    os.environ[BODY_LOG_ENV] = str(body_log)
    try:
        found = await e2e._guarded(e2e.task_burst_case(env, cfg, "table"), "table")
    finally:
        os.environ.pop(BODY_LOG_ENV, None)
    result: dict[str, Any] = {"peer": "tickwork", "scenario": "burst", "e2e": found}
    if "error" in found:
        return result | {"error": found["error"]}
    t_s = float(found["t_us"]) / 1e6 if "t_us" in found else None
    executions = analysis.read_body_log(body_log)
    if t_s is None:  # every one-shot is scheduled at T
        t_s = min((e.scheduled_us for e in executions), default=0) / 1e6
    result |= analysis.burst(executions, t_s, jobs)
    result["fires_over_time"] = {
        "origin_s": t_s,
        "bin_s": 0.1,
        "counts": analysis.fires_over_time(executions, t_s, 0.1),
    }
    result["ready_before_t_s"] = found.get("ready_before_t_s")
    result["cpu"] = found.get("cpu", {})
    result["foreign_before"] = found.get("foreign_before")
    return result


async def ceiling(env: Env, jobs: int) -> dict[str, Any]:
    try:
        found = await raw_fire_loop.burst_case(env, jobs)
    except Exception as exc:  # the run goes on; the report says the ceiling is missing
        found = {"error": f"{type(exc).__name__}: {exc}"}
    print(raw_fire_loop.summary_line(found), flush=True)
    drain = analysis.ratio(jobs - 1, found.get("drain_per_s"))  # first to last, as the peers'
    return {"peer": "bare_sql", "scenario": "burst", "drain_s": drain, **found}


async def precision(
    env: Env, jobs: int, seconds: int, variant: str, *, kind: str = "webhook", label: str = ""
) -> dict[str, Any]:
    cfg = dataclasses.replace(lateness.LatenessConfig(), jobs=jobs, window_s=seconds, kind=kind)
    if env.quick:
        cfg = dataclasses.replace(cfg, warmup_s=2.0, settle_s=1.5)
    try:
        found = await lateness.run_case(env, cfg, "postgresql", variant, label=label)
    except Exception as exc:
        return {"peer": "tickwork", "scenario": "precision", "variant": variant, "jobs": jobs,
                "error": f"{type(exc).__name__}: {exc}"}  # fmt: skip
    return {
        "peer": "tickwork",
        "scenario": "precision",
        "variant": variant,
        "jobs": jobs,
        "seconds": seconds,
        "expected": found.get("fires_expected"),
        "missed": found.get("missing"),
        "duplicates": found.get("duplicates"),
        "early": found.get("early"),
        "lateness_ms": found.get("lateness_ms"),
        "cpu": found.get("cpu", {}),
        "foreign_before": found.get("foreign_before"),
        "lateness_case": found,
    }


async def sustained_step(env: Env, rate: int, seconds: int, variant: str) -> dict[str, Any]:
    """One step of tickwork's sustained ramp: `rate` every-second no-op tasks."""
    return await precision(env, rate, seconds, variant, kind="task", label=f"-r{rate}")
