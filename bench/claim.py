"""Claim + advance throughput on a 1,000,000-job PostgreSQL table: tickwork vs bare SQL.

Contenders, each on its own file copy of the same freshly seeded, VACUUM ANALYZEd database
(`CREATE DATABASE ... TEMPLATE ... STRATEGY FILE_COPY`), in rotating order, `reps` times:

- tickwork: `SchedulerService.run_once(now)` in a loop until it claims nothing (due read, pure
  planning in Python, the claim statement that also inserts one pending run per fire);
- tickwork_cron: the same on a table of cron jobs (next fire computed by cronsim in Python);
- bare_b: the ceiling, one claim+advance statement with SQL-side interval arithmetic;
- bare_c: bare_b + one tw_runs row per claimed job in the same statement: the bare-SQL version
  of what tickwork's claim does.

rows/s = fires / time from the first call to the return of the last non-empty batch.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import asyncpg

from bench import claim_seed, counting
from bench.env import Env
from bench.meter import CpuMeter, wait_for_quiet
from bench.pgutil import delta
from bench.stats import median, summary
from tickwork.clock import SystemClock, from_us
from tickwork.domain.runs import Fire
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.postgres import PostgresStore

# The bare due read takes the path the schema gives any claimer: the due index is
# (partition, next_run_us), so the earliest due rows of the whole table are a merge of one index
# range per partition (a Merge Append, as tickwork's own due-scan). A single ORDER BY over the
# table cannot use that index and sorts every due row on every batch (a sequential scan: about
# 2,700 rows/s on 1,000,000 rows, which the 2026-12-07 full run reported as the "ceiling").
# The bare statements run alone, so the UPDATE's row locks are all the locking they need
# (FOR UPDATE is not allowed beside UNION ALL).
DUE_BRANCH = (
    "(SELECT id, next_run_us FROM tw_jobs WHERE partition = {p} AND state = 'scheduled'"
    " AND next_run_us <= $1 ORDER BY next_run_us LIMIT $2)"
)
BARE_B = """
UPDATE tw_jobs j
SET fence_token = j.fence_token + 1, next_run_us = j.next_run_us + j.every_ms * 1000
FROM (SELECT id FROM ({branches}) u ORDER BY next_run_us LIMIT $2) d
WHERE j.id = d.id
RETURNING j.id, j.fence_token, j.next_run_us
"""
BARE_C = """
WITH due AS (
    SELECT id, next_run_us FROM ({branches}) u ORDER BY next_run_us LIMIT $2
),
claimed AS (
    UPDATE tw_jobs j SET fence_token = j.fence_token + 1,
        next_run_us = j.next_run_us + j.every_ms * 1000, last_fired_us = d.next_run_us,
        claimed_by = $3, claimed_us = $1
    FROM due d WHERE j.id = d.id
    RETURNING j.id, j.fence_token, j.target, d.next_run_us AS fired_us
),
inserted AS (
    INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                         coalesced, lease_owner, lease_until_us, created_us)
    SELECT id, id || ':' || (fired_us / 1000), 'schedule', fired_us, 'pending', 1, fence_token,
           0, $3, $4, $1
    FROM claimed
    ON CONFLICT (key) DO NOTHING
    RETURNING id, job_id, key, scheduled_us, fence_token, attempt
)
SELECT i.id, i.job_id, i.key, i.scheduled_us, i.fence_token, i.attempt, c.target
FROM inserted i JOIN claimed c ON c.id = i.job_id
"""


def bare_sql(name: str, partitions: int) -> str:
    """bare_b or bare_c with one due branch per partition of the database."""
    branches = " UNION ALL ".join(DUE_BRANCH.format(p=p) for p in range(partitions))
    return (BARE_B if name == "bare_b" else BARE_C).format(branches=branches)


CONTENDERS = ("tickwork", "bare_b", "bare_c", "tickwork_cron")
TABLE_OF = {"tickwork": "every", "bare_b": "every", "bare_c": "every", "tickwork_cron": "cron"}
LEASE_MS = 60_000


@dataclass(frozen=True, kw_only=True)
class ClaimConfig:
    rows: int = 1_000_000
    due: int = 200_000
    dirty: int = 100_000
    batch: int = 1000
    reps: int = 3
    # Wide enough that every due row is "on time": the path a healthy scheduler takes. With the
    # default 1 s, rows due minutes ago would take the misfire (coalesce) path instead.
    misfire_grace_ms: int = 7_200_000
    max_s: float = 30.0  # a contender stops when nothing is due or after this long
    profile: bool = False

    @classmethod
    def quick(cls, *, profile: bool = False) -> ClaimConfig:
        return cls(rows=50_000, due=20_000, dirty=5_000, max_s=10.0, profile=profile)


@dataclass(frozen=True)
class Template:
    name: str
    now_us: int


async def run(env: Env, cfg: ClaimConfig) -> dict[str, Any]:
    templates, seeding = {}, {}
    now_us = (time.time_ns() // 1000) - 5_000_000
    for kind in ("every", "cron"):
        templates[kind], seeding[kind] = await _seed_template(env, cfg, kind, now_us)
    reps: list[dict[str, Any]] = []
    for rep in range(cfg.reps):
        for name in _rotated(CONTENDERS, rep):
            reps.append(await run_contender(env, cfg, name, templates[TABLE_OF[name]], rep))
            print(_rep_line(reps[-1]), flush=True)
    result = {"config": asdict(cfg), "seeding": seeding, "reps": reps, "summary": _summarise(reps)}
    if cfg.profile:
        result["profile"] = await _profile(env, cfg, templates["every"])
    return result


def _rotated(names: Sequence[str], k: int) -> list[str]:
    k %= len(names)
    return [*names[k:], *names[:k]]


async def _seed_template(
    env: Env, cfg: ClaimConfig, kind: str, now_us: int
) -> tuple[Template, Any]:
    name = await env.admin.create(f"seed_{kind}")
    shape = claim_seed.Shape(
        rows=cfg.rows, due=cfg.due, dirty=cfg.dirty, kind=kind,
        misfire_grace_ms=cfg.misfire_grace_ms, now_us=now_us,
    )  # fmt: skip
    timings = await claim_seed.seed(env.admin.dsn(name), shape)
    print(f"  seeded {kind}: {timings}", flush=True)
    return Template(name=name, now_us=now_us), timings


async def run_contender(
    env: Env, cfg: ClaimConfig, name: str, template: Template, rep: int
) -> dict[str, Any]:
    db = await env.admin.create(f"{name}_r{rep}", template=template.name)
    url = env.admin.dsn(db)
    try:
        before = await env.admin.counters(db)
        quiet = wait_for_quiet(env.attribution, max_wait_s=5.0 if env.quick else 15.0)
        with CpuMeter(env.attribution) as meter:
            if name.startswith("tickwork"):
                measured = await _tickwork(url, cfg, template.now_us)
            else:
                measured = await _bare(url, cfg, name, template.now_us)
        pg = delta(await env.admin.counters(db), before)
        checks = await _checks(url, template.now_us)
    finally:
        await env.admin.drop(db)
    cpu = meter.report()
    return {
        "contender": name, "rep": rep + 1, **measured, "pg": pg, "checks": checks,
        "foreign_before": quiet, "cpu": cpu, "cpu_us_per_fire": _cpu_per_fire(cpu, measured),
    }  # fmt: skip


def _cpu_per_fire(cpu: dict[str, Any], measured: dict[str, Any]) -> dict[str, float]:
    fires = max(measured["fires"], 1)
    return {
        group: round(cores * cpu["wall_s"] * 1e6 / fires, 1)
        for group, cores in cpu["cores"].items()
        if group in ("driver", "postgres")
    }


async def _tickwork(url: str, cfg: ClaimConfig, now_us: int) -> dict[str, Any]:
    queries = counting.QueryCounter()
    store = PostgresStore(url, migrate=False)
    with queries.patch_pools():
        await store.open()
    timed = counting.TimedStore(store)
    service = SchedulerService(
        timed,
        SystemClock(),
        SchedulerConfig(node_id="bench", batch_size=cfg.batch, lookahead_ms=0),
        dispatch=_discard,
    )
    try:
        queries.reset()
        loop = await _tick_loop(service, now_us, cfg.max_s)
        pool_plan_cache_mode = await _plan_cache_mode(store)
    finally:
        await store.close()
    phases = timed.phases(loop["elapsed_s"])
    return {**loop, "statements": queries.counts(), "phases_s": phases,
            "sql_s": queries.elapsed(), "pool_plan_cache_mode": pool_plan_cache_mode}  # fmt: skip


def _discard(fires: Sequence[Fire]) -> None:
    return None


async def _tick_loop(service: SchedulerService, now_us: int, max_s: float) -> dict[str, Any]:
    now = from_us(now_us)
    fires = conflicts = ticks = 0
    batch_ms: list[float] = []
    started = last = time.perf_counter()
    while last - started < max_s:
        tick_start = time.perf_counter()
        result = await service.run_once(now)
        ticks += 1
        if not result.fires:
            break
        last = time.perf_counter()
        batch_ms.append((last - tick_start) * 1000)
        fires += len(result.fires)
        conflicts += result.conflicts
    return _loop_result(fires, last - started, batch_ms, ticks) | {"conflicts": conflicts}


def _loop_result(fires: int, elapsed: float, batch_ms: list[float], calls: int) -> dict[str, Any]:
    return {
        "fires": fires,
        "elapsed_s": round(elapsed, 3),
        "rows_per_s": round(fires / elapsed, 1) if elapsed > 0 else 0.0,
        "batches": len(batch_ms),
        "calls": calls,
        "batch_ms": summary(batch_ms),
        "capped": batches_left(calls, len(batch_ms)),
    }


def batches_left(calls: int, batches: int) -> bool:
    """True when the loop stopped on its time cap rather than on an empty batch."""
    return calls == batches


async def _plan_cache_mode(store: PostgresStore) -> str:
    """What a pooled connection's session really runs with, after the pool reset it."""
    async with store.pool.acquire() as conn:
        return str(await conn.fetchval("SHOW plan_cache_mode"))


