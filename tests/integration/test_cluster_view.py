"""The cluster view: the pure assembly, GET /v1/cluster, and `tickwork cluster`."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import uvicorn

from tickwork.api.app import create_app
from tickwork.cli import run
from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.partitions import Node, PartitionLease, partition_of
from tickwork.services.cluster import assemble
from tickwork.settings import Settings
from tickwork.store.base import NodeAnnouncement
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

NOW = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)
SEC = timedelta(seconds=1)


def node(name: str, role: str, **info: object) -> Node:
    return Node(
        id=name,
        role=role,
        host="h",
        pid=1,
        version="0.1",
        started_at=NOW - 60 * SEC,
        heartbeat_at=NOW - SEC,
        expires_at=NOW + 4 * SEC,
        info=dict(info),
    )


def lease(
    partition: int, owner: str | None, epoch: int, *, expires_in_s: float = 5
) -> PartitionLease:
    return PartitionLease(
        partition=partition,
        owner=owner,
        epoch=epoch,
        expires_at=NOW + expires_in_s * SEC,
        renewed_at=NOW - SEC,
    )


def test_the_view_says_who_holds_what_and_how_far_behind() -> None:
    view = assemble(
        now=NOW,
        partition_count=4,
        nodes=[
            node("s1", "scheduler", fires_last_minute=120),
            node("s2", "scheduler"),
            node("w1", "worker", queue="nats", in_flight=7, queue_depth=12),
            node("w2", "worker", queue="nats", in_flight=0, queue_depth=15),
        ],
        leases=[
            lease(0, "s1", 3),
            lease(1, "s1", 3),
            lease(2, "s2", 5, expires_in_s=-1),  # expired: nobody holds it
            lease(3, "s2", 4),
        ],
        leases_read_at=NOW,
        lags={2: NOW - 2.5 * SEC},
        table_depth=0,
        oldest_leasable=NOW - 0.75 * SEC,
    )
    [s1, s2] = view.schedulers
    assert (s1.partitions, s1.fires_last_minute) == ({0: 3, 1: 3}, 120)
    assert s2.partitions == {3: 4}
    assert [(w.id, w.queue, w.in_flight) for w in view.workers] == [
        ("w1", "nats", 7),
        ("w2", "nats", 0),
    ]
    [queue] = view.queues
    assert (queue.name, queue.depth, queue.oldest_waiting_s) == ("nats", 15, 0.75)
    assert [(p.partition, p.owner, p.lag_s) for p in view.partitions] == [
        (0, "s1", 0.0),
        (1, "s1", 0.0),
        (2, None, 2.5),
        (3, "s2", 0.0),
    ]
    assert (view.unowned, view.max_lag_s) == (1, 2.5)


def test_without_workers_the_table_queue_is_shown_from_the_store() -> None:
    view = assemble(
        now=NOW,
        partition_count=1,
        nodes=[],
        leases=[lease(0, None, 0)],
        leases_read_at=NOW,
        lags={},
        table_depth=4,
        oldest_leasable=None,
    )
    [queue] = view.queues
    assert (queue.name, queue.depth, queue.oldest_waiting_s) == ("table", 4, 0.0)


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, MemoryStore, ManualClock]]:
    clock = ManualClock(NOW)
    store = MemoryStore(clock=clock, partitions=8)
    asyncio.run(_populate(store, clock))
    monkeypatch.setenv("TICKWORK_API_KEY", asyncio.run(mint_key(store, clock=clock)))
    app = create_app(store=store, clock=clock, settings=Settings())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    http = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    for _ in range(200):
        try:
            httpx.get(url + "/healthz", timeout=1)
            break
        except httpx.TransportError:
            threading.Event().wait(0.02)  # uvicorn starting in its thread: nothing to await
    try:
        yield url, store, clock
    finally:
        http.should_exit = True
        thread.join(timeout=10)
        sock.close()


async def _populate(store: MemoryStore, clock: ManualClock) -> None:
    await store.open()
    for role, name in (("scheduler", "s1"), ("worker", "w1")):
        announced = NodeAnnouncement(
            id=name, role=role, host="h", pid=2, version="0.1", started_at=NOW, info={}
        )
        await store.heartbeat_node(announced, ttl_ms=60_000)
    await store.update_partition_leases("s1", renew={}, release=(), acquire=range(6), ttl_ms=60_000)
    n = next(n for n in range(1000) if partition_of(f"{n:032x}", 8) == 7)
    await store.create_job(
        Job(
            id=f"{n:032x}",
            name="late",
            schedule=Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=NOW)),
            target=WebhookTarget(url="http://127.0.0.1:9/"),
            state=JobState.SCHEDULED,
            next_run_at=NOW - 3 * SEC,
            created_at=NOW,
            updated_at=NOW,
        )
    )


def test_get_cluster_and_the_cli_show_the_same_cluster(
    served: tuple[str, MemoryStore, ManualClock], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _, _ = served
    key = os.environ["TICKWORK_API_KEY"]  # the CLI sends it too
    body = httpx.get(url + "/v1/cluster", headers={"Authorization": f"Bearer {key}"}).json()
    assert body["partition_count"] == 8
    [scheduler] = body["schedulers"]
    assert scheduler["id"] == "s1"
    assert scheduler["partitions"] == {str(p): 1 for p in range(6)}
    assert [w["id"] for w in body["workers"]] == ["w1"]
    assert body["unowned_partitions"] == 2
    assert body["max_partition_lag_s"] == 3.0
    assert [p["owner"] for p in body["partitions"]][6:] == [None, None]
    assert run(["cluster", "--api", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == body
    assert run(["cluster", "--api", url]) == 0
    table = capsys.readouterr().out
    assert "1 schedulers, 1 workers; 8 partitions, 2 unowned, max lag 3.000 s" in table
    assert (
        run(["cluster", "--api", url, "--watch", "--interval", "0.2", "--count", "2", "--json"])
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert all(json.loads(line)["partition_count"] == 8 for line in lines)
