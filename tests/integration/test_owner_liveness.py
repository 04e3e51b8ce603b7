"""A scheduler whose process is gone is known at once (ADR 0032): every tickwork process names
its PostgreSQL sessions after its node id, and a takeover that finds no session of a
partition's owner claims that owner's overdue work without first watching it stall."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from tickwork.clock import SystemClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.partitions import NodeIdentity
from tickwork.scheduler.partitions import KeeperConfig, PartitionKeeper
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.base import NodeAnnouncement
from tickwork.store.postgres import PostgresStore
from tickwork.store.postgres.connect import session_name

pytestmark = pytest.mark.postgres

WAIT_S = 10.0
MINUTE_MS = 60_000


@pytest.fixture
async def stores(pg_dsn: str) -> AsyncIterator[list[PostgresStore]]:
    """Stores the test opens (append to the list); each is closed at the end."""
    opened: list[PostgresStore] = []
    try:
        yield opened
    finally:
        for store in opened:
            await store.close()


async def open_store(
    dsn: str, opened: list[PostgresStore], node_id: str | None, *, announce: bool = True
) -> PostgresStore:
    """An open store of a process `node_id`, announced in tw_nodes as a scheduler (as its
    partition keeper does at start)."""
    store = PostgresStore(dsn, pool_size=2, node_id=node_id)
    await store.open()
    opened.append(store)
    if announce and node_id is not None:
        announced = NodeAnnouncement(
            id=node_id, role="scheduler", host="h", pid=1, version="t",
            started_at=datetime.now(UTC), info={},
        )  # fmt: skip
        await store.heartbeat_node(announced, ttl_ms=MINUTE_MS)
    return store


async def until_gone(observer: PostgresStore, node_id: str) -> None:
    """A closed client's server processes exit a moment after it: poll the server's own view
    (pg_stat_activity), as there is no event to await."""
    async with asyncio.timeout(WAIT_S):
        while True:
            if await observer.gone_nodes([node_id]):
                return
            await asyncio.sleep(0.01)


def test_session_names_are_cut_to_what_postgresql_keeps() -> None:
    assert session_name("host-1:42") == "tickwork host-1:42"
    assert len(session_name("x" * 100).encode()) == 63
    cut = session_name("é" * 40)  # two bytes each: the last whole one is kept, not half of it
    assert cut == "tickwork " + "é" * 27


async def test_a_node_is_gone_once_the_sessions_it_announced_are_closed(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    long_id = "node-" + "x" * 80  # longer than an application_name keeps
    doomed = await open_store(pg_dsn, stores, "sched-a")
    await open_store(pg_dsn, stores, long_id)
    observer = await open_store(pg_dsn, stores, None)  # names nothing, and still sees
    labelled = await open_store(f"{pg_dsn}?application_name=mine", stores, "sched-u")
    asked = ["sched-a", long_id, "sched-u", "sched-z"]
    assert await observer.gone_nodes(asked) == frozenset()
    [node] = [n for n in await observer.list_nodes() if n.id == "sched-a"]
    assert node.info["session"] == "tickwork sched-a"  # what the heartbeat announced
    for store in (doomed, labelled):
        stores.remove(store)
        await store.close()
    await until_gone(observer, "sched-a")
    # sched-u's URL named its sessions itself: it announced none, so it is never judged
    # gone this way; sched-z never announced anything.
    assert await observer.gone_nodes(asked) == {"sched-a"}


async def test_a_url_that_names_its_sessions_keeps_its_name(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    await open_store(f"{pg_dsn}?application_name=my-label", stores, "sched-a")
    await open_store(pg_dsn, stores, "sched-b")
    conn = await asyncpg.connect(pg_dsn)
    try:
        found = await conn.fetch(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    names = {r["application_name"] for r in found}
    assert {"my-label", "tickwork sched-b"} <= names
    assert "tickwork sched-a" not in names


def overdue_job(now: datetime) -> Job:
    created = now - timedelta(minutes=1)
    return Job(
        id=f"{7:032x}",
        name="overdue",
        schedule=Schedule(trigger=EveryTrigger(interval_ms=3_600_000, anchor=created)),
        target=WebhookTarget(url="http://127.0.0.1:9/"),
        state=JobState.SCHEDULED,
        next_run_at=now - timedelta(seconds=10),
        created_at=created,
        updated_at=created,
    )


async def test_the_work_of_an_owner_with_no_session_is_taken_over_as_it_comes_due(
    pg_dsn: str, stores: list[PostgresStore]
) -> None:
    clock = SystemClock()
    owner = await open_store(pg_dsn, stores, "sched-a")
    job = await owner.create_job(overdue_job(clock.now()))
    every = range(owner.partition_count())
    await owner.update_partition_leases(
        "sched-a", renew={}, release=(), acquire=every, ttl_ms=MINUTE_MS
    )
    rescuer_store = await open_store(pg_dsn, stores, "sched-b", announce=False)
    identity = NodeIdentity(host="h", pid=2, version="t", started_at=datetime.now(UTC))
    keeper = PartitionKeeper(rescuer_store, clock, KeeperConfig(node_id="sched-b"), identity)
    # A grace of a minute: the job, 10 s overdue, is far inside it. Only a gone owner's work
    # is taken before the grace (as it comes due), so only that path can claim it here.
    config = SchedulerConfig(node_id="sched-b", lookahead_ms=0, takeover_grace_ms=MINUTE_MS)
    rescuer = SchedulerService(rescuer_store, clock, config, dispatch=None, keeper=keeper)
    await keeper.run_once()  # every partition is sched-a's, live for a minute
    assert not keeper.held_now()

    # The owner lives: its work is its own until its heads stand still for the grace.
    assert (await rescuer.take_over()).claimed == 0
    # Its process goes (a kill closes its sessions as this close does).
    stores.remove(owner)
    await owner.close()
    await until_gone(rescuer_store, "sched-a")
    taken = await rescuer.take_over()
    assert [e.job_id for e in taken.handed_off] == [job.id]