async def _bare(url: str, cfg: ClaimConfig, name: str, now_us: int) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    sql = bare_sql(name, await claim_seed.partition_count(conn))
    args: tuple[Any, ...] = (now_us, cfg.batch)
    if name == "bare_c":
        args = (*args, "bench", now_us + LEASE_MS * 1000)
    try:
        fires, batch_ms, calls = 0, [], 0
        started = last = time.perf_counter()
        while last - started < cfg.max_s:
            call_start = time.perf_counter()
            found = await conn.fetch(sql, *args)
            calls += 1
            if not found:
                break
            last = time.perf_counter()
            batch_ms.append((last - call_start) * 1000)
            fires += len(found)
    finally:
        await conn.close()
    statements = {"claim": calls}
    return _loop_result(fires, last - started, batch_ms, calls) | {"statements": statements}


async def _checks(url: str, now_us: int) -> dict[str, int]:
    """Left due after the run (must be 0), runs written, jobs claimed twice (must be 0)."""
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM tw_jobs WHERE state = 'scheduled' AND next_run_us <= $1)"
            " AS still_due, (SELECT count(*) FROM tw_runs) AS runs,"
            " (SELECT count(*) FROM tw_jobs WHERE fence_token > 1 AND state = 'scheduled')"
            " AS claimed_twice",
            now_us,
        )
    finally:
        await conn.close()
    return dict(row) if row is not None else {}


