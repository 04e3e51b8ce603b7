"""The `tickwork_queue_depth` gauge: how many fires wait for a worker, sampled periodically.

What "waiting" means depends on the transport. An external queue reports messages published
and not yet acked (`Queue.depth`). With the table queue the runs table is the queue, so the
depth is the number of pending runs a worker could lease now (`ScheduleStore.leasable_runs`,
an index-only count). Sampling runs in every scheduler and worker process, so each one's
/metrics shows the depth of the queue it shares with the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tickwork import metrics
from tickwork.clock import Clock
from tickwork.queue.base import Queue
from tickwork.store.base import ScheduleStore

log = logging.getLogger("tickwork.queue_depth")

DepthSource = Callable[[], Awaitable[int]]


def depth_source(store: ScheduleStore, queue: Queue | None, clock: Clock) -> DepthSource:
    """The external queue's depth if there is one, else the store's leasable runs."""
    if queue is not None:
        return queue.depth

    async def leasable() -> int:
        return await store.leasable_runs(clock.now())

    return leasable


@dataclass(frozen=True, kw_only=True, slots=True)
class DepthGaugeConfig:
    interval_ms: int = 5_000

    def __post_init__(self) -> None:
        if self.interval_ms < 1:
            raise ValueError("interval_ms must be >= 1")


class DepthGauge:
    def __init__(self, source: DepthSource, config: DepthGaugeConfig) -> None:
        self._source = source
        self._config = config
        self.last: int | None = None  # the latest sample (a worker's heartbeat reports it)

    async def run_once(self) -> int:
        depth = await self._source()
        metrics.QUEUE_DEPTH.set(depth)
        self.last = depth
        return depth

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_once()
            except Exception:
                # A queue or store that is down is reported by the fire path; the gauge just
                # keeps its last value until the next sample succeeds.
                log.warning(
                    "queue depth unavailable", exc_info=True, extra={"action": "depth_failed"}
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._config.interval_ms / 1000)
