"""`python -m bench.peers`: tickwork and the schedulers a user would pick instead, in one run.

    uv run python -m bench.peers [--quick] [--only apscheduler,celery_eta,...]
        [--scenario burst,precision,sustained,failover] [--peer-jobs 10000]
        [--tickwork-jobs 100000] [--precision-jobs 1000] [--precision-seconds 60]
        [--sustained-rates 100,200,500,...] [--sustained-seconds 60] [--pg-dsn DSN]
        [--redis-url URL]

Each peer runs in its own venv (installed on first use, cached), through its harness; tickwork
runs through the existing benchmarks (bench/e2e.py, bench/raw_fire_loop.py, bench/lateness.py)
in the same run, so the ratios compare figures measured minutes apart on the same machine.
Writes bench/results/peers-<run id>.json and bench/results/peers.md (quick:
peers-quick.md), and in full mode the plots docs/img/peers-*.png.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import machine, meter
from bench.cli import DEFAULT_PG_DSN
from bench.env import Env
from bench.peers import (
    peer_case,
    plots,
    report,
    sustained,
    tickwork_cases,
    tickwork_failover,
    venvs,
)
from bench.peers.peer_case import Settings
from bench.peers.registry import PEERS, SCENARIOS, Peer
from bench.pgutil import Admin, attribution_of

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
COMMAND = "uv run python -m bench.peers" + "".join(f" {a}" for a in sys.argv[1:])
RAW_TABLE_JOBS = 1_000_000  # the bare-SQL loop's table: its N must divide it


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.peers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--quick", action="store_true", help="a smoke run: small N, short windows")
    ap.add_argument("--only", type=_names, help=f"peers, comma-separated: {', '.join(PEERS)}")
    ap.add_argument("--scenario", type=_scenarios, default=SCENARIOS)
    ap.add_argument("--peer-jobs", type=int, help="burst N of every peer (full 10000, quick 200)")
    ap.add_argument("--tickwork-jobs", type=int, help="tickwork's own burst N (full 100000)")
    ap.add_argument("--precision-jobs", type=int, help="every-second jobs (full 1000, quick 100)")
    ap.add_argument("--precision-seconds", type=int, help="seconds measured (full 60, quick 5)")
    ap.add_argument(
        "--sustained-rates", type=_rates, help="the ramp's every-second jobs, comma-separated "
        f"(full {_joined(sustained.FULL_RATES)}, quick {_joined(sustained.QUICK_RATES)})"
    )  # fmt: skip
    ap.add_argument("--sustained-seconds", type=int, help="seconds measured per step (60/5)")
    ap.add_argument("--pg-dsn", default=DEFAULT_PG_DSN, help="admin DSN (default: %(default)s)")
    ap.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="without DB number")
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument(
        "--out", type=Path, help="the JSON file (default bench/results/peers-<id>.json)"
    )
    args = ap.parse_args(argv)
    full = not args.quick
    args.peer_jobs = args.peer_jobs or (10_000 if full else 200)
    args.tickwork_jobs = args.tickwork_jobs or (100_000 if full else args.peer_jobs)
    args.precision_jobs = args.precision_jobs or (1000 if full else 100)
    args.precision_seconds = args.precision_seconds or (60 if full else 5)
    args.sustained_rates = args.sustained_rates or (
        sustained.FULL_RATES if full else sustained.QUICK_RATES
    )
    args.sustained_seconds = args.sustained_seconds or (60 if full else 5)
    return args


def _joined(rates: tuple[int, ...]) -> str:
    return ",".join(str(r) for r in rates)


def _rates(text: str) -> tuple[int, ...]:
    try:
        rates = tuple(int(r) for r in text.split(",") if r.strip())
    except ValueError:
        msg = f"rates are whole numbers, e.g. 100,200,500: {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not rates or any(r <= 0 for r in rates) or list(rates) != sorted(set(rates)):
        raise argparse.ArgumentTypeError(f"rates must be positive and rising: {text!r}")
    return rates


def _names(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown peer(s) {unknown}; known: {list(PEERS)}")
    return names


def _scenarios(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names or any(n not in SCENARIOS for n in names):
        raise argparse.ArgumentTypeError(f"scenarios are {SCENARIOS}")
    return names


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        path = asyncio.run(run(args))
    except KeyboardInterrupt:
        sys.exit(130)
    print(f"results: {path}", flush=True)


async def run(args: argparse.Namespace) -> Path:
    started, run_id = time.monotonic(), secrets.token_hex(3)
    peers = [PEERS[n] for n in (args.only or tuple(PEERS))]
    admin = Admin(args.pg_dsn, run_id)
    await admin.open()
    try:
        with tempfile.TemporaryDirectory(prefix="tw-peers-") as tmp:
            env = Env(run_id=run_id, quick=args.quick, tmp=Path(tmp), admin=admin,
                      attribution=await attribution_of(admin))  # fmt: skip
            _name_redis(env)
            data = _header(args, run_id) | {"facts": machine.facts()}
            data["facts"]["postgres"] = await admin.server_facts()
            data["noise_at_start"] = await asyncio.to_thread(meter.probe, env.attribution, 3.0)
            data["installs"] = await _install(peers)
            data["cases"] = await _cases(env, args, peers, data["installs"])
    finally:
        await admin.close()
    data["duration_s"] = round(time.monotonic() - started, 1)
    return report.write(data, args, plots_dir=None if args.quick or args.no_plots else plots.DIR)


def _header(args: argparse.Namespace, run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "quick": args.quick,
        "command": COMMAND,
        "config": {
            "scenarios": list(args.scenario),
            "peer_jobs": args.peer_jobs,
            "tickwork_jobs": args.tickwork_jobs,
            "precision_jobs": args.precision_jobs,
            "precision_seconds": args.precision_seconds,
            "precision_warmup_s": _warmup(args),
            "sustained_rates": list(args.sustained_rates),
            "sustained_seconds": args.sustained_seconds,
            "sustained_pass_p99_ms": sustained.PASS_P99_MS,
            "case_budget_s": peer_case.CASE_BUDGET_S,
        },
    }


def _warmup(args: argparse.Namespace) -> float:
    return 2.0 if args.quick else 5.0


def _name_redis(env: Env) -> None:
    """The shared Redis server's CPU is the Celery peers' broker: name it, not "foreign"."""
    for pid, (_ppid, _ticks, comm, _start) in meter.read_procs().items():
        if comm.startswith("redis-server"):
            env.attribution.named[pid] = "redis"


async def _install(peers: list[Peer]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for peer in peers:
        venv = await venvs.ensure(peer.venv, peer.packages)
        found[peer.name] = {"python": str(venv.python) if venv.python else None,
                            "status": venv.reason, "packages": list(peer.packages)}  # fmt: skip
        print(f"  {peer.name}: venv {venv.reason}", flush=True)
    return found


async def _cases(
    env: Env, args: argparse.Namespace, peers: list[Peer], installs: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []

    def keep(case: dict[str, Any]) -> None:
        cases.append(case)
        print(report.case_line(case), flush=True)

    if "burst" in args.scenario:
        sizes = sorted({args.peer_jobs, args.tickwork_jobs})
        for jobs in sizes:
            keep(await tickwork_cases.burst(env, jobs))
            if RAW_TABLE_JOBS % jobs == 0:
                keep(await tickwork_cases.ceiling(env, jobs))
            else:
                keep({"peer": "bare_sql", "scenario": "burst", "jobs": jobs,
                      "error": f"N must divide {RAW_TABLE_JOBS}"})  # fmt: skip
        settings = Settings(scenario="burst", jobs=args.peer_jobs, redis_url=args.redis_url)
        for peer in peers:
            if "burst" in peer.scenarios:
                keep(await _peer(env, peer, installs, settings))
    if "precision" in args.scenario:
        variants = sorted({p.precision_variant for p in peers if "precision" in p.scenarios})
        for variant in variants or ["spread"]:
            keep(await tickwork_cases.precision(
                env, args.precision_jobs, args.precision_seconds, variant))  # fmt: skip
        for peer in peers:
            if "precision" in peer.scenarios:
                jobs = min(args.precision_jobs, peer.precision_jobs or args.precision_jobs)
                settings = Settings(scenario="precision", jobs=jobs, seconds=args.precision_seconds,
                                    warmup_s=_warmup(args), redis_url=args.redis_url)  # fmt: skip
                keep(await _peer(env, peer, installs, settings))
    if "sustained" in args.scenario:
        await _sustained(env, args, peers, installs, keep)
    if "failover" in args.scenario:
        plan = tickwork_failover.FailoverPlan(
            jobs=args.peer_jobs, kill_after=peer_case.kill_after(args.peer_jobs)
        )
        keep(await _tickwork_failover(env, plan))
        settings = Settings(scenario="failover", jobs=args.peer_jobs, redis_url=args.redis_url)
        for peer in peers:
            if "failover" in peer.scenarios:
                keep(await _peer(env, peer, installs, settings))
    return cases


async def _sustained(
    env: Env,
    args: argparse.Namespace,
    peers: list[Peer],
    installs: dict[str, dict[str, Any]],
    keep: Callable[[dict[str, Any]], None],
) -> None:
    """tickwork's ramp in each variant a peer needs, then every peer's that has the precision
    workload (a step is that workload at R jobs; the peer's own cap on it does not apply)."""
    rates, seconds = args.sustained_rates, args.sustained_seconds
    ramped = [p for p in peers if "precision" in p.scenarios]
    for variant in sorted({p.precision_variant for p in ramped}) or ["spread"]:

        async def mine(rate: int, variant: str = variant) -> dict[str, Any]:
            return await tickwork_cases.sustained_step(env, rate, seconds, variant)

        await sustained.ramp(rates, mine, keep)
    for peer in ramped:

        async def theirs(rate: int, peer: Peer = peer) -> dict[str, Any]:
            settings = Settings(scenario="precision", jobs=rate, seconds=seconds,
                                warmup_s=_warmup(args), redis_url=args.redis_url,
                                label=f"-r{rate}")  # fmt: skip
            return await _peer(env, peer, installs, settings)

        await sustained.ramp(rates, theirs, keep)


async def _tickwork_failover(env: Env, plan: tickwork_failover.FailoverPlan) -> dict[str, Any]:
    try:
        return await tickwork_failover.run(env, plan)
    except Exception as exc:  # the run goes on; the report says this row is missing
        return {"peer": "tickwork", "scenario": "failover", "jobs": plan.jobs,
                "error": f"{type(exc).__name__}: {exc}"}  # fmt: skip


async def _peer(
    env: Env, peer: Peer, installs: dict[str, dict[str, Any]], settings: Settings
) -> dict[str, Any]:
    base = {"peer": peer.name, "scenario": settings.scenario, "jobs": settings.jobs,
            "variant": peer.precision_variant, "fair": peer.fair}  # fmt: skip
    python = installs[peer.name]["python"]
    if python is None:
        return base | {"error": installs[peer.name]["status"]}
    try:
        return base | await peer_case.run(env, peer, Path(python), settings)
    except Exception as exc:  # one broken peer must not lose the others
        return base | {"error": f"{type(exc).__name__}: {exc}"}
