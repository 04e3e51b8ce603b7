"""`scan`: the due-scan's cost per batch as `tw_jobs` grows from 10^4 to 10^6 (10^7 opt-in).

Each size is one database seeded by COPY (`bench/claim_seed.py`: tickwork's own schema and
migration, every row's partition as tickwork computes it): the same `due` interval jobs due in
the 50 minutes before a fixed `now` (so the same number due per second in every size), the
rest due 6 to 30 hours later. Then, through the store itself (`PostgresStore`, its scan pool
with generic plans, ADR 0015), each statement is called `warmup` times and then `calls` times
back to back, and each call is timed in the driver:

- `due_jobs(now, 1000)` over all 64 partitions and over a third of them (21: one scheduler of
  three): a full batch of due jobs, what every busy tick reads;
- the same with `until` before the first due job: nothing due, what an idle tick reads;
- `next_due_at()` over all partitions and over a third: how long the scheduler may sleep.

Nothing is claimed: every call reads the same rows, so the sizes differ only by what the index
and the heap hold.

asyncpg keeps a prepared statement only if its text is at most `max_cacheable_statement_size`
characters (15 KiB by default, and the store does not change it); a longer one is parsed and
planned again on every call, generic plan or not. The 64-branch due-scan is longer than that
(the report prints each statement's length), so two extra rows, `*_cache64k`, run the same
statement text on a bench connection with the same session settings and a 64 KiB limit: what
the due-scan would cost if it were cached.

Reported: p50 / p99 per statement and size, and largest / smallest size's p50 (the issue's
target: within 2x). Sizes run in rotating order, `reps` times.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import asyncpg

from bench import claim_seed
from bench.env import Env
from bench.meter import CpuMeter, wait_for_quiet
from bench.partitions.common import noise_line, record, table
from bench.stats import median, summary
from tickwork.clock import from_us, to_us
from tickwork.domain.partitions import DEFAULT_PARTITIONS
from tickwork.store.postgres import PostgresStore
from tickwork.store.postgres.store import SCAN_SETTINGS, _over_partitions
from tickwork.store.sql import rows as sql_rows
from tickwork.store.sql.reads import floor_us

SIZES = (10_000, 100_000, 1_000_000, 10_000_000)
DEFAULT_MAX_ROWS = 1_000_000
THIRD = tuple(range(21))  # one scheduler's share of 64 partitions among three
STATEMENTS = (
    "due_all", "due_third", "due_none_all", "next_all", "next_third",
    "due_all_cache64k", "due_none_all_cache64k",
)  # fmt: skip
ALL = tuple(range(DEFAULT_PARTITIONS))
BIG_CACHE = 64 * 1024
ASYNCPG_CACHE_LIMIT = (
    inspect.signature(asyncpg.connect).parameters["max_cacheable_statement_size"].default
)


@dataclass(frozen=True, kw_only=True)
class ScanConfig:
    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    due: int = 6000  # due jobs in every size; a third of the partitions holds ~2,000: full batch
    batch: int = 1000
    warmup: int = 20
    calls: int = 200
    reps: int = 1

    @classmethod
    def build(cls, *, quick: bool, max_rows: int | None, due: int | None, reps: int) -> ScanConfig:
        limit = max_rows if max_rows is not None else (100_000 if quick else DEFAULT_MAX_ROWS)
        sizes = tuple(n for n in SIZES if n <= limit)
        if not sizes:
            raise SystemExit(f"--max-rows {limit}: the smallest size is {SIZES[0]}")
        found = cls(sizes=sizes, reps=reps, calls=100 if quick else 200)
        if due is not None:
            found = cls(**(asdict(found) | {"due": due}))
        if found.due > found.sizes[0]:
            raise SystemExit(f"--jobs {found.due} due jobs do not fit in {found.sizes[0]} rows")
        return found


async def run(env: Env, cfg: ScanConfig) -> dict[str, Any]:
    now_us = time.time_ns() // 1000 - 5_000_000
    seeded: dict[int, tuple[str, dict[str, float]]] = {}
    for rows in cfg.sizes:
        db = await env.admin.create(f"scan_{rows}")
        shape = claim_seed.Shape(
            rows=rows, due=cfg.due, dirty=0, kind="every", misfire_grace_ms=7_200_000,
            now_us=now_us,
        )  # fmt: skip
        print(f"  seeding {rows:,} rows ...", flush=True)
        timings = await claim_seed.seed(env.admin.dsn(db), shape)
        print(f"  seeded {rows:,} rows: {timings}", flush=True)
        seeded[rows] = (db, timings)
    measured: list[dict[str, Any]] = []
    for rep in range(cfg.reps):
        k = rep % len(cfg.sizes)
        for rows in (*cfg.sizes[k:], *cfg.sizes[:k]):
            found = await _measure(env, cfg, env.admin.dsn(seeded[rows][0]), now_us)
            measured.append({"rows": rows, "rep": rep + 1, **found})
            print(f"  {rows:>10,} rows, rep {rep + 1}: {_brief(found)}", flush=True)
    for db, _ in seeded.values():
        await env.admin.drop(db)
    result = {
        "config": asdict(cfg),
        "seeding": {rows: t for rows, (_, t) in seeded.items()},
        "measured": measured,
        "summary": _summarise(cfg, measured),
        "statement_chars": statement_chars(),
        "asyncpg_cache_limit_chars": ASYNCPG_CACHE_LIMIT,
    }
    record("scan", result)
    print(render(result), flush=True)
    return result


async def _measure(env: Env, cfg: ScanConfig, url: str, now_us: int) -> dict[str, Any]:
    store = PostgresStore(url, migrate=False)
    await store.open()
    cached = await asyncpg.connect(
        url, server_settings=SCAN_SETTINGS, max_cacheable_statement_size=BIG_CACHE
    )
    now = from_us(now_us)
    before_due = now - timedelta(hours=1)  # before the first due job (50 min before now)
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "due_all": lambda: store.due_jobs(now, cfg.batch),
        "due_third": lambda: store.due_jobs(now, cfg.batch, partitions=THIRD),
        "due_none_all": lambda: store.due_jobs(before_due, cfg.batch),
        "next_all": lambda: store.next_due_at(),
        "next_third": lambda: store.next_due_at(partitions=THIRD),
        "due_all_cache64k": lambda: _due_cached(cached, now, cfg.batch),
        "due_none_all_cache64k": lambda: _due_cached(cached, before_due, cfg.batch),
    }
    out: dict[str, Any] = {}
    try:
        quiet = await asyncio.to_thread(wait_for_quiet, env.attribution, max_wait_s=10.0)
        with CpuMeter(env.attribution) as meter:
            for name, call in calls.items():
                out[name] = await _time_calls(call, cfg)
    finally:
        await store.close()
        await cached.close()
    return out | {"foreign_before": quiet, "cpu": meter.report()}


async def _due_cached(conn: asyncpg.Connection, until: Any, limit: int) -> list[Any]:
    """The store's 64-branch due-scan and row conversion, on a connection that caches it."""
    statement = _over_partitions("due_jobs", ALL)
    values = {"until": to_us(until), "limit": limit, "not_before": floor_us(None)}
    found = await conn.fetch(statement.text, *statement.args(values))
    return [sql_rows.due_from_row(r) for r in found]


