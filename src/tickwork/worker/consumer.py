"""Feeding the executor from an external queue (NATS JetStream, Redis Streams).

A message names a run and the fence the scheduler gave it. The consumer leases that run in the
store with a compare-and-set on the fence (a duplicate or superseded message finds the fence
moved and is dropped), hands the fire to the executor and acks the message: from then on the
store's lease, not the queue, keeps the fire alive. A message lost by the queue is recovered by
the store leaser's backstop (worker/leaser.py), which leases free runs straight from the store.

A lease call that fails may still have committed (the connection died after the commit, before
the reply): the runs are then leased to this worker at the next fence while nobody runs them,
until the lease runs out. So after a failure the batch is kept, unacked, and the next round
first takes back this worker's live leases that its executor does not hold
(`take_back_own_leases`: same fence, same owner; the store leaser uses the same verb after its
own lost lease), then leases the rest as usual: a dropped connection delays those fires by one
round, not by a lease TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from tickwork import metrics
from tickwork.clock import Clock
from tickwork.domain.runs import Fire
from tickwork.queue.base import Queue, Received
from tickwork.store.base import ScheduleStore
from tickwork.worker.base import FireSink
from tickwork.worker.leaser import LEASE_BATCH

log = logging.getLogger("tickwork.consumer")


class QueueConsumer:
    def __init__(
        self,
        store: ScheduleStore,
        queue: Queue,
        executor: FireSink,
        clock: Clock,
        *,
        node_id: str,
        lease_ttl_ms: int,
        batch_size: int = 1000,
    ) -> None:
        self._store = store
        self._queue = queue
        self._executor = executor
        self._clock = clock
        self._node_id = node_id
        self._lease_ttl = timedelta(milliseconds=lease_ttl_ms)
        self._batch_size = batch_size
        self._uncertain: list[Received] = []  # a batch whose lease call failed (maybe committed)
        self._in_hand = 0  # messages fetched and not yet leased and acked

    async def run_once(self, timeout_s: float = 1.0) -> int:
        """Fetch one batch, lease and start what is still ours to run; returns fires started."""
        if self._uncertain:
            return await self._settle_uncertain()
        received = await self._fetch(timeout_s)
        return await self._lease(received) if received else 0

    async def _fetch(self, timeout_s: float) -> list[Received]:
        # Fetch no more than the executor has room for: what it cannot run soon stays in the
        # queue for other workers (and unleased, so no TTL to wait out if this one dies).
        # Messages fetched and not yet handed to the executor count against that room too.
        if not await self._executor.wait_for_room(timeout_s):
            return []
        wanted = min(self._batch_size, self._executor.room() - self._in_hand)
        if wanted < 1:
            return []
        received = await self._queue.fetch(wanted, timeout_s=timeout_s)
        self._in_hand += len(received)
        return received

    async def _lease(self, received: list[Received]) -> int:
        now = self._clock.now()
        until = now + self._lease_ttl
        # One statement (one commit) for the whole batch; a message whose run is done or whose
        # fence moved on (a duplicate, a superseded attempt) leases nothing and is acked below.
        leases = [(m.envelope.run_id, m.envelope.fence_token) for m in received]
        try:
            fires = await self._store.lease_fenced_runs(
                leases, owner=self._node_id, lease_until=until, now=now
            )
        except Exception:
            self._uncertain = received
            raise
        return await self._start(received, fires)

    async def _settle_uncertain(self) -> int:
        """The batch whose lease call failed: take back the leases that committed anyway,
        lease the others now."""
        received = self._uncertain
        now = self._clock.now()
        until = now + self._lease_ttl
        # A committed lease named us as the owner and is live: whatever of ours the executor
        # does not hold is such a lease (of this batch, or of another lost reply: run it too).
        ours = await self._store.take_back_own_leases(
            owner=self._node_id,
            holding=self._executor.held_run_ids(),
            now=now,
            lease_until=until,
            limit=len(received) + LEASE_BATCH,
        )
        taken = {fire.run_id for fire in ours}
        rest = [
            (m.envelope.run_id, m.envelope.fence_token)
            for m in received
            if m.envelope.run_id not in taken and not self._executor.holds(m.envelope.run_id)
        ]
        fires = await self._store.lease_fenced_runs(
            rest, owner=self._node_id, lease_until=until, now=now
        )
        self._uncertain = []
        return await self._start(received, [*ours, *fires])

    async def _start(self, received: list[Received], fires: list[Fire]) -> int:
        self._in_hand -= len(received)
        if fires:
            metrics.FIRES.labels(origin="queue").inc(len(fires))
            self._executor.submit(fires)
        await self._queue.ack(received)  # the store's lease holds the fire from here on
        return len(fires)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until `stop`. The next batch is fetched while the current one is leased and
        acked, so the queue's round trip and the store's overlap (one fetch in flight, as the
        NATS backend allows; `_in_hand` keeps the two within the executor's room)."""
        ahead: asyncio.Task[list[Received]] | None = None
        try:
            while not stop.is_set():
                try:
                    if self._uncertain:
                        await self._settle_uncertain()
                        continue
                    if ahead is not None:
                        fetching, ahead = ahead, None
                        received = await fetching
                    else:
                        received = await self._fetch(1.0)
                    if received:
                        ahead = asyncio.create_task(self._fetch(1.0))
                        await self._lease(received)
                except Exception:
                    log.exception("queue consumer failed", extra={"action": "consume_failed"})
                    await asyncio.sleep(1.0)  # the queue is down: back off, the backstop covers
        finally:
            await self._give_back(ahead)

    async def _give_back(self, ahead: asyncio.Task[list[Received]] | None) -> None:
        """At shutdown, a batch fetched ahead goes back to the queue for other workers now,
        rather than after the visibility timeout."""
        if ahead is None:
            return
        with contextlib.suppress(Exception):
            for message in await ahead:
                await self._queue.retry_later(message, delay_s=0)
