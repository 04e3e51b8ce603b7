"""The executor's heartbeat renews, in one batch, the leases it has held for a heartbeat or
more, and leaves the younger ones alone (worker/lease_timing.py): short fires cost no writes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.store.base import Extended
from tickwork.store.memory import MemoryStore
from tickwork.worker.executor import Executor, ExecutorConfig

from .test_executor_backlog import T0, HeldRunner, pending_runs

MS = timedelta(milliseconds=1)
TTL = 5_000 * MS  # the defaults
BEAT = 1_000 * MS


class CountingExtends(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[tuple[int, int]]] = []

    async def extend_leases(
        self, leases: Sequence[tuple[int, int]], *, lease_until: datetime
    ) -> Extended:
        self.calls.append(list(leases))
        return await super().extend_leases(leases, lease_until=lease_until)


async def test_a_heartbeat_renews_the_leases_a_heartbeat_old_and_leaves_young_ones() -> None:
    store, runner, clock = CountingExtends(), HeldRunner(), ManualClock(T0)
    await pending_runs(store, 2)
    executor = Executor(store, clock, runner, ExecutorConfig(node_id="w1"))
    [old] = await store.lease_runs(now=T0, owner="w1", lease_until=T0 + TTL, limit=1)
    clock.advance(800 * MS)
    [young] = await store.lease_runs(
        now=clock.now(), owner="w1", lease_until=clock.now() + TTL, limit=1
    )
    executor.submit([old, young])

    clock.advance(200 * MS)  # old: a heartbeat old; young: 200 ms
    assert await executor.heartbeat() == 1
    assert store.calls == [[(old.run_id, old.fence_token)]]
    assert await store.next_lease_at() == T0 + 800 * MS + TTL  # young's, untouched

    clock.advance(500 * MS)  # nothing is a heartbeat old: no write at all
    assert await executor.heartbeat() == 0
    assert len(store.calls) == 1

    clock.advance(500 * MS)  # both are: one batch
    assert await executor.heartbeat() == 2
    assert sorted(store.calls[-1]) == sorted(
        [(old.run_id, old.fence_token), (young.run_id, young.fence_token)]
    )
    assert await store.next_lease_at() == clock.now() + TTL
    runner.release.set()
    await executor.drain()


@pytest.mark.parametrize(("ttl_ms", "beat_ms"), [(4_000, 1_000), (5_000, 0), (1_000, 300)])
def test_a_lease_must_last_longer_than_four_heartbeats(ttl_ms: int, beat_ms: int) -> None:
    # Renewed once a heartbeat old (up to two heartbeats after its last renewal), a lease
    # must then outlive two missed heartbeats.
    with pytest.raises(ValueError, match="heartbeat"):
        ExecutorConfig(node_id="w1", lease_ttl_ms=ttl_ms, heartbeat_ms=beat_ms)


def test_the_default_lease_outlives_two_missed_heartbeats_with_a_second_to_spare() -> None:
    config = ExecutorConfig(node_id="w1")
    assert (config.lease_ttl_ms, config.heartbeat_ms) == (5_000, 1_000)
    ExecutorConfig(node_id="w1", lease_ttl_ms=4_001, heartbeat_ms=1_000)
