"""The global fire ceiling across processes on PostgreSQL (issue 21, ADR 0025): two
partitioned schedulers and a worker, a ceiling of 200 fires/s and 3,000 one-shots due at the
same instant. Over 10 s the cluster fires within 5 % of 200/s (runs counted by their claim
instant in the store), and every occurrence fires exactly once, none folded as a misfire."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx
import pytest

from tickwork.clock import utc_iso

from ..support.proc import UpProcess
from ..support.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CEILING = 200
JOBS = 3000
PARTITIONS = 64
TIMEOUT_S = 90.0


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pg_dsn)
    yield conn
    await conn.close()


async def start(stack: AsyncExitStack, dsn: str, command: str, **env: str) -> UpProcess:
    proc = await UpProcess(dsn, command=command, extra_env=dict(env)).start()
    stack.push_async_callback(proc.stop)
    return proc


def node_id(proc: UpProcess) -> str:
    assert proc.proc is not None
    return f"{socket.gethostname()}:{proc.proc.pid}"


async def until_shared(db: asyncpg.Connection, owners: list[UpProcess]) -> None:
    """Every partition held, by these schedulers, evenly: each paces at half the ceiling."""
    ids = {node_id(p) for p in owners}
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            rows = await db.fetch(
                "SELECT owner, count(*) AS n FROM tw_partition_leases WHERE owner IS NOT NULL"
                " AND expires_us > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
                " GROUP BY owner"
            )
            held = {r["owner"]: r["n"] for r in rows}
            if set(held) == ids and set(held.values()) == {PARTITIONS // len(ids)}:
                return
            await asyncio.sleep(0.1)  # polling the leases other processes write


async def create_one_shots(
    api: UpProcess, receiver: Receiver, at: datetime, count: int = JOBS, path: str = "/c"
) -> None:
    """`count` one-shots at `at` posting to `path`, created over a few concurrent connections."""
    key = api.api_key()
    headers = {"Authorization": f"Bearer {key}"}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for n in range(count):
        queue.put_nowait(n)

    async def creator(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            n = queue.get_nowait()
            body = {
                "name": f"{path.strip('/')}{n}",
                "schedule": {"at": utc_iso(at)},
                "target": {"type": "webhook", "url": receiver.url(path), "method": "POST"},
            }
            answer = await client.post("/v1/jobs", json=body)
            assert answer.status_code == 201, answer.text

    async with httpx.AsyncClient(base_url=api.api, timeout=30, headers=headers) as client:
        await asyncio.gather(*(creator(client) for _ in range(12)))


async def creation_lead(api: UpProcess, receiver: Receiver) -> timedelta:
    """How far ahead to put the instant so that all JOBS exist before it: 25 s, or more on a
    machine slow enough that creating them over HTTP takes longer (timed on 100 probes due in
    an hour, which never fire during the test)."""
    started = asyncio.get_running_loop().time()
    await create_one_shots(
        api, receiver, datetime.now(UTC) + timedelta(hours=1), count=100, path="/probe"
    )
    per_job_s = (asyncio.get_running_loop().time() - started) / 100
    return timedelta(seconds=max(25.0, 1.5 * per_job_s * JOBS + 5.0))


# Room for a slow machine: creating 3,000 jobs over HTTP took 35 s on one (the lead grows).
@pytest.mark.timeout(300)
async def test_two_schedulers_fire_3000_due_jobs_at_the_ceiling_within_5_percent_over_10_s(
    pg_dsn: str, receiver: Receiver, db: asyncpg.Connection
) -> None:
    ceiling = {"TICKWORK_FIRE_CEILING": str(CEILING)}
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api", TICKWORK_API_KEY_RATE="0")
        schedulers = [await start(stack, pg_dsn, "scheduler", **ceiling) for _ in range(2)]
        await start(stack, pg_dsn, "worker")
        await until_shared(db, schedulers)
        at = datetime.now(UTC) + await creation_lead(api, receiver)
        await create_one_shots(api, receiver, at)
        assert datetime.now(UTC) < at - timedelta(seconds=1), "creating the jobs took too long"
        await receiver.wait_for("/c", JOBS, timeout_s=TIMEOUT_S)
        takeovers = 0.0
        for proc in schedulers:  # the ceiling's metrics, from each scheduler
            text = (await proc.call("GET", "/metrics")).text
            assert f"tickwork_fire_ceiling_share {CEILING / 2}" in text
            takeovers += sum(
                float(line.split()[1])
                for line in text.splitlines()
                if line.startswith("tickwork_takeover_fires_total ")
            )

    runs = await db.fetch(
        "SELECT job_id, key, created_us, scheduled_us, coalesced, throttled_ms FROM tw_runs"
        " ORDER BY created_us"
    )
    # Every occurrence fired once: one run per job, one delivery per key; none folded.
    assert len(runs) == JOBS
    assert len({r["job_id"] for r in runs}) == JOBS
    assert {r["coalesced"] for r in runs} == {0}
    deliveries = Counter(d.key for d in receiver.for_path("/c"))
    assert len(deliveries) == JOBS
    assert max(deliveries.values()) == 1
    assert (
        await db.fetchval(
            "SELECT count(*) FROM tw_jobs WHERE state <> 'completed' AND name NOT LIKE 'probe%'"
        )
        == 0
    )
    # The pace: claims over the 10 s from the first one, within 5 % of the ceiling.
    first = runs[0]["created_us"]
    in_window = sum(first <= r["created_us"] < first + 10_000_000 for r in runs)
    assert abs(in_window - 10 * CEILING) <= 0.05 * 10 * CEILING, in_window
    # It took the ceiling's time: 3,000 at 200/s is about 15 s, not a burst.
    took_s = (runs[-1]["created_us"] - first) / 1e6
    assert 14.0 <= took_s <= 16.5, took_s
    # The lateness is recorded as throttling on the runs claimed past their misfire grace.
    late = [r for r in runs if r["created_us"] - r["scheduled_us"] > 1_000_000]
    assert len(late) > JOBS * 0.8
    unmarked = [(r["created_us"] - first) / 1e6 for r in late if r["throttled_ms"] is None]
    assert unmarked == [], (takeovers, len(unmarked), unmarked[:20])
