"""Feeding the executor from an external queue (NATS JetStream, Redis Streams).

A message names a run and the fence the scheduler gave it. The consumer leases that run in the
store with a compare-and-set on the fence (a duplicate or superseded message finds the fence
moved and is dropped), hands the fire to the executor and acks the message: from then on the
store's lease, not the queue, keeps the fire alive. A message lost by the queue is recovered by
the executor's backstop, which leases free runs straight from the store.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from tickwork import metrics
from tickwork.clock import Clock
from tickwork.queue.base import Queue
from tickwork.store.base import ScheduleStore
from tickwork.worker.executor import Executor

log = logging.getLogger("tickwork.consumer")


class QueueConsumer:
    def __init__(
        self,
        store: ScheduleStore,
        queue: Queue,
        executor: Executor,
        clock: Clock,
        *,
        node_id: str,
        lease_ttl_ms: int,
        batch_size: int = 256,
    ) -> None:
        self._store = store
        self._queue = queue
        self._executor = executor
        self._clock = clock
        self._node_id = node_id
        self._lease_ttl = timedelta(milliseconds=lease_ttl_ms)
        self._batch_size = batch_size

    async def run_once(self, timeout_s: float = 1.0) -> int:
        """Fetch one batch, lease and start what is still ours to run; returns fires started."""
        received = await self._queue.fetch(self._batch_size, timeout_s=timeout_s)
        if not received:
            return 0
        until = self._clock.now() + self._lease_ttl
        # One statement (one commit) for the whole batch; a message whose run is done or whose
        # fence moved on (a duplicate, a superseded attempt) leases nothing and is acked below.
        leases = [(m.envelope.run_id, m.envelope.fence_token) for m in received]
        fires = await self._store.lease_fenced_runs(leases, owner=self._node_id, lease_until=until)
        if fires:
            metrics.FIRES.labels(origin="queue").inc(len(fires))
            self._executor.submit(fires)
        await self._queue.ack(received)  # the store's lease holds the fire from here on
        return len(fires)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_once()
            except Exception:
                log.exception("queue consumer failed", extra={"action": "consume_failed"})
                await asyncio.sleep(1.0)  # the queue is down: back off, the backstop covers
