"""A worker leases no more than it can run soon (`backlog_limit`): the rest of a burst stays
in the store, unleased, for other workers, and nothing waits out a lease TTL if it dies."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.store.memory import MemoryStore
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class HeldRunner:
    """Runs nothing until released, so fires pile up in the executor."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[int] = []

    async def __call__(self, fire: Fire) -> Attempt:
        self.started.append(fire.run_id)
        await self.release.wait()
        return Attempt(ok=True, http_status=200)


async def pending_runs(store: MemoryStore, count: int) -> None:
    for n in range(count):
        job = Job(
            id=f"{n:032x}", name=f"j{n}",
            schedule=Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0)),
            target=WebhookTarget(url="http://127.0.0.1:9/"), state=JobState.PAUSED,
            next_run_at=None, created_at=T0, updated_at=T0,
        )  # fmt: skip
        await store.create_job(job)
        await store.add_manual_run(job.id, now=T0)


async def test_leases_stop_at_the_backlog_limit_and_resume_as_fires_finish() -> None:
    store, runner = MemoryStore(), HeldRunner()
    await pending_runs(store, 5)
    config = ExecutorConfig(node_id="w1", concurrency=10, backlog_limit=2)
    executor = Executor(store, ManualClock(T0), runner, config)
    leaser = StoreLeaser(store, ManualClock(T0), executor, LeaserConfig(node_id="w1"))

    assert (await leaser.run_once()).started == 2
    assert (await leaser.run_once()).started == 0  # full: nothing more leased
    assert executor.room() == 0
    # The other three are still free for any worker to lease.
    others = await store.lease_runs(now=T0, owner="w2", lease_until=T0, limit=10)
    assert len(others) == 3

    runner.release.set()
    assert await executor.wait_for_room(timeout_s=5)
    await executor.drain()
    assert executor.backlog == 0
    assert executor.room() == 2
    assert len(runner.started) == 2
    assert not set(runner.started) & {f.run_id for f in others}
