"""The fire loop in bare SQL: the end-to-end ceiling, measured in the same run (ADR 0011).

    uv run python -m bench.raw_fire_loop --jobs 100000 [--reps 3]

The issue's end-to-end targets (10,000 fires/s with a no-op task, 5,000 with webhooks) are
absolute, but they were set against a bare-SQL model of the fire loop measured on this machine on
one day (a reference prototype: 29,947 fires/s for a burst of one-shots), and the
machine's speed moves by a factor of two and more between days. So the end-to-end benchmark
also runs this model, on the same server, in the same run, and reports tickwork against it.

The model does the least a durable fire loop can do, in one scheduler process and one worker
process, both plain asyncpg loops:

- scheduler: ONE statement per batch of 1,000 takes the due jobs (`FOR UPDATE SKIP LOCKED`,
  partial index on `next_run_us`), advances them (a one-shot is done, an interval re-arms in
  SQL) and inserts one queue row each; it polls every 100 ms while nothing is due and at once
  while batches come back full;
- worker: ONE transaction per batch of 500 deletes queue rows (`SKIP LOCKED`), runs a no-op for
  each (the instant is recorded), inserts the run rows (their primary key (job, fence) is the
  ledger: a repeat is dropped) and acknowledges on the jobs with the fence; it polls every
  50 ms while the queue is empty.

No leases, heartbeats, retries, outcomes per attempt, notifications, webhooks or process
framework: everything tickwork adds costs against this. The table holds 1,000,000 jobs, the
burst's N due at the same instant T and the rest later.

With `--webhook` (`burst_case(..., webhook=True)`), the ceiling for webhook bursts: the same
loop, and the worker's no-op is one bare HTTP/1.1 POST per fire to the benchmark's receiver
(`bench.receiver`, its own process, as in tickwork's webhook cases), over 32 keep-alive
connections (tickwork's default cap per origin), each request written as one prepared byte
string and its answer read up to the end of its headers. The instant recorded is when the
request is written.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from bench import procs
from bench.env import Env
from bench.meter import CpuMeter, wait_for_quiet
from bench.pgutil import Admin, attribution_of
from bench.stats import summary

TABLE_JOBS = 1_000_000
CLAIM_BATCH = 1000
DEQUEUE_BATCH = 500
SCHEDULER_IDLE_S = 0.1
WORKER_IDLE_S = 0.05
SEED_ESTIMATE_S = 15.0  # seeding 1,000,000 jobs and vacuuming: ~8 s here; T comes after
BURST_TIMEOUT_S = 300.0
HTTP_CONNECTIONS = 32  # tickwork's default cap of webhooks in flight to one origin

SCHEMA = """
CREATE TABLE raw_jobs (
    id BIGINT PRIMARY KEY,
    state TEXT NOT NULL,
    next_run_us BIGINT NOT NULL,
    every_ms BIGINT,
    fence BIGINT NOT NULL DEFAULT 0,
    target TEXT NOT NULL,
    acked_us BIGINT
);
CREATE TABLE raw_queue (
    id BIGSERIAL PRIMARY KEY,
    job_id BIGINT NOT NULL,
    fence BIGINT NOT NULL,
    scheduled_us BIGINT NOT NULL
);
CREATE TABLE raw_runs (
    job_id BIGINT NOT NULL,
    fence BIGINT NOT NULL,
    scheduled_us BIGINT NOT NULL,
    started_us BIGINT NOT NULL,
    finished_us BIGINT NOT NULL,
    PRIMARY KEY (job_id, fence)
);
"""
# Every `stride`-th id is a one-shot due at T ($1); the others run every minute, first between
# one minute and one day after T, so the due index holds the whole table as in production.
SEED = """
INSERT INTO raw_jobs (id, state, next_run_us, every_ms, target)
SELECT g, 'scheduled',
       CASE WHEN g % $2::bigint = 0 THEN $1::bigint
            ELSE $1::bigint + (60 + (g * 7919) % 86400) * 1000000 END,
       CASE WHEN g % $2::bigint = 0 THEN NULL ELSE 60000 END,
       'https://example.invalid/hook/' || g
