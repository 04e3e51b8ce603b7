"""`scaling`: a burst of N one-shots with 1, 2 and 3 scheduler processes on one PostgreSQL.

For each scheduler count, first the bare-SQL fire loop (`raw_fire_loop.burst_case`, the same N:
the ceiling of this minute, ADR 0011), then tickwork: a fresh throwaway database migrated by the
checkout under test, `workers` (1) `tickwork worker --import bench.noop_task` and n
`tickwork scheduler` processes (table queue, default settings, node ids s1..sn), and once the
schedulers share the partitions, N one-shot no-op task jobs due at one instant T seeded by
COPY (as `bench/one_burst.py --kind task --queue table` bursts, but without N notifications).
Measured from tw_runs: T until the last run finished (fires/s, as one_burst), the drain rate
from first to last, execution lateness, missing and duplicates; T until the last claim
(claimed/s: the schedulers' share, which is what more schedulers could speed up); and from
each scheduler's /metrics the fires it claimed, claim conflicts (planned claims another
scheduler won), takeover fires and stale-epoch refusals.

With `--quick` the bare-SQL burst runs once per checkout, before its first scheduler count.

`--racing-tree PATH` runs the same with every process started from another checkout (its venv's
python, its directory): the pre-partition version (97e0900), where every scheduler scans the
whole due index and races the others for the same rows.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import asyncpg

from bench import claim_seed, e2e, raw_fire_loop
from bench.env import Env
from bench.meter import CpuMeter, wait_for_quiet
from bench.partitions.common import (
    THIS_TREE,
    Role,
    Tree,
    errors_logged,
    migrate,
    noise_line,
    record,
    scrape_all,
    seed_at_jobs,
    start_role,
    stop_all,
    table,
    until_spread,
)
from bench.stats import summary


@dataclass(frozen=True, kw_only=True)
class ScalingConfig:
    jobs: int = 25_000
    counts: tuple[int, ...] = (1, 2, 3)
    workers: int = 1
    lead_s: float = 3.0  # T - end of the seeding (estimated)
    seed_rate_guess: float = 40_000.0  # rows/s of the COPY, to place T after it
    timeout_s: float = 300.0
    stall_s: float = 30.0  # stop waiting when no run finished for this long
    reps: int = 1
    # A bare-SQL burst before every case; False (--quick): one per tree and repetition, shared
    # by its scheduler counts (seeding its 1,000,000-row table takes ~20 s).
    ceiling_each: bool = True
    quiet_wait_s: float = 10.0  # longest wait for foreign load under 0.25 cores before a case

    @classmethod
    def build(
        cls, quick: bool, jobs: int | None, reps: int, counts: tuple[int, ...] = (1, 2, 3)
    ) -> ScalingConfig:
        found = (
            cls(jobs=5000, reps=reps, counts=counts, ceiling_each=False, quiet_wait_s=3.0)
            if quick
            else cls(reps=reps, counts=counts)
        )
        found = found if jobs is None else replace(found, jobs=jobs)
        if raw_fire_loop.TABLE_JOBS % found.jobs:
            raise SystemExit(f"--jobs {found.jobs} must divide {raw_fire_loop.TABLE_JOBS:,}")
        return found


async def run(env: Env, cfg: ScalingConfig, *, racing: list[Tree]) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for rep in range(cfg.reps):
        for tree in (THIS_TREE, *racing):
            for k, n in enumerate(cfg.counts):
                if cfg.ceiling_each or k == 0:
                    ceiling = await _ceiling(env, cfg)
                case = await _guarded(_burst(env, cfg, tree, n), tree, n)
                case |= {"rep": rep + 1, "ceiling": ceiling}
                cases.append(case)
                print(_line(case), flush=True)
    result = {"config": asdict(cfg), "trees": {t.label: str(t.path) for t in (THIS_TREE, *racing)},
              "cases": cases}  # fmt: skip
    record("scaling", result)
    print(render(result), flush=True)
    return result


async def _ceiling(env: Env, cfg: ScalingConfig) -> dict[str, Any]:
    try:
        found = await raw_fire_loop.burst_case(env, cfg.jobs)
    except Exception as exc:  # the case still runs; its ratio is missing
        found = {"error": f"{type(exc).__name__}: {exc}"}
    print(raw_fire_loop.summary_line(found), flush=True)
    return found


async def _guarded(coro: Any, tree: Tree, n: int) -> dict[str, Any]:
    try:
        return dict(await coro)
    except Exception as exc:  # one broken case must not lose the others
        return {"tree": tree.label, "schedulers": n, "error": f"{type(exc).__name__}: {exc}"}


async def _burst(env: Env, cfg: ScalingConfig, tree: Tree, n: int) -> dict[str, Any]:
    quiet = await asyncio.to_thread(wait_for_quiet, env.attribution, max_wait_s=cfg.quiet_wait_s)
    db = await env.admin.create(f"scale_{tree.label}_{n}")
    url = env.admin.dsn(db)
    out: dict[str, Any] = {"tree": tree.label, "schedulers": n, "jobs": cfg.jobs,
                           "foreign_before": quiet}  # fmt: skip
    roles: list[Role] = []
    conn: asyncpg.Connection | None = None
    try:
        await migrate(tree, url)
        conn = await asyncpg.connect(url)
        roles += await asyncio.gather(
            *(start_role(env, tree, "worker", url, f"w{i + 1}") for i in range(cfg.workers))
        )
        scheds = list(
            await asyncio.gather(
                *(start_role(env, tree, "scheduler", url, f"s{i + 1}") for i in range(n))
            )
        )
        roles += scheds
        if tree.partitioned:
            partitions = await claim_seed.partition_count(conn)
            out["spread_s"] = round(
                await until_spread(conn, [s.name for s in scheds], partitions), 2
            )
        t_us = math.ceil(time.time() + cfg.jobs / cfg.seed_rate_guess + cfg.lead_s) * 1_000_000
        out["seed_s"] = await seed_at_jobs(url, cfg.jobs, t_us)
        before = await scrape_all(scheds)
        out["ready_before_t_s"] = round(t_us / 1e6 - time.time(), 2)
        await asyncio.sleep(max(0.0, t_us / 1e6 - time.time()))
        with CpuMeter(env.attribution) as meter:
            out["waited_s"] = await _wait_for_runs(conn, cfg)
        after = await scrape_all(scheds)
        await stop_all(roles)
        out["errors_logged"] = errors_logged(roles)
        runs = list(await conn.fetch(
            "SELECT scheduled_us, created_us, started_us, finished_us, status FROM tw_runs"
        ))  # fmt: skip
        reruns = int(
            await conn.fetchval(
                "SELECT count(*) - count(DISTINCT run_id) FROM tw_attempt_history"
                " WHERE status <> 'lost'"
            )
        )
    finally:
        await stop_all(roles)
        if conn is not None:
            await conn.close()
        await env.admin.drop(db)
    found = e2e.analyse_task_burst(runs, reruns, t_us, cfg.jobs, {})
    found.pop("counters")
    found.pop("per_fire")
    return out | found | _claims(runs, t_us) | _metrics(after, before) | {"cpu": meter.report()}


async def _wait_for_runs(conn: asyncpg.Connection, cfg: ScalingConfig) -> float:
    """Poll until every run finished or none finished for `stall_s`."""
    started = time.monotonic()
    last, last_change = -1, started
    while time.monotonic() - started < cfg.timeout_s:
        count = await conn.fetchval("SELECT count(*) FROM tw_runs WHERE status <> 'pending'")
        now = time.monotonic()
        if count != last:
            last, last_change = count, now
        if count >= cfg.jobs or now - last_change > cfg.stall_s:
            break
        await asyncio.sleep(0.25)
    return round(time.monotonic() - started, 2)


def _claims(runs: list[asyncpg.Record], t_us: int) -> dict[str, Any]:
    """The schedulers' side: T until the last run was claimed (created), and first to last."""
    created = sorted(r["created_us"] for r in runs)
    if not created:
        return {"claimed": 0}
    span = (created[-1] - created[0]) / 1e6
    until_last = (created[-1] - t_us) / 1e6
    return {
        "claimed": len(created),
        "claim_until_last_s": round(until_last, 3),
        "claimed_per_s": round(len(created) / until_last, 1) if until_last > 0 else math.nan,
        "claim_drain_per_s": round((len(created) - 1) / span, 1) if span > 0 else math.nan,
        "claim_lateness_ms": summary([(c - t_us) / 1000 for c in created]),
    }


