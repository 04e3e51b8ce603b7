"""One end-to-end case (a burst, or one sustained rate) on its own, for profiling.

    uv run python -m bench.one_burst --kind webhook --queue table --jobs 20000 [--reps 3]
    uv run python -m bench.one_burst --kind sustained --queue nats --rate 2000 [--window 20]
    uv run python -m bench.one_burst --kind task --jobs 20000 --reps 3 --ceiling

With `--ceiling`, each repetition first bursts the bare-SQL fire loop (`raw_fire_loop`) with the
same N and prints tickwork's fires/s as a share of it: the same-run ratio to quote when a
change touches the fire path (run it on the old and the new commit, alternating). For
`--kind webhook` the ceiling is the bare loop with a bare HTTP POST per fire to a receiver.

It runs the same case as `python -m bench --only e2e` (fresh database, fresh api, scheduler and
worker processes) and prints one line per repetition plus the CPU split, without touching
docs/benchmarks.md or bench/results/. Use it to compare two commits back to back on the same
machine: one repetition of a full benchmark is too noisy for a 20 % difference.

On a server that keeps pg_stat_statements (`python -m bench.pg_statements -- <these
arguments>` starts one), a burst also prints PostgreSQL's execution time per fire for each
statement from the end of the jobs' creation to the end of the burst, the costliest first:
where the server's share of a fire goes. Execution time includes waits (row locks, WAL
flushes), so the column can add up to more than the server's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import secrets
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import e2e
from bench.cli import DEFAULT_PG_DSN
from bench.env import Env
from bench.pgutil import Admin, attribution_of

KINDS = ("webhook", "task", "sustained")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.one_burst", description=__doc__)
    parser.add_argument("--kind", choices=KINDS, default="webhook")
    parser.add_argument("--queue", choices=e2e.QUEUES, default="table")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--rate", type=int, default=1000, help="sustained: fires/s")
    parser.add_argument("--window", type=int, default=20, help="sustained: seconds measured")
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN)
    parser.add_argument("--json", action="store_true", help="print each case as JSON too")
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="bursts: before each repetition, burst the bare-SQL fire loop with the same N",
    )
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    admin = Admin(args.pg_dsn, secrets.token_hex(3))
    await admin.open()
    try:
        attribution = await attribution_of(admin)
        cfg = dataclasses.replace(
            e2e.E2EConfig(), burst_jobs=args.jobs, lead_s=8.0, window_s=args.window
        )
        label = "burst" if args.kind == "webhook" else "task burst"
        for _ in range(args.reps):
            with tempfile.TemporaryDirectory(prefix="tw-one-burst-") as tmp:
                env = Env(run_id=admin.prefix, quick=False, tmp=Path(tmp), admin=admin,
                          attribution=attribution)  # fmt: skip
                ceiling = await _ceiling(args, env)
                result = await e2e._guarded(_case(args, env, cfg), args.queue)
            if ceiling is not None:
                print(_ratio_line(result, ceiling), flush=True)
            if args.kind == "sustained":
                result.setdefault("rate", args.rate)
                print(e2e._step_line(result), flush=True)
            else:
                print(e2e._burst_line(result, label), flush=True)
            print(f"    cpu cores: {_cpu_line(result)}", flush=True)
            for spent in result.get("pg_time_by_statement", []):
                print(f"    pg time by statement: {spent['us_per_fire']:6.1f} µs/fire,"
                      f" {spent['calls']} calls:"
                      f" {spent['statement']}", flush=True)  # fmt: skip
            if args.kind == "sustained":
                print(f"    p99 ms by tenth: {result.get('p99_by_tenth_ms')}", flush=True)
            else:
                print(f"    fires/s by tenth: {result.get('drain_deciles_per_s')}", flush=True)
            if args.json:
                print(json.dumps(result, default=str), flush=True)
    finally:
        await admin.close()


def _case(args: argparse.Namespace, env: Env, cfg: e2e.E2EConfig) -> Any:
    if args.kind == "sustained":
        return e2e.sustained_step(env, cfg, args.queue, args.rate)
    if args.kind == "task":
        return e2e.task_burst_case(env, cfg, args.queue)
    return e2e.burst_case(env, cfg, args.queue)


async def _ceiling(args: argparse.Namespace, env: Env) -> dict[str, Any] | None:
    if not args.ceiling or args.kind == "sustained":
        return None
    cfg = dataclasses.replace(e2e.E2EConfig(), burst_jobs=args.jobs)
    if args.kind == "webhook":  # the bare loop with a bare HTTP POST per fire (issue 22)
        hooks: dict[str, Any] = (await e2e._ceiling(env, cfg, webhook=True))["webhook_ceiling"]
        return hooks
    found: dict[str, Any] = (await e2e._ceiling(env, cfg))["ceiling"]
    return found


def _ratio_line(result: dict[str, Any], ceiling: dict[str, Any]) -> str:
    mine, bare = result.get("fires_per_s"), ceiling.get("fires_per_s")
    if not mine or not bare:
        return "  ratio: n/a (a case failed)"
    p99, bare_p99 = result.get("lateness_ms", {}).get("p99"), ceiling["lateness_ms"].get("p99")
    return (
        f"  ratio: tickwork {mine} / {_ceiling_name(ceiling)} {bare} fires/s ="
        f" {100 * mine / bare:.1f} %"
        f" (p99 lateness {p99} against {bare_p99} ms)"
    )


def _ceiling_name(ceiling: dict[str, Any]) -> str:
    return "bare SQL + HTTP" if ceiling.get("webhook") else "bare SQL"


def _cpu_line(result: dict[str, Any]) -> str:
    cpu = result.get("cpu", {})
    named = cpu.get("cores", {})
    return ", ".join(f"{k} {v}" for k, v in sorted(named.items()) if isinstance(v, int | float))


def main() -> None:
    try:
        asyncio.run(run(parse(sys.argv[1:])))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
