"""One peer, one scenario: prepare its resources, run its harness, compute its figures."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from bench import procs
from bench.env import Env
from bench.meter import CpuMeter, wait_for_quiet
from bench.peers import analysis
from bench.peers.registry import HARNESSES, Peer

CASE_BUDGET_S = 300.0  # the whole case, creation included (the brief's cap per peer case)
STOP_GRACE_S = 30.0


@dataclass(frozen=True, kw_only=True)
class Settings:
    """What one scenario asks of every contender."""

    scenario: str
    jobs: int
    seconds: int = 0  # precision: whole seconds measured
    warmup_s: float = 0.0  # precision: seconds skipped after the schedules start
    pg_dsn: str = ""
    redis_url: str = ""
    label: str = ""  # appended to the case's file names (a sustained ramp's steps: "-r500")


@dataclass(frozen=True)
class Context:
    """Handed to a peer's own `resources` hook."""

    env: Env
    peer: Peer
    settings: Settings


async def run(env: Env, peer: Peer, python: Path, settings: Settings) -> dict[str, Any]:
    quiet = await asyncio.to_thread(wait_for_quiet, env.attribution, max_wait_s=10.0)
    tag = f"{peer.name}-{settings.scenario}{settings.label}"
    body_log = env.tmp / f"{tag}.body"
    work = env.tmp / tag
    work.mkdir(exist_ok=True)
    base = [str(python), str(HARNESSES / peer.harness), "--scenario", settings.scenario,
            "--jobs", str(settings.jobs), "--seconds", str(settings.seconds),
            "--warmup-s", str(settings.warmup_s), "--body-log", str(body_log),
            "--work-dir", str(work), "--budget-s", str(CASE_BUDGET_S - 10)]  # fmt: skip
    if settings.scenario == "failover":
        base += ["--kill-after", str(kill_after(settings.jobs))]
    async with _resources(env, peer, settings) as extra:
        started = time.monotonic()
        child, _line = await procs.start(
            peer.name,
            base + extra,
            ready="measuring",
            log_path=env.tmp / f"{tag}.log",
            env={"PYTHONPATH": str(HARNESSES)},
            timeout_s=CASE_BUDGET_S,
            cwd=work,
        )
        env.attribution.named[child.pid] = peer.name
        try:
            with CpuMeter(env.attribution) as meter:
                left = CASE_BUDGET_S - (time.monotonic() - started)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(child.proc.wait(), max(left, 1.0))
        finally:
            exit_code = await child.stop(STOP_GRACE_S)
    report = _report(child.log_path)
    executions = analysis.read_body_log(body_log)
    result: dict[str, Any] = {
        "peer": peer.name,
        "scenario": settings.scenario,
        "foreign_before": quiet,
        "exit_code": exit_code,
        "cpu": meter.report(),
        "harness": report,
    }
    if "error" in report or not report:
        result["error"] = report.get("error") or f"no report line: {child.log_tail(5)}"
    result |= figures(executions, report, settings)
    result["fires_over_time"] = _fires_over_time(executions, report, settings)
    return result


def kill_after(jobs: int) -> int:
    """Failover: the bodies run before the kill, 30 % of the burst, for every contender."""
    return jobs * 3 // 10


def figures(
    executions: list[analysis.Execution], report: dict[str, Any], settings: Settings
) -> dict[str, Any]:
    if settings.scenario == "burst" and "t_s" in report:
        return analysis.burst(executions, float(report["t_s"]), settings.jobs)
    if settings.scenario == "failover" and "killed_at_s" in report:
        restarted = report.get("restarted_at_s")
        return analysis.failover(
            executions,
            float(report["t_s"]),
            settings.jobs,
            float(report["killed_at_s"]),
            None if restarted is None else float(restarted),
        )
    if settings.scenario == "precision" and "window_start_s" in report:
        jobs = int(report.get("jobs", settings.jobs))
        return analysis.precision(
            executions, float(report["window_start_s"]), float(report["window_end_s"]), jobs
        )
    return {}


def _fires_over_time(
    executions: list[analysis.Execution], report: dict[str, Any], settings: Settings
) -> dict[str, Any]:
    origin = report.get("t_s") or report.get("window_start_s")
    if origin is None:
        return {}
    bin_s = 1.0 if settings.scenario == "precision" else 0.1
    counts = analysis.fires_over_time(executions, float(origin), bin_s)
    return {"origin_s": origin, "bin_s": bin_s, "counts": counts}


def _report(log_path: Path) -> dict[str, Any]:
    """The harness's last JSON line on stdout (its log)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in reversed(lines):
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                found: dict[str, Any] = json.loads(line)
                return found
    return {}


@contextlib.asynccontextmanager
async def _resources(env: Env, peer: Peer, settings: Settings) -> AsyncIterator[list[str]]:
    """The peer's database / Redis DB / own resources, released whatever happens."""
    async with contextlib.AsyncExitStack() as stack:
        extra: list[str] = []
        if peer.postgres:
            db = await env.admin.create(f"peer_{peer.name}_{settings.scenario}")
            stack.push_async_callback(env.admin.drop, db)
            extra += ["--pg-dsn", env.admin.dsn(db)]
        if peer.redis_db is not None:
            url = f"{settings.redis_url.rstrip('/')}/{peer.redis_db}"
            await _flush(url)
            stack.push_async_callback(_flush, url)
            extra += ["--redis-url", url]
        if peer.resources is not None:
            extra += await stack.enter_async_context(peer.resources(Context(env, peer, settings)))
        yield extra


async def _flush(url: str) -> None:
    """FLUSHDB of the peer's own DB number (8-15 only: the server is shared)."""
    number = int(url.rsplit("/", 1)[1])
    if not 8 <= number <= 15:
        raise ValueError(f"Redis DB {number} is outside 8-15")
    client = aioredis.Redis.from_url(url)
    try:
        await client.flushdb()
    finally:
        await client.aclose()