def _rep_line(rep: dict[str, Any]) -> str:
    return (
        f"  claim rep {rep['rep']} {rep['contender']:>13}: {rep['rows_per_s']:>9,.0f} rows/s "
        f"({rep['fires']} fires in {rep['elapsed_s']} s), foreign {rep['cpu']['foreign_cores']}"
    )


def _summarise(reps: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in CONTENDERS:
        mine = [r for r in reps if r["contender"] == name]
        if not mine:
            continue
        rates = [r["rows_per_s"] for r in mine]
        fires = sum(r["fires"] for r in mine)
        out[name] = {
            "rows_per_s_median": median(rates),
            "rows_per_s_reps": rates,
            "capped_reps": sum(bool(r["capped"]) for r in mine),
            "foreign_cores_reps": [r["cpu"]["foreign_cores"] for r in mine],
            "batch_ms_p50_median": median([r["batch_ms"].get("p50", 0.0) for r in mine]),
            "batch_ms_p99_median": median([r["batch_ms"].get("p99", 0.0) for r in mine]),
            "per_fire": _per_fire(mine, fires),
        }
    for name in out:
        for ceiling in ("bare_b", "bare_c"):
            if ceiling in out:
                ratio = out[name]["rows_per_s_median"] / out[ceiling]["rows_per_s_median"]
                out[name][f"pct_of_{ceiling}"] = round(100 * ratio, 1)
    return out


def _per_fire(mine: list[dict[str, Any]], fires: int) -> dict[str, float]:
    """Counts per fire summed over the reps: they do not depend on machine load."""
    fires = max(fires, 1)
    statements: dict[str, int] = {}
    for r in mine:
        for kind, n in r["statements"].items():
            statements[kind] = statements.get(kind, 0) + n
    per = {f"stmt_{k}": round(n / fires, 5) for k, n in statements.items()}
    for key in ("xact_commit", "tup_updated", "tup_inserted", "tup_returned", "tup_fetched"):
        per[key] = round(sum(r["pg"].get(key, 0) for r in mine) / fires, 4)
    cpu = [r["cpu_us_per_fire"] for r in mine]
    for group in ("driver", "postgres"):
        per[f"cpu_us_{group}"] = median([c.get(group, 0.0) for c in cpu])
    return per


async def _profile(env: Env, cfg: ClaimConfig, template: Template) -> dict[str, Any]:
    """One extra tickwork pass under cProfile (slower; its rate is not a result)."""
    db = await env.admin.create("profile", template=template.name)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        measured = await _tickwork(env.admin.dsn(db), cfg, template.now_us)
        profiler.disable()
    finally:
        await env.admin.drop(db)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text).sort_stats("tottime")
    stats.print_stats(25)
    return {"rows_per_s_profiled": measured["rows_per_s"], "top_tottime": text.getvalue()}
