"""QueueConsumer against the in-memory store and queue."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Envelope, Fire
from tickwork.errors import StoreError
from tickwork.queue.base import Received
from tickwork.queue.memory import MemoryQueue
from tickwork.store.base import ClaimPlan
from tickwork.store.memory import MemoryStore
from tickwork.worker.consumer import QueueConsumer
from tickwork.worker.executor import Executor

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


class CountingStore(MemoryStore):
    """The memory store, counting how often the consumer goes to the store to lease."""

    def __init__(self) -> None:
        super().__init__()
        self.lease_calls = 0

    async def lease_fenced_runs(
        self,
        leases: Sequence[tuple[int, int]],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[Fire]:
        self.lease_calls += 1
        return await super().lease_fenced_runs(
            leases, owner=owner, lease_until=lease_until, now=now
        )


class Submitted:
    """Stands in for the executor: records what the consumer hands it."""

    def __init__(self, backlog_limit: int = 1_000_000) -> None:
        self.fires: list[Fire] = []
        self.backlog_limit = backlog_limit  # nothing here ever finishes: room only shrinks

    def submit(self, fires: Sequence[Fire]) -> None:
        self.fires.extend(fires)

    def room(self) -> int:
        return max(self.backlog_limit - len(self.fires), 0)

    async def wait_for_room(self, timeout_s: float) -> bool:
        return self.room() > 0

    def holds(self, run_id: int) -> bool:
        return any(fire.run_id == run_id for fire in self.fires)

    def held_run_ids(self) -> frozenset[int]:
        return frozenset(fire.run_id for fire in self.fires)


async def handed_off(store: MemoryStore, count: int) -> list[Envelope]:
    """What a scheduler process without a worker does: claim, and publish the envelopes."""
    schedule = Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0))
    plans = []
    for n in range(1, count + 1):
        job = Job(
            id=f"{n:032x}",
            name=f"j{n}",
            schedule=schedule,
            target=WebhookTarget(url="http://127.0.0.1:9/"),
            state=JobState.SCHEDULED,
            next_run_at=T0,
            created_at=T0,
            updated_at=T0,
        )
        await store.create_job(job)
        plans.append(
            ClaimPlan(
                job_id=job.id,
                expected_fence=0,
                expected_next_run_at=T0,
                scheduled_for=T0,
                coalesced=0,
                new_next_run_at=T0 + S,
            )
        )
    return await store.claim_hand_off(plans, owner="sched", now=T0)


def consumer(store: MemoryStore, queue: MemoryQueue, sink: Submitted) -> QueueConsumer:
    executor = cast(Executor, sink)  # the consumer only calls submit() and holds()
    return QueueConsumer(store, queue, executor, ManualClock(T0), node_id="w1", lease_ttl_ms=30_000)


async def test_a_fetched_batch_is_leased_in_one_store_call_and_all_of_it_acked() -> None:
    store, queue, sink = CountingStore(), MemoryQueue(visibility_s=30), Submitted()
    sent = await handed_off(store, 3)
    stale = replace(sent[0], fence_token=sent[0].fence_token - 1, attempt=7)
    await queue.publish([*sent, stale])

    started = await consumer(store, queue, sink).run_once(timeout_s=0)

    assert started == 3
    assert store.lease_calls == 1
    assert sorted(f.run_id for f in sink.fires) == sorted(e.run_id for e in sent)
    assert all(f.fence_token == sent[0].fence_token + 1 for f in sink.fires)
    assert await queue.depth() == 0  # the stale message was acked too, not left to come back


async def test_a_busy_executor_fetches_only_what_it_has_room_for() -> None:
    store, queue, sink = CountingStore(), MemoryQueue(visibility_s=30), Submitted(backlog_limit=2)
    await queue.publish(await handed_off(store, 5))
    worker = consumer(store, queue, sink)

    assert await worker.run_once(timeout_s=0) == 2
    assert await worker.run_once(timeout_s=0) == 0  # full: nothing fetched, nothing leased
    assert len(sink.fires) == 2
    assert store.lease_calls == 1
    assert await queue.depth() == 3  # left in the queue for other workers, unleased


async def test_a_redelivered_batch_leases_nothing_and_is_acked() -> None:
    store, queue, sink = CountingStore(), MemoryQueue(visibility_s=30), Submitted()
    sent = await handed_off(store, 2)
    worker = consumer(store, queue, sink)
    await queue.publish(sent)
    assert await worker.run_once(timeout_s=0) == 2

    # The same attempts again (a scheduler re-publish NATS did not dedupe, a Redis duplicate):
    # their fences moved on with the first lease.
    duplicate = MemoryQueue(visibility_s=30)
    await duplicate.publish(sent)
    started = await consumer(store, duplicate, sink).run_once(timeout_s=0)

    assert started == 0
    assert len(sink.fires) == 2
    assert await duplicate.depth() == 0


class LostReplyStore(CountingStore):
    """Fault injection: the next lease call commits, then its reply is lost (StoreError), as
    when the connection drops between the commit and the answer."""

    def __init__(self, *, commit: bool) -> None:
        super().__init__()
        self.fail_next = True
        self.commit = commit

    async def lease_fenced_runs(
        self,
        leases: Sequence[tuple[int, int]],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[Fire]:
        if not self.fail_next:
            return await super().lease_fenced_runs(
                leases, owner=owner, lease_until=lease_until, now=now
            )
        self.fail_next = False
        if self.commit:
            await super().lease_fenced_runs(leases, owner=owner, lease_until=lease_until, now=now)
        raise StoreError("connection lost")


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "rolled-back"])
async def test_a_lease_whose_reply_was_lost_is_settled_on_the_next_round(committed: bool) -> None:
    store, queue, sink = LostReplyStore(commit=committed), MemoryQueue(visibility_s=30), Submitted()
    sent = await handed_off(store, 3)
    await queue.publish(sent)
    worker = consumer(store, queue, sink)

    with pytest.raises(StoreError):
        await worker.run_once(timeout_s=0)
    assert sink.fires == []

    # The next round neither waits for the leases to run out nor for the queue to redeliver:
    # committed leases are taken back at their fence, the others leased now. Each run once.
    assert await worker.run_once(timeout_s=0) == 3
    assert sorted(f.run_id for f in sink.fires) == sorted(e.run_id for e in sent)
    assert all(f.fence_token == sent[0].fence_token + 1 for f in sink.fires)
    assert await queue.depth() == 0
    assert await worker.run_once(timeout_s=0) == 0  # nothing left to settle or fetch


async def test_settling_never_takes_back_a_lease_someone_else_holds() -> None:
    store, queue, sink = LostReplyStore(commit=False), MemoryQueue(visibility_s=30), Submitted()
    [sent] = await handed_off(store, 1)
    await queue.publish([sent])
    worker = consumer(store, queue, sink)
    with pytest.raises(StoreError):
        await worker.run_once(timeout_s=0)
    # Meanwhile another worker leased the run (its backstop, or a redelivery).
    [theirs] = await store.lease_fenced_runs(
        [(sent.run_id, sent.fence_token)], owner="w2", lease_until=T0 + 30 * S, now=T0
    )
    assert await worker.run_once(timeout_s=0) == 0
    assert sink.fires == []
    assert await queue.depth() == 0
    assert theirs.fence_token == sent.fence_token + 1


class CountingFetches(MemoryQueue):
    """Signals when its second fetch starts."""

    def __init__(self) -> None:
        super().__init__(visibility_s=30)
        self.fetches = 0
        self.second_fetch = asyncio.Event()

    async def fetch(self, max_messages: int, *, timeout_s: float) -> list[Received]:
        self.fetches += 1
        if self.fetches == 2:
            self.second_fetch.set()
        return await super().fetch(max_messages, timeout_s=timeout_s)


class LeaseWaitsForFetch(CountingStore):
    """The first lease waits until the queue is asked for the next batch, then stops the
    consumer: the two meet only if the consumer fetches ahead while it leases."""

    def __init__(self, queue: CountingFetches, stop: asyncio.Event) -> None:
        super().__init__()
        self.queue = queue
        self.stop = stop

    async def lease_fenced_runs(
        self,
        leases: Sequence[tuple[int, int]],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[Fire]:
        if self.lease_calls == 0:
            await self.queue.second_fetch.wait()
            self.stop.set()
        return await super().lease_fenced_runs(
            leases, owner=owner, lease_until=lease_until, now=now
        )


async def test_the_next_batch_is_fetched_while_one_is_leased_and_given_back_at_shutdown() -> None:
    queue, stop, sink = CountingFetches(), asyncio.Event(), Submitted()
    store = LeaseWaitsForFetch(queue, stop)
    await queue.publish(await handed_off(store, 4))
    executor = cast(Executor, sink)
    worker = QueueConsumer(
        store, queue, executor, ManualClock(T0), node_id="w1", lease_ttl_ms=30_000, batch_size=2
    )

    # Fetched one batch at a time, the lease would wait forever for the second fetch.
    await asyncio.wait_for(worker.run(stop), 5)

    assert len(sink.fires) == 2  # the first batch: leased, handed over and acked
    assert store.lease_calls == 1
    # The batch fetched ahead went back to the queue at shutdown, visible again at once
    # rather than after the 30 s visibility timeout, and still unleased in the store.
    back = await queue.fetch(10, timeout_s=0)
    assert sorted(m.envelope.run_id for m in back) == sorted(
        f.run_id for f in await store.lease_runs(now=T0, owner="w2", lease_until=T0, limit=10)
    )
    assert len(back) == 2
