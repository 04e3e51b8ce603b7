"""PostgreSQL time per statement during one end-to-end case, on a private server.

    uv run python -m bench.pg_statements [--autovacuum off|default|fast] -- \\
        --kind sustained --queue nats --rate 3000 --window 20

Starts a throwaway PostgreSQL cluster with `pg_stat_statements` (autovacuum off like the
shared server here, at its defaults, or "fast": 1 s naptime and 1 % scale factors), runs
`bench.one_burst` with the given arguments against it, and prints the statements that took the
most server time: calls, total time, rows, time per row and buffer hits per row. Time per row
is the cost per fire for the fire path's batched statements (one row per fire). For profiling,
not a benchmark: nothing is written to docs/ or bench/results/.

That report covers the whole case, the jobs' creation included. For a burst, `one_burst`
itself also prints each statement's server time per fire from the end of the creation to the
end of the burst (`pg time by statement` lines): the fire path alone.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys

import asyncpg

from tickwork.testing import ThrowawayPostgres

AUTOVACUUM = {
    "off": {"autovacuum": "off"},
    "default": {"autovacuum": "on"},
    "fast": {
        "autovacuum": "on",
        "autovacuum_naptime": "1s",
        "autovacuum_vacuum_scale_factor": "0.01",
        "autovacuum_vacuum_insert_scale_factor": "0.01",
    },
}
TOP = """
SELECT calls, total_exec_time, rows, shared_blks_hit, query FROM pg_stat_statements
ORDER BY total_exec_time DESC LIMIT $1
"""


async def _enable(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE EXTENSION pg_stat_statements")
    finally:
        await conn.close()


async def _report(dsn: str, top: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(TOP, top)
    finally:
        await conn.close()
    print(f"{'calls':>8} {'total ms':>9} {'rows':>8} {'us/row':>7} {'hits/row':>8}  statement")
    for r in found:
        rows = max(1, r["rows"])
        text = " ".join(r["query"].split())[:100]
        print(
            f"{r['calls']:>8} {r['total_exec_time']:>9.0f} {r['rows']:>8} "
            f"{1000 * r['total_exec_time'] / rows:>7.1f} {r['shared_blks_hit'] / rows:>8.1f}  "
            f"{text}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--autovacuum", choices=sorted(AUTOVACUUM), default="off")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("one_burst", nargs=argparse.REMAINDER, help="-- then bench.one_burst args")
    args = parser.parse_args()
    passed = [a for a in args.one_burst if a != "--"]
    settings = {
        "shared_preload_libraries": "pg_stat_statements",
        "pg_stat_statements.track": "all",
        **AUTOVACUUM[args.autovacuum],
    }
    with ThrowawayPostgres(settings=settings) as pg:
        asyncio.run(_enable(pg.dsn()))
        command = [sys.executable, "-m", "bench.one_burst", *passed, "--pg-dsn", pg.dsn()]
        subprocess.run(command, check=False)
        asyncio.run(_report(pg.dsn(), args.top))


if __name__ == "__main__":
    main()
