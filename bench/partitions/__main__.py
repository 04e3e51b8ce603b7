"""`python -m bench.partitions CASE`: one partition benchmark (scan, takeover or scaling).

Each prints a plain-text table and appends its figures as JSON lines to
bench/results/partitions.jsonl. Throwaway databases are named tw_bench_<run id>_* and dropped
at the end; every process started is stopped by its own pid.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from bench.cli import DEFAULT_PG_DSN
from bench.partitions import scaling, scan, takeover
from bench.partitions.common import bench_env, racing_tree

CASES = ("scan", "takeover", "scaling")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.partitions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("case", choices=CASES)
    parser.add_argument("--quick", action="store_true", help="small sizes (each case < 2 min)")
    parser.add_argument("--reps", type=int, default=1, help="repetitions (default 1)")
    parser.add_argument(
        "--jobs",
        type=int,
        help="scan: due jobs in every table (6,000); takeover: every-second jobs (100, quick "
        "30); scaling: the burst's one-shots (25,000, quick 5,000; must divide 1,000,000)",
    )
    parser.add_argument(
        "--max-rows",
        type=int,
        help="scan: largest table (default 1,000,000, quick 100,000); 10000000 adds 10^7 rows "
        "(~4 min of seeding and ~4.5 GiB of disk)",
    )
    parser.add_argument(
        "--schedulers",
        default="1,2,3",
        help="scaling: the scheduler counts, comma-separated (default %(default)s)",
    )
    parser.add_argument(
        "--racing-tree",
        type=Path,
        help="scaling: also run the schedulers of this checkout (the pre-partition version, "
        "e.g. /work/base at 97e0900, after `uv sync` there)",
    )
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN, help="admin DSN (default: %(default)s)")
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    async with bench_env(args.pg_dsn, quick=args.quick) as env:
        if args.case == "scan":
            cfg = scan.ScanConfig.build(
                quick=args.quick, max_rows=args.max_rows, due=args.jobs, reps=args.reps
            )
            await scan.run(env, cfg)
        elif args.case == "takeover":
            await takeover.run(env, takeover.TakeoverConfig.build(args.quick, args.jobs, args.reps))
        else:
            trees = [racing_tree(args.racing_tree)] if args.racing_tree else []
            counts = tuple(int(n) for n in args.schedulers.split(","))
            cfg_s = scaling.ScalingConfig.build(args.quick, args.jobs, args.reps, counts)
            await scaling.run(env, cfg_s, racing=trees)


def main() -> None:
    try:
        asyncio.run(run(parse(sys.argv[1:])))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
