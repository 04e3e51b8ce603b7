"""The partition keeper against the memory store, on a manual clock (the store's clock too)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.partitions import NodeIdentity
from tickwork.errors import InvalidInput
from tickwork.scheduler.partitions import KeeperConfig, PartitionKeeper
from tickwork.store.memory import MemoryStore

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TTL_MS = 3_000
P = 12


def keeper(store: MemoryStore, clock: ManualClock, name: str, **config: object) -> PartitionKeeper:
    identity = NodeIdentity(host="h", pid=1, version="t", started_at=T0)
    cfg = KeeperConfig(node_id=name, lease_ttl_ms=TTL_MS, **config)  # type: ignore[arg-type]
    return PartitionKeeper(store, clock, cfg, identity)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def store(clock: ManualClock) -> MemoryStore:
    return MemoryStore(clock=clock, partitions=P)


async def test_a_lone_scheduler_takes_every_partition_at_epoch_one(
    store: MemoryStore, clock: ManualClock
) -> None:
    a = keeper(store, clock, "a")
    done = await a.run_once()
    assert done.acquired == set(range(P))
    assert a.held_now() == dict.fromkeys(range(P), 1)
    assert a.changed.is_set()
    assert a.not_held() == []


async def test_a_joiner_gets_its_share_without_flapping(
    store: MemoryStore, clock: ManualClock
) -> None:
    a, b = keeper(store, clock, "a"), keeper(store, clock, "b")
    await a.run_once()
    assert (await b.run_once()).held == {}  # all of them are still a's
    released = await a.run_once()  # a sees b and gives up half
    assert len(released.released) == P // 2
    taken = await b.run_once()
    assert taken.acquired == released.released
    assert all(epoch == 2 for epoch in taken.held.values())  # a new owner: a new epoch
    for _ in range(3):  # steady membership: nothing moves any more
        again_a, again_b = await a.run_once(), await b.run_once()
        assert not (again_a.acquired | again_a.released | again_b.acquired | again_b.released)
    assert set(a.held_now()) | set(b.held_now()) == set(range(P))
    assert not set(a.held_now()) & set(b.held_now())


async def test_an_unrenewed_lease_stops_counting_before_it_expires(
    store: MemoryStore, clock: ManualClock
) -> None:
    a = keeper(store, clock, "a")
    await a.run_once()
    clock.advance(timedelta(milliseconds=0.89 * TTL_MS))
    assert len(a.held_now()) == P
    clock.advance(timedelta(milliseconds=0.02 * TTL_MS))  # past 90 % of the TTL
    assert a.held_now() == {}  # a stops claiming; its leases have not expired yet
    b = keeper(store, clock, "b")
    assert (await b.run_once()).held == {}  # ... so nobody else may take them yet
    clock.advance(timedelta(milliseconds=0.1 * TTL_MS))  # now they have expired
    taken = await b.run_once()
    assert taken.held == dict.fromkeys(range(P), 2)


async def test_a_paused_owner_that_wakes_finds_its_leases_gone(
    store: MemoryStore, clock: ManualClock
) -> None:
    a, b = keeper(store, clock, "a"), keeper(store, clock, "b")
    await a.run_once()
    clock.advance(timedelta(milliseconds=2 * TTL_MS))  # a was stopped (SIGSTOP) meanwhile
    await b.run_once()
    back = await a.run_once()
    assert back.lost == set(range(P)) - set(back.held)
    assert set(a.held_now()) | set(b.held_now()) == set(range(P))
    assert not set(a.held_now()) & set(b.held_now())


async def test_leaving_hands_every_partition_over_at_once(
    store: MemoryStore, clock: ManualClock
) -> None:
    a, b = keeper(store, clock, "a"), keeper(store, clock, "b")
    cluster = store.watch("cluster")
    await a.run_once()
    await b.run_once()
    cluster.clear()
    await a.leave()
    assert cluster.is_set()  # the others are woken
    assert a.held_now() == {}
    assert (await b.run_once()).held.keys() == set(range(P))  # no TTL to wait out


async def test_a_second_scheduler_on_an_exclusive_store_is_refused(
    store: MemoryStore, clock: ManualClock
) -> None:
    a = keeper(store, clock, "a", exclusive=True)
    b = keeper(store, clock, "b", exclusive=True)
    await a.run_once()
    waiting = await b.run_once()  # a crashed scheduler stays listed a while: b waits
    assert waiting.held == {}
    clock.advance(timedelta(milliseconds=TTL_MS))
    await a.run_once()  # a still renews: it is alive
    assert len(a.held_now()) == P  # the holder keeps everything despite the newcomer
    clock.advance(timedelta(milliseconds=TTL_MS))
    await a.run_once()
    with pytest.raises(InvalidInput, match="several schedulers need PostgreSQL"):
        await b.run_once()


async def test_an_exclusive_scheduler_waits_out_a_crashed_one(
    store: MemoryStore, clock: ManualClock
) -> None:
    crashed = keeper(store, clock, "old", exclusive=True)
    await crashed.run_once()  # then it dies without leaving
    new = keeper(store, clock, "new", exclusive=True)
    assert (await new.run_once()).held == {}
    clock.advance(timedelta(milliseconds=TTL_MS + 1))  # its heartbeat and leases expire
    assert (await new.run_once()).held == dict.fromkeys(range(P), 2)
