"""Partitioned schedulers as real processes on PostgreSQL (ADR 0015): crashes, a frozen
owner, a rolling restart and rebalancing, with every occurrence delivered once and on time."""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import timedelta

import asyncpg
import pytest

from ..support.proc import UpProcess
from ..support.receiver import Delivery, Receiver

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

JOBS = 30
PARTITIONS = 64
TIMEOUT_S = 60.0


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


@pytest.fixture
async def db(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """The test's own connection, to read the leases the schedulers hold."""
    conn = await asyncpg.connect(pg_dsn)
    yield conn
    await conn.close()


async def start(stack: AsyncExitStack, dsn: str, command: str, **env: str) -> UpProcess:
    proc = await UpProcess(dsn, command=command, extra_env=dict(env)).start()
    stack.push_async_callback(proc.stop)
    return proc


def node_id(proc: UpProcess) -> str:
    assert proc.proc is not None
    return f"{_hostname()}:{proc.proc.pid}"


def _hostname() -> str:
    import socket

    return socket.gethostname()


async def holdings(db: asyncpg.Connection) -> dict[str, set[int]]:
    """Who holds which partition now, by the database's clock."""
    rows = await db.fetch(
        "SELECT partition, owner FROM tw_partition_leases WHERE owner IS NOT NULL"
        " AND expires_us > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"
    )
    held: dict[str, set[int]] = {}
    for row in rows:
        held.setdefault(row["owner"], set()).add(row["partition"])
    return held


async def until_held(
    db: asyncpg.Connection, check: Callable[[dict[str, set[int]]], bool], what: str
) -> dict[str, set[int]]:
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            held = await holdings(db)
            if check(held):
                return held
            await asyncio.sleep(0.1)  # polling the leases other processes write


def spread_over(owners: list[UpProcess]) -> Callable[[dict[str, set[int]]], bool]:
    """Every partition held, by exactly these schedulers, evenly (within one)."""
    ids = {node_id(p) for p in owners}

    def check(held: dict[str, set[int]]) -> bool:
        sizes = [len(held.get(i, ())) for i in ids]
        return set(held) == ids and sum(sizes) == PARTITIONS and max(sizes) - min(sizes) <= 1

    return check


async def every_second_jobs(api: UpProcess, receiver: Receiver) -> list[str]:
    paths = []
    for n in range(JOBS):
        body = {
            "name": f"j{n}",
            # The grace matches the lateness this test allows a takeover (2 s): an occurrence
            # taken over later than that is coalesced and shows as a gap.
            "schedule": {"every": "PT1S", "misfire_grace": "PT2S"},
            "target": {"type": "webhook", "url": receiver.url(f"/j{n}"), "method": "POST"},
        }
        assert (await api.call("POST", "/v1/jobs", json=body)).status_code == 201
        paths.append(f"/j{n}")
    return paths


async def more_deliveries(receiver: Receiver, paths: list[str], each: int) -> None:
    """Wait until every job has `each` more deliveries than now."""
    targets = {path: len(receiver.for_path(path)) + each for path in paths}
    for path, count in targets.items():
        await receiver.wait_for(path, count, timeout_s=TIMEOUT_S)


def assert_once_each_in_order(
    receiver: Receiver, paths: list[str], *, late_at_most: timedelta
) -> None:
    """Exactly once in effect, no occurrence skipped between a job's first and last, none
    later than `late_at_most` after its instant."""
    for path in paths:
        hits = receiver.for_path(path)
        counts = Counter(h.key for h in hits)
        assert max(counts.values()) == 1, (path, counts.most_common(2))
        instants = sorted(h.scheduled_for for h in hits)
        gaps = {b - a for a, b in itertools.pairwise(instants)}
        assert gaps <= {timedelta(seconds=1)}, (path, sorted(gaps))
        late = max(_lateness(h) for h in hits)
        assert late <= late_at_most, (path, late)


def _lateness(hit: Delivery) -> timedelta:
    return hit.arrived_at - hit.scheduled_for


async def test_killed_schedulers_lose_and_double_nothing_and_their_jobs_wait_under_2_s(
    pg_dsn: str, receiver: Receiver, db: asyncpg.Connection
) -> None:
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api")
        schedulers = [await start(stack, pg_dsn, "scheduler") for _ in range(3)]
        for _ in range(2):
            await start(stack, pg_dsn, "worker")
        await until_held(db, spread_over(schedulers), "three schedulers share the partitions")
        paths = await every_second_jobs(api, receiver)
        await more_deliveries(receiver, paths, 2)
        for victim in schedulers[:2]:  # kill -9 one, then another
            await victim.stop(signal.SIGKILL)
            await more_deliveries(receiver, paths, 3)
        survivor = schedulers[2]
        await until_held(db, spread_over([survivor]), "the survivor holds every partition")
        newcomer = await start(stack, pg_dsn, "scheduler")
        await until_held(db, spread_over([survivor, newcomer]), "the newcomer takes its share")
        await more_deliveries(receiver, paths, 2)
    assert_once_each_in_order(receiver, paths, late_at_most=timedelta(seconds=2))


async def test_a_frozen_owner_is_refused_every_claim_under_its_old_epochs(
    pg_dsn: str, receiver: Receiver, db: asyncpg.Connection
) -> None:
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api")
        # The zombie keeps believing in the partitions and epochs it held first, whatever
        # happens: after a stop past its lease only the store's epoch check can stop it.
        zombie = await start(stack, pg_dsn, "scheduler", TICKWORK_FAULT="stale_partition_view")
        other = await start(stack, pg_dsn, "scheduler")
        await start(stack, pg_dsn, "worker")
        await until_held(db, spread_over([zombie, other]), "two schedulers share the partitions")
        paths = await every_second_jobs(api, receiver)
        await more_deliveries(receiver, paths, 2)
        assert zombie.proc is not None
        zombie.proc.send_signal(signal.SIGSTOP)
        await until_held(db, spread_over([other]), "the other took every partition over")
        zombie.proc.send_signal(signal.SIGCONT)
        await until_refused(zombie)  # it tried, under its old epochs
        await more_deliveries(receiver, paths, 3)
    assert_once_each_in_order(receiver, paths, late_at_most=timedelta(seconds=3))


async def until_refused(proc: UpProcess) -> None:
    """Wait until the process's store refused a claim (its own metrics, read by polling)."""
    async with asyncio.timeout(TIMEOUT_S):
        while True:
            if await refusals(proc) > 0:
                return
            await asyncio.sleep(0.1)


async def refusals(proc: UpProcess) -> float:
    text = (await proc.call("GET", "/metrics")).text
    for line in text.splitlines():
        if line.startswith("tickwork_stale_epoch_refusals_total "):
            return float(line.split()[1])
    return 0.0


async def test_a_rolling_restart_under_load_hands_over_without_late_fires(
    pg_dsn: str, receiver: Receiver, db: asyncpg.Connection
) -> None:
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api")
        schedulers = [await start(stack, pg_dsn, "scheduler") for _ in range(3)]
        await start(stack, pg_dsn, "worker")
        await until_held(db, spread_over(schedulers), "three schedulers share the partitions")
        paths = await every_second_jobs(api, receiver)
        await more_deliveries(receiver, paths, 2)
        for n in range(3):  # SIGTERM each in turn; a replacement joins
            old = schedulers.pop(0)
            await old.stop(signal.SIGTERM)
            schedulers.append(await start(stack, pg_dsn, "scheduler"))
            await until_held(db, spread_over(schedulers), f"restart {n + 1} rebalanced")
            await more_deliveries(receiver, paths, 2)
    # A SIGTERM hands the partitions over at once: no takeover grace to wait out.
    assert_once_each_in_order(receiver, paths, late_at_most=timedelta(milliseconds=900))


async def test_partitions_rebalance_evenly_as_schedulers_come_and_go(
    pg_dsn: str, db: asyncpg.Connection
) -> None:
    async with AsyncExitStack() as stack:
        first = await start(stack, pg_dsn, "scheduler")
        await until_held(db, spread_over([first]), "one scheduler holds every partition")
        second = await start(stack, pg_dsn, "scheduler")
        third = await start(stack, pg_dsn, "scheduler")
        held = await until_held(db, spread_over([first, second, third]), "1 -> 3")
        assert sorted(len(p) for p in held.values()) == [21, 21, 22]
        await third.stop(signal.SIGTERM)
        held = await until_held(db, spread_over([first, second]), "3 -> 2")
        assert sorted(len(p) for p in held.values()) == [32, 32]
        epochs = await db.fetch("SELECT partition, epoch FROM tw_partition_leases")
        assert all(r["epoch"] >= 1 for r in epochs)  # every partition was taken at least once