FROM generate_series(1::bigint, $3::bigint) g
"""
DUE_INDEX = "CREATE INDEX raw_jobs_due ON raw_jobs (next_run_us) WHERE state = 'scheduled'"
CLAIM = """
WITH due AS (
    SELECT id, next_run_us FROM raw_jobs WHERE state = 'scheduled' AND next_run_us <= $1
    ORDER BY next_run_us LIMIT $2 FOR UPDATE SKIP LOCKED
),
fired AS (
    UPDATE raw_jobs j SET fence = j.fence + 1,
        state = CASE WHEN j.every_ms IS NULL THEN 'done' ELSE 'scheduled' END,
        next_run_us = j.next_run_us + coalesce(j.every_ms, 0) * 1000
    FROM due WHERE j.id = due.id
    RETURNING j.id, j.fence, due.next_run_us AS scheduled_us
),
queued AS (
    INSERT INTO raw_queue (job_id, fence, scheduled_us)
    SELECT id, fence, scheduled_us FROM fired RETURNING 1
)
SELECT count(*) FROM queued
"""
DEQUEUE = """
DELETE FROM raw_queue
WHERE id = ANY(ARRAY(SELECT id FROM raw_queue ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED))
RETURNING job_id, fence, scheduled_us
"""
RECORD = """
INSERT INTO raw_runs (job_id, fence, scheduled_us, started_us, finished_us)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
ON CONFLICT DO NOTHING
"""
ACK = """
UPDATE raw_jobs j SET acked_us = a.finished_us
FROM unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS a(id, fence, finished_us)
WHERE j.id = a.id AND j.fence = a.fence
"""


async def seed(dsn: str, *, due: int, t_us: int, total: int = TABLE_JOBS) -> None:
    """The schema and `total` jobs, `due` of them one-shots at `t_us`, vacuumed and analysed."""
    if due <= 0 or total % due:
        raise ValueError(f"due={due} must divide the table's {total} jobs")
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(SCHEMA)
        await conn.execute(SEED, t_us, total // due, total)
        await conn.execute(DUE_INDEX)
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


def _now_us() -> int:
    return time.time_ns() // 1000


async def _connect(dsn: str) -> asyncpg.Connection:
    # Custom plans, like tickwork's store: a generic plan made on an empty queue stays slow.
    return await asyncpg.connect(dsn, server_settings={"plan_cache_mode": "force_custom_plan"})


async def scheduler(dsn: str, *, jobs: int, start_s: float, deadline_s: float) -> dict[str, Any]:
    conn = await _connect(dsn)
    print("ready", flush=True)
    await asyncio.sleep(max(0.0, start_s - time.time()))
    fired = statements = 0
    try:
        while fired < jobs and time.time() < deadline_s:
            got = int(await conn.fetchval(CLAIM, _now_us(), CLAIM_BATCH))
            statements += 1
            fired += got
            if got < CLAIM_BATCH:
                await asyncio.sleep(SCHEDULER_IDLE_S)
    finally:
        await conn.close()
    return {"fired": fired, "statements": statements}


async def worker(
    dsn: str, *, jobs: int, start_s: float, deadline_s: float, hook: str | None = None
) -> dict[str, Any]:
    conn = await _connect(dsn)
    http = None if hook is None else await BareHttp.open(hook, HTTP_CONNECTIONS)
    print("ready", flush=True)
    await asyncio.sleep(max(0.0, start_s - time.time()))
    done: list[tuple[int, int, float]] = []  # (job id, scheduled_us, instant of the no-op)
    transactions = 0
    try:
        while len(done) < jobs and time.time() < deadline_s:
            async with conn.transaction():
                batch = await conn.fetch(DEQUEUE, DEQUEUE_BATCH)
                if batch:
                    await _run_batch(conn, batch, done, http)
            transactions += 1
            if not batch:
                await asyncio.sleep(WORKER_IDLE_S)
    finally:
        await conn.close()
        if http is not None:
            http.close()
    return {"done": done, "transactions": transactions}


Ran = tuple[int, int, int]  # (begun us, instant us, finished us) of one fire's body


async def _run_batch(
    conn: asyncpg.Connection,
    batch: list[asyncpg.Record],
    done: list[tuple[int, int, float]],
    http: BareHttp | None = None,
) -> None:
    if http is None:
        ran = [_noop() for _ in batch]
    else:
        ran = await http.post_each([_request_body(row) for row in batch])
    ids, fences, scheduled, started, finished = [], [], [], [], []
    for row, (begun, instant_us, ended) in zip(batch, ran, strict=True):
        done.append((row["job_id"], row["scheduled_us"], instant_us / 1e6))
        ids.append(row["job_id"])
        fences.append(row["fence"])
        scheduled.append(row["scheduled_us"])
        started.append(begun)
        finished.append(ended)
    await conn.execute(RECORD, ids, fences, scheduled, started, finished)
    await conn.execute(ACK, ids, fences, finished)


def _noop() -> Ran:
    begun = _now_us()
    instant = _now_us()  # the no-op job body: it notes when it ran
    return begun, instant, _now_us()


def _request_body(row: asyncpg.Record) -> tuple[str, bytes]:
    key = f"{row['job_id']}-{row['fence']}"
    body = f'{{"job_id":{row["job_id"]},"scheduled_us":{row["scheduled_us"]}}}'
    return key, body.encode()


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class BareHttp:
    """The least a webhook POST can cost from Python: keep-alive HTTP/1.1 connections to one
    receiver, each request one prepared write, its answer read to the end of its headers (the
    receiver answers with an empty body). No TLS, redirects, retries, timeouts or pool logic:
    the webhook ceiling's request, against which tickwork's client is compared."""

    def __init__(self, head: bytes, streams: list[Stream]) -> None:
        self._head = head
        self._streams = streams

    @classmethod
    async def open(cls, url: str, connections: int) -> BareHttp:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        head = (
            f"POST {parts.path or '/'} HTTP/1.1\r\nhost: {host}:{port}\r\n"
            "content-type: application/json\r\n"
        ).encode()
        streams = [await asyncio.open_connection(host, port) for _ in range(connections)]
        return cls(head, streams)

    async def post_each(self, requests: list[tuple[str, bytes]]) -> list[Ran]:
        """POST each (key, body), as many at once as there are connections; in order."""
        ran: list[Ran] = [(0, 0, 0)] * len(requests)
        cursor = iter(range(len(requests)))

        async def lane(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            for i in cursor:  # the lanes share one iterator: each takes the next request
                key, body = requests[i]
                begun = _now_us()
                writer.write(
                    self._head
                    + f"idempotency-key: {key}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                head = await reader.readuntil(b"\r\n\r\n")
                if head[9:12] != b"200":
                    raise RuntimeError(f"receiver answered {head[:12]!r}")
                ran[i] = (begun, begun, _now_us())

        await asyncio.gather(*(lane(r, w) for r, w in self._streams))
        return ran

    def close(self) -> None:
        for _, writer in self._streams:
            writer.close()


def analyse(done: list[list[Any]], t_us: int, jobs: int) -> dict[str, Any]:
    """Time from T to the last no-op, fires/s, lateness (no-op instant - scheduled)."""
    t_s = t_us / 1e6
    ids = {d[0] for d in done}
    last = max((d[2] for d in done), default=math.nan)
    completion = last - t_s
    instants = sorted(d[2] for d in done)
    span = instants[-1] - instants[0] if len(instants) > 1 else 0.0
    return {
        "jobs": jobs,
        "missing": jobs - len(ids),
        "duplicates": len(done) - len(ids),
        "completion_s": round(completion, 3),
        "fires_per_s": round(len(ids) / completion, 1) if completion > 0 else math.nan,
        "drain_per_s": round((len(instants) - 1) / span, 1) if span > 0 else math.nan,
        "lateness_ms": summary([(d[2] - d[1] / 1e6) * 1000 for d in done]),
    }


async def burst_case(
    env: Env, jobs: int, *, lead_s: float = 4.0, webhook: bool = False
) -> dict[str, Any]:
    """One burst of the model on a fresh database of the run: N one-shots due at T (with
    `webhook`, each fire a bare HTTP POST to a receiver process of its own)."""
    quiet = await asyncio.to_thread(wait_for_quiet, env.attribution, max_wait_s=10.0)
    db = await env.admin.create("raw_burst")
    dsn = env.admin.dsn(db)
    receiver: procs.Child | None = None
    try:
        t_us = math.ceil(time.time() + SEED_ESTIMATE_S + lead_s) * 1_000_000
        await seed(dsn, due=jobs, t_us=t_us)
        start_s = t_us / 1e6 - lead_s  # both start polling well before T, as tickwork does
        deadline_s = t_us / 1e6 + BURST_TIMEOUT_S
        hook: list[str] = []
        if webhook:
            receiver, line = await procs.start(
                "raw-receiver",
                [sys.executable, "-m", "bench.receiver",
                 "--out", str(env.tmp / "raw-burst-receiver.json")],
                ready="ready",
                log_path=env.tmp / "raw-burst-receiver.log",
            )  # fmt: skip
            env.attribution.named[receiver.pid] = "receiver"
            hook = ["--hook", f"http://127.0.0.1:{line.split()[-1]}/hook"]
        outs = {role: env.tmp / f"raw-burst-{role}.json" for role in ("scheduler", "worker")}
        children: list[procs.Child] = []
        try:  # a role that fails to start must not leave the other one running
            for role, out in outs.items():
                child, _ = await procs.start(
                    f"raw-{role}",
                    [sys.executable, "-m", "bench.raw_fire_loop", "role", role, "--dsn", dsn,
                     "--jobs", str(jobs), "--start", str(start_s), "--deadline",
                     str(deadline_s), "--out", str(out), *(hook if role == "worker" else [])],
                    ready="ready",
                    log_path=env.tmp / f"raw-burst-{role}.log",
                )  # fmt: skip
                children.append(child)
                env.attribution.named[child.pid] = role
            ready_before_t = round(t_us / 1e6 - time.time(), 2)
            await asyncio.sleep(max(0.0, t_us / 1e6 - time.time()))
            with CpuMeter(env.attribution) as meter:
                await asyncio.wait_for(
                    asyncio.gather(*(c.proc.wait() for c in children)), BURST_TIMEOUT_S + 30
                )
        finally:
            for child in children:
                await child.stop()
        found: dict[str, Any] = json.loads(outs["worker"].read_text())
    finally:
        if receiver is not None:
            await receiver.stop()
        await env.admin.drop(db)
    result = analyse(found["done"], t_us, jobs)
    return result | {"ready_before_t_s": ready_before_t, "foreign_before": quiet,
                     "cpu": meter.report(), "webhook": webhook}  # fmt: skip


def summary_line(found: dict[str, Any]) -> str:
    if "error" in found:
        what = "bare-SQL + HTTP" if found.get("webhook") else "bare-SQL"
        return f"  {what} burst FAILED {found['error']}"
    lat, cpu = found["lateness_ms"], found["cpu"]
    name = "bare-SQL + HTTP burst" if found.get("webhook") else "bare-SQL burst"
    return (
        f"  {name}: {found['jobs']} jobs in {found['completion_s']} s = "
        f"{found['fires_per_s']} fires/s (first to last {found['drain_per_s']}/s), "
        f"p50 {lat.get('p50')} p99 {lat.get('p99')} ms, missing {found['missing']} "
        f"dup {found['duplicates']}, cores {cpu['cores']}, noise {cpu['foreign_cores']}"
    )


async def _standalone(pg_dsn: str, jobs: int, reps: int, webhook: bool) -> None:
    admin = Admin(pg_dsn, secrets.token_hex(3))
    await admin.open()
    try:
        attribution = await attribution_of(admin)
        for _ in range(reps):
            with tempfile.TemporaryDirectory(prefix="tw-raw-burst-") as tmp:
                env = Env(run_id=admin.prefix, quick=False, tmp=Path(tmp), admin=admin,
                          attribution=attribution)  # fmt: skip
                found = await burst_case(env, jobs, webhook=webhook)
            print(summary_line(found), flush=True)
    finally:
        await admin.close()


def _role_main(args: argparse.Namespace) -> None:
    bounds = {"jobs": args.jobs, "start_s": args.start, "deadline_s": args.deadline}
    if args.role == "scheduler":
        found = asyncio.run(scheduler(args.dsn, **bounds))
    else:
        found = asyncio.run(worker(args.dsn, **bounds, hook=args.hook))
    Path(args.out).write_text(json.dumps(found))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    role = sub.add_parser("role", help="one process of a case (started by the driver)")
    role.add_argument("role", choices=("scheduler", "worker"))
    role.add_argument("--dsn", required=True)
    role.add_argument("--jobs", type=int, required=True)
    role.add_argument("--start", type=float, required=True, help="epoch s to begin polling")
    role.add_argument("--deadline", type=float, required=True, help="epoch s to give up")
    role.add_argument("--out", required=True)
    role.add_argument("--hook", help="worker: POST each fire to this URL (the webhook model)")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--webhook", action="store_true", help="each fire a bare HTTP POST")
    parser.add_argument("--pg-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)
    if args.command == "role":
        _role_main(args)
        return
    try:
        asyncio.run(_standalone(args.pg_dsn, args.jobs, args.reps, args.webhook))
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
