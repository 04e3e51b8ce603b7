"""`takeover`: a dead scheduler's partitions on a real cluster, after kill -9 and after SIGTERM.

One throwaway database on the shared PostgreSQL, `schedulers` (3) `tickwork scheduler`
processes and `workers` (2) `tickwork worker --import bench.noop_task` processes (the table
queue), all with their default settings (partition lease TTL 5 s, takeover grace 500 ms), node
ids s1, s2, ... Once the schedulers share the 64 partitions, `jobs` jobs `{"every": "PT1S"}`
with a no-op Python task, anchors spread over the second, default misfire policy (coalesce,
1 s grace). Then two phases, each a baseline window with no fault and a window after one:

1. kill9: `kill -9` s1; a replacement (s4) joins after the window;
2. sigterm: SIGTERM s2 (it releases its leases and leaves, ADR 0015).

Measured from tickwork's own tables (tw_runs, tw_attempt_history) once every run finished, per
window (occurrences by their scheduled instant): per job the longest gap between the starts of
consecutive fires, execution lateness (started - scheduled) and claim lateness (claimed -
scheduled), missing occurrences (instants of the job's series with no run, folded ones included)
and duplicates (executions beyond the first of a run). From the leases (polled every 50 ms):
when the survivors hold every partition, and when evenly. From each scheduler's /metrics:
takeover fires, claim conflicts and stale-epoch refusals per window (a takeover while every owner
is alive, or conflicts between owners of disjoint partitions, is a finding).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import signal
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any

import asyncpg

from bench import claim_seed
from bench.env import Env
from bench.meter import CpuMeter, wait_for_quiet
from bench.noop_task import NOOP_TASK
from bench.partitions.common import (
    THIS_TREE,
    Role,
    errors_logged,
    holdings,
    metric_delta,
    migrate,
    noise_line,
    record,
    scrape_all,
    start_role,
    stop_all,
    table,
    until_spread,
)
from bench.stats import summary
from tickwork.clock import SystemClock
from tickwork.domain.jobs import EveryTrigger, Schedule, TaskTarget
from tickwork.services.jobs import JobService, JobSpec
from tickwork.store.postgres import PostgresStore

FAULTS = ("kill9", "sigterm")


@dataclass(frozen=True, kw_only=True)
class TakeoverConfig:
    jobs: int = 100
    schedulers: int = 3
    workers: int = 2
    warmup_s: float = 4.0
    baseline_s: float = 10.0
    after_s: float = 15.0  # longer than a partition lease TTL (5 s) and a renewal round
    settle_s: float = 4.0  # after the last window, before the processes stop
    reps: int = 1

    @classmethod
    def build(cls, quick: bool, jobs: int | None, reps: int) -> TakeoverConfig:
        found = cls(jobs=30, baseline_s=6.0, after_s=10.0, reps=reps) if quick else cls(reps=reps)
        return found if jobs is None else replace(found, jobs=jobs)


@dataclass
class Window:
    label: str
    start_us: int
    end_us: int
    metrics: dict[str, float]


async def run(env: Env, cfg: TakeoverConfig) -> dict[str, Any]:
    reps = []
    for rep in range(cfg.reps):
        found = await _rep(env, cfg, rep)
        reps.append(found)
        print(render(found, cfg), flush=True)
    result = {"config": asdict(cfg), "reps": reps}
    record("takeover", result)
    return result


async def _rep(env: Env, cfg: TakeoverConfig, rep: int) -> dict[str, Any]:
    quiet = await asyncio.to_thread(wait_for_quiet, env.attribution, max_wait_s=10.0)
    db = await env.admin.create(f"takeover_r{rep}")
    url = env.admin.dsn(db)
    await migrate(THIS_TREE, url)
    conn = await asyncpg.connect(url)
    roles: list[Role] = []
    out: dict[str, Any] = {"rep": rep + 1, "foreign_before": quiet}
    try:
        partitions = await claim_seed.partition_count(conn)
        roles += await asyncio.gather(
            *(start_role(env, THIS_TREE, "worker", url, f"w{i + 1}") for i in range(cfg.workers))
        )
        scheds = list(
            await asyncio.gather(
                *(
                    start_role(env, THIS_TREE, "scheduler", url, f"s{i + 1}")
                    for i in range(cfg.schedulers)
                )
            )
        )
        roles += scheds
        out["spread_at_start_s"] = round(
            await until_spread(conn, [s.name for s in scheds], partitions), 2
        )
        out["create_s"] = await _create_jobs(url, cfg.jobs)
        await asyncio.sleep(cfg.warmup_s)
        windows: list[Window] = []
        phases = []
        with CpuMeter(env.attribution) as meter:
            for n, fault in enumerate(FAULTS):
                victim = scheds[0]  # s1, then s2
                phase = await _phase(cfg, conn, scheds, victim, fault, partitions, windows)
                phases.append(phase)
                scheds.remove(victim)
                if n + 1 < len(FAULTS):  # a replacement, so the next fault hits three again
                    name = f"s{cfg.schedulers + n + 1}"
                    newcomer = await start_role(env, THIS_TREE, "scheduler", url, name)
                    roles.append(newcomer)
                    scheds.append(newcomer)
                    await until_spread(conn, [s.name for s in scheds], partitions)
                    await asyncio.sleep(cfg.warmup_s)
            await asyncio.sleep(cfg.settle_s)
        out["cpu"] = meter.report()
        await stop_all(roles)
        out["errors_logged"] = errors_logged(roles)
        runs = await _runs(conn)
        jobs = await _jobs(conn)
    finally:
        await stop_all(roles)
        await conn.close()
        await env.admin.drop(db)
    out["phases"] = phases
    out["windows"] = [_analyse(w, runs, jobs) for w in windows]
    _mark_late(out["windows"])
    return out


async def _create_jobs(url: str, jobs: int) -> float:
    """`jobs` every-second no-op jobs, anchors spread evenly over one second."""
    started = time.monotonic()
    store = PostgresStore(url, migrate=False, pool_size=4)
    await store.open()
    try:
        service = JobService(store, SystemClock())
        base_ms = (math.ceil(time.time()) + 1) * 1000
        for i in range(jobs):
            anchor = datetime.fromtimestamp((base_ms + i * 1000 // jobs) / 1000, UTC)
            schedule = Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=anchor))
            spec = JobSpec(name=f"tick-{i}", schedule=schedule, target=TaskTarget(name=NOOP_TASK))
            await service.create(spec)
    finally:
        await store.close()
    return round(time.monotonic() - started, 2)


async def _phase(
    cfg: TakeoverConfig,
    conn: asyncpg.Connection,
    scheds: list[Role],
    victim: Role,
    fault: str,
    partitions: int,
    windows: list[Window],
) -> dict[str, Any]:
    """A baseline window, the fault, a window after it; the windows go to `windows`."""
    survivors = [s for s in scheds if s is not victim]
    start_us = _now_us()
    before = await scrape_all(scheds)
    await asyncio.sleep(cfg.baseline_s)
    after_baseline = await scrape_all(scheds)
    held = await holdings(conn)
    fault_us = _now_us()
    windows.append(Window(f"{fault} baseline", start_us, fault_us, _deltas(after_baseline, before)))
    survivors_before = {k: v for k, v in after_baseline.items() if k != victim.name}
    exited = asyncio.create_task(_exit_time(victim))
    os.kill(victim.child.pid, signal.SIGKILL if fault == "kill9" else signal.SIGTERM)
    all_held_s, even_s = await _until_taken(conn, [s.name for s in survivors], partitions)
    await asyncio.sleep(max(0.0, fault_us / 1e6 + cfg.after_s - time.time()))
    end = await scrape_all(survivors)
    windows.append(Window(f"{fault} after", fault_us, _now_us(), _deltas(end, survivors_before)))
    exit_s = None
    with contextlib.suppress(TimeoutError):
        exit_s = await asyncio.wait_for(exited, 30.0)
    return {
        "fault": fault,
        "victim": victim.name,
        "victim_partitions": len(held.get(victim.name, ())),
        "survivors": [s.name for s in survivors],
        "survivors_hold_all_s": all_held_s,
        "survivors_even_s": even_s,
        "victim_exit_s": None if exit_s is None else round(exit_s - fault_us / 1e6, 3),
        "victim_exit_code": victim.child.proc.returncode,
    }


async def _exit_time(role: Role) -> float:
    await role.child.proc.wait()
    return time.time()


async def _until_taken(
    conn: asyncpg.Connection, survivors: list[str], partitions: int, timeout_s: float = 60.0
) -> tuple[float | None, float | None]:
    """Seconds from now until the survivors hold every partition, and until evenly."""
    started = time.monotonic()
    all_held = None
    while time.monotonic() - started < timeout_s:
        held = await holdings(conn)
        owners = set(held)
        count = sum(len(v) for v in held.values())
        if all_held is None and owners <= set(survivors) and count == partitions:
            all_held = round(time.monotonic() - started, 3)
        sizes = [len(held.get(s, ())) for s in survivors]
        if all_held is not None and max(sizes) - min(sizes) <= 1:
            return all_held, round(time.monotonic() - started, 3)
        await asyncio.sleep(0.05)
    return all_held, None


def _deltas(
    after: dict[str, dict[str, float]], before: dict[str, dict[str, float]]
) -> dict[str, float]:
    names = ("tickwork_takeover_fires_total", "tickwork_claim_conflicts_total",
             "tickwork_stale_epoch_refusals_total", "tickwork_fires_total")  # fmt: skip
    return {n.removeprefix("tickwork_"): metric_delta(after, before, n) for n in names}


def _now_us() -> int:
    return time.time_ns() // 1000


async def _runs(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(
        await conn.fetch(
            "SELECT r.job_id, r.scheduled_us, r.created_us, r.started_us, r.status, r.coalesced,"
            " (SELECT count(*) FROM tw_attempt_history a"
            " WHERE a.run_id = r.id AND a.status <> 'lost')"
            " AS attempts"
            " FROM tw_runs r WHERE r.origin = 'schedule'"
        )
    )


async def _jobs(conn: asyncpg.Connection) -> dict[str, int]:
    rows = await conn.fetch("SELECT id, anchor_us FROM tw_jobs")
    return {r["id"]: r["anchor_us"] for r in rows}


def _analyse(w: Window, runs: list[asyncpg.Record], anchors: dict[str, int]) -> dict[str, Any]:
    by_job: dict[str, list[asyncpg.Record]] = defaultdict(list)
    for r in runs:
        if w.start_us - 1_000_000 <= r["scheduled_us"] < w.end_us:
            by_job[r["job_id"]].append(r)
    expected = missing = duplicates = unfinished = coalesced = 0
    exec_ms: list[float] = []
    claim_ms: list[float] = []
    gaps_ms: list[float] = []
    for job, anchor in anchors.items():
        mine = sorted(by_job.get(job, []), key=lambda r: r["scheduled_us"])
        inside = [r for r in mine if r["scheduled_us"] >= w.start_us]
        instants = _series(anchor, w.start_us, w.end_us)
        expected += len(instants)
        missing += len(set(instants) - {r["scheduled_us"] for r in inside})
        for r in inside:
            duplicates += max(int(r["attempts"]) - 1, 0)
            coalesced += int(r["coalesced"])
            claim_ms.append((r["created_us"] - r["scheduled_us"]) / 1000)
            if r["started_us"] is None:
                unfinished += 1
            else:
                exec_ms.append((r["started_us"] - r["scheduled_us"]) / 1000)
        starts = [r["started_us"] for r in mine if r["started_us"] is not None]
        if len(starts) > 1:
            gaps_ms.append(max(b - a for a, b in itertools.pairwise(starts)) / 1000)
    return {
        "window": w.label,
        "seconds": round((w.end_us - w.start_us) / 1e6, 2),
        "expected": expected,
        "fired": len(exec_ms),
        "missing": missing,
        "coalesced": coalesced,
        "duplicates": duplicates,
        "unfinished": unfinished,
        "exec_lateness_ms": summary(exec_ms),
        "claim_lateness_ms": summary(claim_ms),
        "max_gap_per_job_ms": summary(gaps_ms),
        "metrics": w.metrics,
        "_exec_ms": exec_ms,  # dropped by _mark_late
    }


def _series(anchor_us: int, start_us: int, end_us: int) -> list[int]:
    """The instants anchor + k s within [start, end)."""
    first = anchor_us + max(0, -(-(start_us - anchor_us) // 1_000_000)) * 1_000_000
    return list(range(first, end_us, 1_000_000))


def _mark_late(windows: list[dict[str, Any]]) -> None:
    """Each "after" window: how many fires started later than the latest of its baseline."""
    bound = math.inf
    for w in windows:
        if w["window"].endswith("baseline"):
            bound = w["exec_lateness_ms"].get("max", math.inf)
        else:
            w["baseline_max_ms"] = bound
            w["late_beyond_baseline_max"] = sum(ms > bound for ms in w["_exec_ms"])
    for w in windows:
        w.pop("_exec_ms")


def render(found: dict[str, Any], cfg: TakeoverConfig) -> str:
    headers = ["window", "s", "expected", "fired", "missing", "dup", "exec p50", "exec p99",
               "exec max", "late>base", "claim max", "gap p50", "gap max", "takeovers",
               "conflicts", "refused"]  # fmt: skip
    rows = []
    for w in found["windows"]:
        ex, cl, gap = w["exec_lateness_ms"], w["claim_lateness_ms"], w["max_gap_per_job_ms"]
        m = w["metrics"]
        rows.append([
            w["window"], w["seconds"], w["expected"], w["fired"], w["missing"], w["duplicates"],
            ex.get("p50"), ex.get("p99"), ex.get("max"), w.get("late_beyond_baseline_max"),
            cl.get("max"), gap.get("p50"),
            gap.get("max"), m["takeover_fires_total"], m["claim_conflicts_total"],
            m["stale_epoch_refusals_total"],
        ])  # fmt: skip
    lines = [
        "",
        f"takeover rep {found['rep']}: {cfg.schedulers} schedulers, {cfg.workers} workers, "
        f"{cfg.jobs} jobs every second (lateness and gaps in ms; gap = per job, the longest "
        "between consecutive starts, p50 and max over jobs)",
        table(headers, rows),
    ]
    for p in found["phases"]:
        lines.append(
            f"{p['fault']}: {p['victim']} held {p['victim_partitions']} partitions; survivors "
            f"hold all after {p['survivors_hold_all_s']} s, evenly after {p['survivors_even_s']}"
            f" s; victim exited after {p['victim_exit_s']} s (code {p['victim_exit_code']})"
        )
    lines.append(f"errors logged: {found.get('errors_logged')}; {noise_line(found['cpu'])}")
    return "\n".join(lines)
