"""What the partition cases share: the run's environment, a checkout to start processes from,
their /metrics, the partition leases, one-shot jobs seeded by COPY, and plain-text tables."""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from bench import claim_seed, machine, procs, results
from bench.env import Env
from bench.noop_task import NOOP_TASK
from bench.pgutil import Admin, attribution_of
from tickwork.domain.jobs import TaskTarget
from tickwork.domain.partitions import partition_of
from tickwork.store.sql.sealed import SealedColumns

RESULTS = "partitions"  # bench/results/partitions.jsonl
BASE_ENV = {"TICKWORK_LOG_LEVEL": "warning", "PYTHONUNBUFFERED": "1"}
# Metrics read from each scheduler (summed over label values): what the cases report.
METRICS = (
    "tickwork_fires_total",
    "tickwork_claim_conflicts_total",
    "tickwork_takeover_fires_total",
    "tickwork_stale_epoch_refusals_total",
    "tickwork_partitions_owned",
)


@contextlib.asynccontextmanager
async def bench_env(pg_dsn: str, *, quick: bool) -> AsyncIterator[Env]:
    """A run of its own: run id, temp dir, admin connection (drops the run's databases at the
    end, also on failure), the CPU attribution."""
    admin = Admin(pg_dsn, secrets.token_hex(3))
    await admin.open()
    try:
        attribution = await attribution_of(admin)
        with tempfile.TemporaryDirectory(prefix="tw-bench-partitions-") as tmp:
            yield Env(run_id=admin.prefix, quick=quick, tmp=Path(tmp), admin=admin,
                      attribution=attribution)  # fmt: skip
    finally:
        await admin.close()


def record(case: str, found: dict[str, Any]) -> None:
    """One JSON line in bench/results/partitions.jsonl, with the machine and the commit."""
    results.append(RESULTS, {"case": case, "at": time.time(), "machine": machine.facts(), **found})


# -- checkouts and processes ------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """A checkout whose `tickwork` processes a case starts: this one, or `--racing-tree`."""

    label: str
    path: Path

    @property
    def python(self) -> str:
        if self.path == machine.REPO:
            return sys.executable
        return str(self.path / ".venv" / "bin" / "python")

    @property
    def partitioned(self) -> bool:
        """Whether its schema has partitions (migration 0005, ADR 0015)."""
        versions = self.path / "src" / "tickwork" / "store" / "migrations" / "versions"
        return any(versions.glob("0005_*.py"))


THIS_TREE = Tree("partitioned", machine.REPO)


def racing_tree(path: Path) -> Tree:
    if not (path / ".venv" / "bin" / "python").exists():
        raise SystemExit(f"{path}: no .venv (run `uv sync` there first)")
    return Tree("racing", path.resolve())


async def migrate(tree: Tree, url: str) -> None:
    """`tickwork db upgrade` of that checkout on `url`."""
    proc = await asyncio.create_subprocess_exec(
        tree.python, "-m", "tickwork", "db", "upgrade", "--db", url, cwd=tree.path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"db upgrade failed: {out.decode(errors='replace')[-2000:]}")


@dataclass
class Role:
    """One `tickwork scheduler|worker` process of a case."""

    name: str  # also its node id
    child: procs.Child
    port: int


async def start_role(
    env: Env, tree: Tree, role: str, url: str, name: str, *, extra_env: dict[str, str] | None = None
) -> Role:
    argv = [tree.python, "-m", "tickwork", role, "--db", url, "--port", "0"]
    if role == "worker":
        argv += ["--import", "bench.noop_task"]
    child, line = await procs.start(
        name,
        argv,
        ready="listening",
        log_path=env.tmp / f"{name}.log",
        env=BASE_ENV | {"TICKWORK_NODE_ID": name} | (extra_env or {}),
        cwd=tree.path,
    )
    env.attribution.named[child.pid] = role
    return Role(name=name, child=child, port=_port(line))


def _port(line: str) -> int:
    """The port of "tickwork scheduler listening on http://127.0.0.1:PORT (...)"."""
    url = line.split("listening on ", 1)[1].split()[0]
    return int(url.rsplit(":", 1)[1].rstrip("/"))


async def stop_all(roles: Sequence[Role]) -> None:
    await asyncio.gather(*(r.child.stop(30.0) for r in roles), return_exceptions=True)


def errors_logged(roles: Sequence[Role]) -> dict[str, int]:
    """ERROR lines and tracebacks in each process's log (stderr)."""
    found = {}
    for r in roles:
        text = r.child.log_path.read_text(errors="replace").splitlines()
        found[r.name] = sum(("ERROR" in ln or "Traceback" in ln) for ln in text)
    return found


