"""A fire whose lease the store refuses to extend is stopped at the next heartbeat: overlap
cancel_previous cancelled its run. The runner is cancelled (a webhook's request aborted) and no
outcome is written; a fire still waiting for its instant never starts."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, OverlapPolicy, Schedule, WebhookTarget
from tickwork.domain.runs import AttemptStatus, Fire, RunStatus
from tickwork.scheduler.planning import plan_claim
from tickwork.store.memory import MemoryStore
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig

from .test_executor_backlog import T0

SEC = timedelta(seconds=1)
TTL = 5 * SEC


class BlockingRunner:
    """Runs until cancelled, and says when it started and when it was cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self, fire: Fire) -> Attempt:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return Attempt(ok=True)  # never reached


async def cancel_previous_job(store: MemoryStore) -> Job:
    schedule = Schedule(
        trigger=EveryTrigger(interval_ms=1000, anchor=T0), overlap=OverlapPolicy.CANCEL_PREVIOUS
    )
    job = Job(
        id="0" * 32, name="j", schedule=schedule, target=WebhookTarget(url="http://127.0.0.1:9/"),
        state=JobState.SCHEDULED, next_run_at=T0, created_at=T0, updated_at=T0,
    )  # fmt: skip
    return await store.create_job(job)


async def claim_next(store: MemoryStore, clock: ManualClock) -> list[Fire]:
    [due] = await store.due_jobs(clock.now(), 10)
    plan = plan_claim(due, clock.now())
    return await store.claim([plan], owner="w1", lease_until=clock.now() + TTL, now=clock.now())


async def test_a_running_fire_whose_run_was_cancelled_is_stopped_without_an_outcome() -> None:
    store, clock, runner = MemoryStore(), ManualClock(T0), BlockingRunner()
    await cancel_previous_job(store)
    executor = Executor(store, clock, runner, ExecutorConfig(node_id="w1"))
    [first] = await claim_next(store, clock)
    executor.submit([first])
    await asyncio.wait_for(runner.started.wait(), 5)

    clock.advance(SEC)
    [second] = await claim_next(store, clock)  # cancels the first run
    assert (await store.get_run(first.run_id)).status is RunStatus.CANCELLED
    assert await executor.heartbeat() == 0  # the first lease is refused: it is stopped
    await asyncio.wait_for(runner.cancelled.wait(), 5)
    await executor.drain()
    assert executor.backlog == 0
    assert not executor.holds(first.run_id)
    # No outcome was written: the cancelled attempt is the only one.
    [attempt] = await store.list_attempts(first.run_id)
    assert attempt.status is AttemptStatus.CANCELLED
    assert (await store.get_run(second.run_id)).status is RunStatus.PENDING


async def test_a_waiting_fire_whose_run_was_cancelled_never_starts() -> None:
    store, clock, runner = MemoryStore(), ManualClock(T0 - 10 * SEC), BlockingRunner()
    await cancel_previous_job(store)
    executor = Executor(store, clock, runner, ExecutorConfig(node_id="w1"))
    plan = plan_claim((await store.due_jobs(T0, 10))[0], T0)
    [first] = await store.claim([plan], owner="w1", lease_until=T0 - 5 * SEC, now=clock.now())
    executor.submit([first])  # waits for T0
    clock.set(T0 - 8 * SEC)
    [due] = await store.due_jobs(T0 + SEC, 10)
    await store.claim([plan_claim(due, T0 + SEC)], owner="w2", lease_until=T0, now=clock.now())
    assert await executor.heartbeat() == 0
    clock.set(T0)
    executor._release_due()
    await executor.drain()
    assert not runner.started.is_set()
    assert executor.backlog == 0