def _metrics(
    after: dict[str, dict[str, float]], before: dict[str, dict[str, float]]
) -> dict[str, Any]:
    def delta(name: str) -> dict[str, float]:
        return {p: after[p][name] - before[p][name] for p in after if p in before}

    conflicts = delta("tickwork_claim_conflicts_total")
    return {
        "fires_by_scheduler": delta("tickwork_fires_total"),
        "conflicts": sum(conflicts.values()),
        "conflicts_by_scheduler": conflicts,
        "takeovers": sum(delta("tickwork_takeover_fires_total").values()),
        "refused": sum(delta("tickwork_stale_epoch_refusals_total").values()),
        "partitions_owned": {p: m["tickwork_partitions_owned"] for p, m in after.items()},
    }


def _ratio(case: dict[str, Any]) -> float:
    mine, bare = case.get("fires_per_s"), case.get("ceiling", {}).get("fires_per_s")
    if not mine or not bare:
        return math.nan
    return round(100 * float(mine) / float(bare), 1)


def _line(case: dict[str, Any]) -> str:
    name = f"  {case['tree']} x{case['schedulers']}:"
    if "error" in case:
        return f"{name} FAILED {case['error']}"
    lat = case["lateness_ms"]
    return (
        f"{name} {case['jobs']} jobs in {case['completion_s']} s = {case['fires_per_s']} fires/s "
        f"= {_ratio(case)} % of bare SQL {case['ceiling'].get('fires_per_s')}; claims/s "
        f"{case.get('claim_drain_per_s')}; p50 {lat.get('p50')} p99 {lat.get('p99')} ms; missing "
        f"{case['missing']} dup {case['duplicates']}; conflicts {case['conflicts']} takeovers "
        f"{case['takeovers']} refused {case['refused']}; fires by scheduler "
        f"{case['fires_by_scheduler']}; noise {case['cpu']['foreign_cores']}"
    )


