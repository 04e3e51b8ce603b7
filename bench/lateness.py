"""Fire lateness of a real `tickwork up` process: 1,000 jobs firing every second.

Per store (SQLite file, PostgreSQL database) and variant ("spread": anchors spread evenly over
one second, 1,000 fires/s; "aligned": every anchor on the same instant, a burst of 1,000 fires at
the top of each second), a fresh store and a fresh process:

1. start the no-op webhook receiver (its own process) and `python -m tickwork up`;
2. create the jobs over HTTP (`POST /v1/jobs`, schedule `every: PT1S` with an explicit anchor);
3. skip a warm-up, then measure a window of whole seconds (CPU per process, noise);
4. SIGTERM the process (it drains and records outcomes), then read `tw_runs` directly.

Lateness = started_at - scheduled_for of each run scheduled inside the window (the executor
stamps started_at when the webhook call begins). Receiver-side lateness = arrival time at the
receiver - the `tickwork-scheduled-for` header. Every expected occurrence is accounted for:
missing or duplicated ones are reported, not hidden.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench import procs
from bench.env import Env
from bench.meter import CpuMeter, wait_for_quiet
from bench.noop_task import NOOP_TASK
from bench.stats import summary
from tickwork.testing import free_port

RUNS_IN_WINDOW = (
    "SELECT job_id, scheduled_us, started_us, status, coalesced, created_us, finished_us "
    "FROM tw_runs "
    "WHERE origin = 'schedule' AND scheduled_us >= {ws} AND scheduled_us < {we}"
)


@dataclass(frozen=True, kw_only=True)
class LatenessConfig:
    jobs: int = 1000
    warmup_s: float = 5.0
    window_s: int = 60
    settle_s: float = 2.0  # after the window, before SIGTERM: the last fires finish
    create_concurrency: int = 16
    # "webhook": a POST to the no-op receiver; "task": the no-op Python task (bench.noop_task),
    # which leaves only tickwork's own dispatch between the instant and the start.
    kind: str = "webhook"

    @classmethod
    def quick(cls, kind: str = "webhook") -> LatenessConfig:
        return cls(warmup_s=2.0, window_s=5, settle_s=1.5, kind=kind)


@dataclass(frozen=True)
class Window:
    start_us: int
    end_us: int


# job_id, scheduled_us, started_us, status, coalesced, created_us, finished_us
Run = tuple[str, int, int | None, str, int, int, int | None]


async def run_case(
    env: Env, cfg: LatenessConfig, store: str, variant: str, *, label: str = ""
) -> dict[str, Any]:
    """One store and variant; `label` sets apart the files and database of cases that would
    otherwise share them (the steps of a ramp)."""
    tag = f"{store}-{variant}" + ("-task" if cfg.kind == "task" else "") + label
    quiet = await asyncio.to_thread(
        wait_for_quiet, env.attribution, max_wait_s=3.0 if env.quick else 30.0
    )
    url = await _store_url(env, store, tag)
    receiver_out = env.tmp / f"receiver-{tag}.json"
    receiver, line = await procs.start(
        "receiver",
        [sys.executable, "-m", "bench.receiver", "--out", str(receiver_out)],
        ready="ready",
        log_path=env.tmp / f"receiver-{tag}.log",
    )
    hook = f"http://127.0.0.1:{line.split()[-1]}/hook"
    env.attribution.named[receiver.pid] = "receiver"
    try:
        measured = await _with_tickwork(env, cfg, url, hook, variant, tag)
    finally:
        await receiver.stop()
    window: Window = measured.pop("window")
    runs = await _read_runs(url, window)
    arrivals = json.loads(receiver_out.read_text())
    result = {"store": store, "variant": variant, "kind": cfg.kind, "foreign_before": quiet}
    result |= measured
    result |= analyse(runs, arrivals, window, cfg)
    return result


async def _store_url(env: Env, store: str, tag: str) -> str:
    if store == "sqlite":
        return f"sqlite:///{env.tmp / f'{tag}.db'}"
    return env.admin.dsn(await env.admin.create(tag.replace("-", "_")))


async def _with_tickwork(
    env: Env, cfg: LatenessConfig, url: str, hook: str, variant: str, tag: str
) -> dict[str, Any]:
    port = free_port()
    data = env.tmp / f"data-{tag}"
    up, _banner = await procs.start(
        "tickwork",
        [sys.executable, "-m", "tickwork", "up", "--db", url, "--port", str(port)]
        + (["--import", "bench.noop_task"] if cfg.kind == "task" else []),
        ready="listening",
        log_path=env.tmp / f"tickwork-{tag}.log",
        env={
            "TICKWORK_LOG_LEVEL": "warning",
            "TICKWORK_WEBHOOK_ALLOW": "127.0.0.1/32",
            "TICKWORK_DATA_DIR": str(data),  # its first admin key goes there
            "TICKWORK_API_KEY_RATE": "0",  # the bench creates jobs as fast as it can
        },
    )
    env.attribution.named[up.pid] = "tickwork"
    try:
        key = admin_key(data)
        create_s = await create_jobs(f"http://127.0.0.1:{port}", hook, variant, cfg, key)
        window = _window(time.time(), cfg)
        await _sleep_until(window.start_us / 1e6)
        with CpuMeter(env.attribution) as meter:
            await _sleep_until(window.end_us / 1e6)
        await asyncio.sleep(cfg.settle_s)
    finally:
        exit_code = await up.stop()
    log = up.log_path.read_text(errors="replace")
    return {
        "window": window,
        "create_s": round(create_s, 2),
        "cpu": meter.report(),
        "exit_code": exit_code,
        "errors_logged": sum(("ERROR" in ln or "Traceback" in ln) for ln in log.splitlines()),
        "log_tail": up.log_tail(5) if exit_code else "",
    }


def _window(created_at: float, cfg: LatenessConfig) -> Window:
    start = math.ceil(created_at + cfg.warmup_s)
    return Window(start_us=start * 1_000_000, end_us=(start + cfg.window_s) * 1_000_000)


async def _sleep_until(epoch_s: float) -> None:
    await asyncio.sleep(max(0.0, epoch_s - time.time()))


def anchors(variant: str, jobs: int, base_s: int) -> list[str]:
    """ISO anchors: all on `base_s` (aligned) or spread evenly over the following second."""
    step_us = 0 if variant == "aligned" else 1_000_000 // jobs
    return [_iso(base_s * 1_000_000 + i * step_us) for i in range(jobs)]


def _iso(epoch_us: int) -> str:
    return datetime.fromtimestamp(epoch_us / 1e6, UTC).isoformat().replace("+00:00", "Z")


def admin_key(data_dir: Path) -> str:
    """The admin key a tickwork API wrote into its (fresh) data directory at start."""
    return (data_dir / "admin.key").read_text().strip()


async def create_jobs(api: str, hook: str, variant: str, cfg: LatenessConfig, key: str) -> float:
    """Create the jobs over HTTP; anchors lie in the past, so each fires from its next second."""
    started = time.monotonic()
    slots = asyncio.Semaphore(cfg.create_concurrency)
    headers = {"Authorization": f"Bearer {key}"}
    target: dict[str, str] = (
        {"type": "task", "name": NOOP_TASK}
        if cfg.kind == "task"
        else {"type": "webhook", "url": hook, "method": "POST"}
    )
    async with aiohttp.ClientSession(base_url=api, headers=headers) as session:

        async def create(i: int, anchor: str) -> None:
            body = {
                "name": f"bench-{variant}-{i:05d}",
                "schedule": {"every": "PT1S", "anchor": anchor},
                "target": target,
            }
            async with slots, session.post("/v1/jobs", json=body) as response:
                if response.status != 201:
                    raise RuntimeError(f"POST /v1/jobs: {response.status} {await response.text()}")

        found = anchors(variant, cfg.jobs, int(time.time()) - 10)
        await asyncio.gather(*(create(i, a) for i, a in enumerate(found)))
    return time.monotonic() - started


async def _read_runs(url: str, window: Window) -> list[Run]:
    query = RUNS_IN_WINDOW.format(ws=window.start_us, we=window.end_us)
    if url.startswith("sqlite:///"):
        return _read_sqlite(url.removeprefix("sqlite:///"), query)
    conn = await asyncpg.connect(url)
    try:
        return [(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in await conn.fetch(query)]
    finally:
        await conn.close()


def _read_sqlite(path: str, query: str) -> list[Run]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        return [(r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in conn.execute(query)]


def analyse(
    runs: list[Run], arrivals: list[list[Any]], window: Window, cfg: LatenessConfig
) -> dict[str, Any]:
    expected = cfg.jobs * cfg.window_s
    occurrences = {(r[0], r[1]) for r in runs}
    late_ms = [(r[2] - r[1]) / 1000 for r in runs if r[2] is not None]
    return {
        "fires_expected": expected,
        "fires_recorded": len(runs),
        "missing": expected - len(occurrences),
        "duplicates": len(runs) - len(occurrences),
        "not_started": sum(r[2] is None for r in runs),
        "coalesced": sum(r[4] for r in runs),
        "statuses": dict(Counter(r[3] for r in runs)),
        "early": sum(ms < 0 for ms in late_ms),
        "lateness_ms": summary(late_ms),
        "worst_second_p99_ms": _worst_second_p99(runs),
        # When the claim committed, relative to the instant (negative: claimed ahead of it).
        "claim_lag_ms": summary([(r[5] - r[1]) / 1000 for r in runs]),
        "claimed_late": sum(r[5] > r[1] for r in runs),
        "webhook_ms": summary([(r[6] - r[2]) / 1000 for r in runs if r[2] and r[6]]),
        "receiver": _receiver(arrivals, window),
    }


def _worst_second_p99(runs: list[Run]) -> float:
    by_second: dict[int, list[float]] = defaultdict(list)
    for _job, sched, started, *_rest in runs:
        if started is not None:
            by_second[sched // 1_000_000].append((started - sched) / 1000)
    p99s = [summary(v)["p99"] for v in by_second.values()]
    return max(p99s, default=math.nan)


def _receiver(arrivals: list[list[Any]], window: Window) -> dict[str, Any]:
    lat_ms, keys = [], set()
    for arrived, header, key in arrivals:
        if not header:
            continue
        sched_s = datetime.fromisoformat(header).timestamp()
        if window.start_us <= round(sched_s * 1e6) < window.end_us:
            lat_ms.append((arrived - sched_s) * 1000)
            keys.add(key)
    return {
        "deliveries": len(lat_ms),
        "distinct": len(keys),
        "lateness_ms": summary(lat_ms),
    }


def case_label(case: dict[str, Any]) -> str:
    """A case's variant as reports name it: the target kind is said when it is not a webhook."""
    kind = case.get("kind", "webhook")
    return case["variant"] if kind == "webhook" else f"{case['variant']}, no-op task"


def config_dict(cfg: LatenessConfig) -> dict[str, Any]:
    return asdict(cfg)


def receiver_summary(arrivals: list[list[Any]], window: Window) -> dict[str, Any]:
    """Receiver-side deliveries, distinct keys and lateness of the fires scheduled in `window`."""
    return _receiver(arrivals, window)