async def scrape(port: int) -> dict[str, float]:
    """The `METRICS` of one process's /metrics, each summed over its label values."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    return parse_metrics(text)


def parse_metrics(text: str) -> dict[str, float]:
    found = dict.fromkeys(METRICS, 0.0)
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            found[name] += float(line.rsplit(" ", 1)[1])
    return found


async def scrape_all(roles: Sequence[Role]) -> dict[str, dict[str, float]]:
    """{name: metrics} of the processes that answer (a killed one does not)."""
    got = await asyncio.gather(*(scrape(r.port) for r in roles), return_exceptions=True)
    return {r.name: m for r, m in zip(roles, got, strict=True) if isinstance(m, dict)}


def metric_delta(
    after: dict[str, dict[str, float]], before: dict[str, dict[str, float]], name: str
) -> float:
    """Increase of one counter summed over the processes read both times."""
    return sum(after[p][name] - before[p][name] for p in after if p in before)


# -- partition leases -------------------------------------------------------------------------


async def holdings(conn: asyncpg.Connection) -> dict[str, set[int]]:
    """Who holds which partition now, by the database's clock (expired leases: nobody)."""
    rows = await conn.fetch(
        "SELECT partition, owner FROM tw_partition_leases WHERE owner IS NOT NULL"
        " AND expires_us > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
    )
    held: dict[str, set[int]] = {}
    for row in rows:
        held.setdefault(row["owner"], set()).add(row["partition"])
    return held


def spread_over(held: dict[str, set[int]], owners: Collection[str], partitions: int) -> bool:
    """Every partition held, by exactly `owners`, evenly (within one)."""
    sizes = [len(held.get(o, ())) for o in owners]
    return set(held) == set(owners) and sum(sizes) == partitions and max(sizes) - min(sizes) <= 1


async def until_spread(
    conn: asyncpg.Connection, owners: Collection[str], partitions: int, *, timeout_s: float = 60.0
) -> float:
    """Poll the leases (every 50 ms) until `owners` share every partition; seconds waited."""
    started = time.monotonic()
    while True:
        if spread_over(await holdings(conn), owners, partitions):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise TimeoutError(f"partitions not spread over {sorted(owners)} in {timeout_s} s")
        await asyncio.sleep(0.05)


# -- seeding one-shot jobs --------------------------------------------------------------------

AT_COLUMNS = (
    "id", "tenant", "name", "state", "schedule_kind", "at_us", "misfire", "misfire_grace_ms",
    "target", "next_run_us", "fence_token", "created_us", "updated_us",
)  # fmt: skip
NOOP_TARGET = SealedColumns(None).write_target(TaskTarget(name=NOOP_TASK))


async def seed_at_jobs(url: str, jobs: int, t_us: int) -> float:
    """`jobs` one-shot no-op task jobs due at `t_us`, by COPY (no NOTIFY: the schedulers find
    them at their next idle wake-up, within max_idle_ms). Fills `partition` where the schema
    has it (the racing tree's has not). Returns the seconds it took."""
    started = time.monotonic()
    conn = await asyncpg.connect(url)
    try:
        has_partition = bool(
            await conn.fetchval(
                "SELECT count(*) FROM information_schema.columns"
                " WHERE table_name = 'tw_jobs' AND column_name = 'partition'"
            )
        )
        p = await claim_seed.partition_count(conn) if has_partition else 0
        now_us = time.time_ns() // 1000
        columns = AT_COLUMNS + (("partition",) if has_partition else ())

        def rows() -> Any:
            for g in range(jobs):
                jid = claim_seed.job_id(g)
                row = (jid, "default", f"burst-{g}", "scheduled", "at", t_us, "coalesce",
                       3_600_000, NOOP_TARGET, t_us, 0, now_us, now_us)  # fmt: skip
                yield (*row, partition_of(jid, p)) if has_partition else row

        await conn.copy_records_to_table("tw_jobs", records=rows(), columns=columns)
        await conn.execute("ANALYZE tw_jobs")
    finally:
        await conn.close()
    return round(time.monotonic() - started, 2)


# -- output -----------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, columns right-aligned but the first."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        first = values[0].ljust(widths[0])
        rest = [v.rjust(w) for v, w in zip(values[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest]).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in cells)])


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def noise_line(cpu: dict[str, Any]) -> str:
    return (
        f"noise: foreign {cpu.get('foreign_cores')} cores, other {cpu.get('other_cores')}, "
        f"steal {cpu.get('steal_cores')}, load {cpu.get('loadavg_1m_start')} "
        f"(top foreign: {', '.join(cpu.get('top_foreign', [])) or '-'})"
    )