def render(result: dict[str, Any]) -> str:
    cfg = result["config"]
    headers = ["tree", "scheds", "fires/s", "bare SQL/s", "% bare", "drain/s", "claims/s",
               "last claim", "p50 ms", "p99 ms", "missing", "dup", "conflicts", "takeovers",
               "refused", "noise"]  # fmt: skip
    rows = []
    for c in result["cases"]:
        if "error" in c:
            rows.append([c["tree"], c["schedulers"], "FAILED", *[None] * 13])
            continue
        lat = c["lateness_ms"]
        rows.append([
            c["tree"], c["schedulers"], c["fires_per_s"], c["ceiling"].get("fires_per_s"),
            _ratio(c), c["drain_per_s"], c.get("claim_drain_per_s"),
            c.get("claim_until_last_s"), lat.get("p50"), lat.get("p99"),
            c["missing"], c["duplicates"], c["conflicts"], c["takeovers"], c["refused"],
            c["cpu"]["foreign_cores"],
        ])  # fmt: skip
    lines = [
        "",
        f"scaling: burst of {cfg['jobs']:,} one-shot no-op tasks due at one instant, table queue, "
        f"{cfg['workers']} worker(s); each row after a bare-SQL burst of the same N; fires/s = N /"
        " (T to the last run finished); drain/s = first to last finished; claims/s = first to "
        "last claim; last claim = s from T to the last claim (negative: claimed ahead, the "
        "look-ahead is 200 ms); lateness = started - scheduled",
        table(headers, rows),
        *(f"{c['tree']} x{c['schedulers']}: fires by scheduler {c.get('fires_by_scheduler')}, "
          f"errors logged {c.get('errors_logged')}; {noise_line(c['cpu'])}"
          for c in result["cases"] if "error" not in c),
    ]  # fmt: skip
    return "\n".join(lines)
