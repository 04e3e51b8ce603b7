"""A worker whose process is gone loses its leases at a live worker's second beat (ADR 0035),
on real PostgreSQL: the dead one's sessions are really closed, and the survivor's heartbeat
(maintenance/heartbeat.py) ends its leases, so the survivor leases those runs at once."""

from __future__ import annotations

from collections.abc import Awaitable

import pytest

from tests.contract.store_helpers import SEC, T0, hand_off, outcome
from tickwork.clock import ManualClock
from tickwork.domain.partitions import NodeIdentity
from tickwork.domain.runs import Fire
from tickwork.maintenance.heartbeat import GoneWatch, HeartbeatConfig, NodeHeartbeat
from tickwork.store.postgres import PostgresStore

from .test_owner_liveness import open_store, until_gone

pytestmark = pytest.mark.postgres

IDENTITY = NodeIdentity(host="h", pid=1, version="t", started_at=T0)


def beat_of(store: PostgresStore, node_id: str, clock: ManualClock) -> NodeHeartbeat:
    return NodeHeartbeat(
        store, IDENTITY, HeartbeatConfig(node_id=node_id, ttl_ms=60_000), clock=clock
    )


async def test_a_dead_workers_leases_end_at_the_survivors_second_beat(pg_dsn: str) -> None:
    stores: list[PostgresStore] = []
    try:
        await dead_worker_scenario(pg_dsn, stores)
    finally:
        for store in stores:
            await store.close()


async def dead_worker_scenario(pg_dsn: str, stores: list[PostgresStore]) -> None:
    clock = ManualClock(T0 + 2 * SEC)
    dead = await open_store(pg_dsn, stores, "w-dead", announce=False)
    survivor = await open_store(pg_dsn, stores, "w-live", announce=False)
    held, finished = await hand_off(dead, 2)
    leased = await dead.lease_runs(now=T0, owner="w-dead", lease_until=T0 + 60 * SEC, limit=10)
    assert {f.run_id for f in leased} == {held.run_id, finished.run_id}
    done = next(f for f in leased if f.run_id == finished.run_id)
    assert await dead.finish_runs([outcome(done)]) == 1
    await beat_of(dead, "w-dead", clock).run_once()  # announces its session's name

    survivor_beat = beat_of(survivor, "w-live", clock)
    await survivor_beat.run_once()  # w-dead is alive
    await dead.close()  # as a kill -9 would: its sessions close, nothing else happens
    stores.remove(dead)
    await until_gone(survivor, "w-dead")

    def lease() -> Awaitable[list[Fire]]:
        return survivor.lease_runs(
            now=clock.now(), owner="w-live", lease_until=T0 + 60 * SEC, limit=10
        )

    await survivor_beat.run_once()  # gone at one beat: its lease still holds
    assert await lease() == []
    await survivor_beat.run_once()  # gone at two beats in a row: its lease ends
    taken = await lease()
    [fire] = [f for f in leased if f.run_id == held.run_id]
    assert [(f.run_id, f.fence_token) for f in taken] == [(held.run_id, fire.fence_token + 1)]


def test_a_node_is_released_only_when_gone_at_two_beats_in_a_row() -> None:
    watch = GoneWatch()
    assert watch.observe(frozenset({"a"})) == frozenset()
    assert watch.observe(frozenset({"a", "b"})) == {"a"}
    assert watch.observe(frozenset({"b"})) == {"b"}
    assert watch.observe(frozenset()) == frozenset()
    assert watch.observe(frozenset({"b"})) == frozenset()  # back, then gone once: wait again
