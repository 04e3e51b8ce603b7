"""DepthGauge: the sampled `tickwork_queue_depth`, from an external queue or the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

from tests.contract.queue_fixtures import envelope
from tickwork.clock import ManualClock
from tickwork.maintenance.queue_depth import DepthGauge, DepthGaugeConfig, depth_source
from tickwork.queue.memory import MemoryQueue
from tickwork.store.memory import MemoryStore

from .test_queue_consumer import handed_off

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def gauge() -> float | None:
    return REGISTRY.get_sample_value("tickwork_queue_depth")


async def test_with_an_external_queue_the_gauge_follows_its_unacked_messages() -> None:
    store, queue = MemoryStore(), MemoryQueue(visibility_s=30)
    sampler = DepthGauge(depth_source(store, queue, ManualClock(T0)), DepthGaugeConfig())
    await queue.publish([envelope(n) for n in range(3)])
    assert await sampler.run_once() == 3
    assert gauge() == 3

    await queue.ack(await queue.fetch(3, timeout_s=0))
    assert await sampler.run_once() == 0
    assert gauge() == 0


async def test_with_the_table_queue_the_gauge_counts_runs_leasable_now() -> None:
    store, clock = MemoryStore(), ManualClock(T0 - timedelta(seconds=1))
    sampler = DepthGauge(depth_source(store, None, clock), DepthGaugeConfig())
    fires = await handed_off(store, 2)  # leasable from T0
    assert await sampler.run_once() == 0  # not due yet

    clock.set(T0)
    assert await sampler.run_once() == 2
    assert gauge() == 2

    await store.lease_fenced_runs(
        [(f.run_id, f.fence_token) for f in fires],
        owner="w",
        lease_until=T0 + timedelta(seconds=60),
        now=T0,
    )
    assert await sampler.run_once() == 0
