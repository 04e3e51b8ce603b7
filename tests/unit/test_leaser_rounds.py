"""The executor writes outcomes while the store leaser leases, and a big lease starts the next
round without the pause: how one worker keeps up with a burst."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime

from tickwork.clock import ManualClock
from tickwork.domain.runs import Fire, RunOutcome
from tickwork.store.base import Applied
from tickwork.store.memory import MemoryStore
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.leaser import LEASE_BATCH, LeaserConfig, StoreLeaser

from .test_executor_backlog import T0, pending_runs

LONG_PAUSE_MS = 3_600_000  # a pause no test waits out: only skipping it lets the test finish


async def succeed(fire: Fire) -> Attempt:
    return Attempt(ok=True, http_status=200)


class MeetingStore(MemoryStore):
    """finish_runs waits until a lease_runs call is in progress, and that lease waits for the
    finish: the two complete only if the executor issues them at the same time."""

    def __init__(self) -> None:
        super().__init__()
        self.leasing = asyncio.Event()
        self.finishing = asyncio.Event()
        self.met = False

    async def lease_runs(
        self,
        *,
        now: datetime,
        owner: str,
        lease_until: datetime,
        limit: int,
        hand_offs_by: datetime | None = None,
        fresh_from: datetime | None = None,
        due_by: datetime | None = None,
        ahead_first: int = 0,
        after: datetime | None = None,
    ) -> list[Fire]:
        if self.finishing.is_set() and not self.met:
            self.leasing.set()
            self.met = True
        return await super().lease_runs(
            now=now,
            hand_offs_by=hand_offs_by,
            owner=owner,
            lease_until=lease_until,
            limit=limit,
            fresh_from=fresh_from,
            due_by=due_by,
            ahead_first=ahead_first,
            after=after,
        )

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        if not self.met:
            self.finishing.set()
            await self.leasing.wait()
        return await super().finish_runs(outcomes)


def worker(
    store: MemoryStore, *, pause_ms: int, scan_interval_ms: int = 5_000, backlog_limit: int = 1024
) -> tuple[Executor, StoreLeaser]:
    clock = ManualClock(T0)
    config = ExecutorConfig(node_id="w1", flush_interval_ms=1, backlog_limit=backlog_limit)
    executor = Executor(store, clock, succeed, config)
    leases = LeaserConfig(node_id="w1", pause_ms=pause_ms, scan_interval_ms=scan_interval_ms)
    return executor, StoreLeaser(store, clock, executor, leases)


def run(stop: asyncio.Event, executor: Executor, leaser: StoreLeaser) -> asyncio.Future[object]:
    return asyncio.gather(executor.run(stop), leaser.run(stop))


async def test_outcomes_are_written_while_the_leaser_leases() -> None:
    store = MeetingStore()
    await pending_runs(store, 3)
    executor, leaser = worker(store, pause_ms=1, scan_interval_ms=0)
    stop = asyncio.Event()
    running = run(stop, executor, leaser)
    # The first lease takes the three runs; they finish, and their flush must meet a lease.
    # Were writing and leasing one after the other, the finish would wait for a lease that
    # never comes.
    await asyncio.wait_for(store.leasing.wait(), 5)
    stop.set()
    await asyncio.wait_for(running, 5)
    finished = [await store.get_run(run_id) for run_id in range(1, 4)]
    assert all(run is not None and run.status.value == "succeeded" for run in finished)


class CountingLeases(MemoryStore):
    """Signals once `total` runs have been leased."""

    def __init__(self, total: int) -> None:
        super().__init__()
        self.total = total
        self.leased = 0
        self.batches: list[int] = []
        self.all_leased = asyncio.Event()
        self.leased_once = asyncio.Event()

    async def lease_runs(
        self,
        *,
        now: datetime,
        owner: str,
        lease_until: datetime,
        limit: int,
        hand_offs_by: datetime | None = None,
        fresh_from: datetime | None = None,
        due_by: datetime | None = None,
        ahead_first: int = 0,
        after: datetime | None = None,
    ) -> list[Fire]:
        fires = await super().lease_runs(
            now=now,
            hand_offs_by=hand_offs_by,
            owner=owner,
            lease_until=lease_until,
            limit=limit,
            fresh_from=fresh_from,
            due_by=due_by,
            ahead_first=ahead_first,
            after=after,
        )
        self.leased += len(fires)
        self.batches.append(len(fires))
        self.leased_once.set()
        if self.leased >= self.total:
            self.all_leased.set()
        return fires


async def test_a_big_lease_is_followed_at_once_by_the_next() -> None:
    total = LEASE_BATCH + LEASE_BATCH // 2
    store = CountingLeases(total)
    await pending_runs(store, total)
    executor, leaser = worker(store, pause_ms=LONG_PAUSE_MS, backlog_limit=2 * total)
    stop = asyncio.Event()
    running = run(stop, executor, leaser)
    # The first round leases a full batch; the second leases the rest straight away. Had it
    # paused after the first, nothing would move for an hour.
    await asyncio.wait_for(store.all_leased.wait(), 5)
    stop.set()  # also ends the hour-long pause: it waits for new runs or `stop`
    await asyncio.wait_for(running, 5)
    assert store.batches[:2] == [LEASE_BATCH, LEASE_BATCH // 2]


async def test_a_small_lease_keeps_the_pause() -> None:
    # A few runs per round (a busy worker freeing a few slots) stay batched: after leasing
    # them the leaser pauses instead of asking the store again at once.
    store = CountingLeases(total=10)
    await pending_runs(store, 3)
    executor, leaser = worker(store, pause_ms=LONG_PAUSE_MS)
    stop = asyncio.Event()
    running = run(stop, executor, leaser)
    await asyncio.wait_for(store.leased_once.wait(), 5)
    for _ in range(100):  # many loop turns: a round without the pause would lease again
        await asyncio.sleep(0)
    stop.set()
    await asyncio.wait_for(running, 5)
    assert store.batches == [3]