def statement_chars() -> dict[str, int]:
    return {
        "due_all": len(_over_partitions("due_jobs", ALL).text),
        "due_third": len(_over_partitions("due_jobs", THIRD).text),
        "next_all": len(_over_partitions("next_due", ALL).text),
        "next_third": len(_over_partitions("next_due", THIRD).text),
    }


async def _time_calls(call: Callable[[], Awaitable[Any]], cfg: ScanConfig) -> dict[str, Any]:
    found: Any = None
    for _ in range(cfg.warmup):
        found = await call()
    ms = []
    for _ in range(cfg.calls):
        started = time.perf_counter()
        found = await call()
        ms.append((time.perf_counter() - started) * 1000)
    returned = len(found) if isinstance(found, list) else int(found is not None)
    return {"ms": summary(ms, digits=3), "returned": returned}


def _brief(found: dict[str, Any]) -> str:
    parts = [f"{n} p50 {found[n]['ms']['p50']} ms" for n in STATEMENTS]
    return ", ".join(parts) + f"; foreign {found['cpu']['foreign_cores']}"


def _summarise(cfg: ScanConfig, measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Per statement and size the median over reps of p50 and p99; largest / smallest size."""
    out: dict[str, Any] = {}
    for name in STATEMENTS:
        per_size = {}
        for rows in cfg.sizes:
            mine = [m[name] for m in measured if m["rows"] == rows]
            per_size[rows] = {
                "p50_ms": round(median([m["ms"]["p50"] for m in mine]), 3),
                "p99_ms": round(median([m["ms"]["p99"] for m in mine]), 3),
                "returned": mine[-1]["returned"],
            }
        small, large = per_size[cfg.sizes[0]], per_size[cfg.sizes[-1]]
        out[name] = {
            "sizes": per_size,
            "p50_ratio_largest_smallest": round(large["p50_ms"] / small["p50_ms"], 2),
            "p99_ratio_largest_smallest": round(large["p99_ms"] / small["p99_ms"], 2),
        }
    return out


def render(result: dict[str, Any]) -> str:
    cfg, summ = result["config"], result["summary"]
    sizes = cfg["sizes"]
    headers = ["statement", "returned", *[f"{n:,}" for n in sizes], "largest/smallest"]
    rows: list[list[Any]] = []
    for name in STATEMENTS:
        s = summ[name]
        returned = s["sizes"][sizes[-1]]["returned"]
        for pct in ("p50", "p99"):
            cells = [s["sizes"][n][f"{pct}_ms"] for n in sizes]
            ratio = s[f"{pct}_ratio_largest_smallest"]
            rows.append([f"{name} {pct} ms", returned, *cells, f"{ratio}x"])
    store_calls = STATEMENTS[:5]  # the *_cache64k rows are the bench's own connection
    worst = max(summ[n]["p50_ratio_largest_smallest"] for n in store_calls)
    chars = ", ".join(f"{k} {v:,}" for k, v in result["statement_chars"].items())
    noise = [m["cpu"] for m in result["measured"]]
    lines = [
        "",
        f"scan: due-scan per call through PostgresStore, {cfg['due']:,} due in each table, "
        f"batch {cfg['batch']}, {cfg['calls']} warm calls, reps {cfg['reps']}",
        table(headers, rows),
        f"worst p50 ratio largest/smallest of the store's calls: {worst}x (target: within 2x) -> "
        f"{'met' if worst <= 2.0 else 'NOT met'}",
        f"statement text (chars): {chars}; asyncpg caches up to "
        f"{result['asyncpg_cache_limit_chars']:,} (longer: parsed and planned on every call)",
        "seeding: " + ", ".join(f"{int(n):,} rows {t}" for n, t in result["seeding"].items()),
        *(f"{m['rows']:>10,} rows rep {m['rep']}: {noise_line(c)}"
          for m, c in zip(result["measured"], noise, strict=True)),
    ]  # fmt: skip
    return "\n".join(lines)
