"""A fire whose lease the store refuses to extend is stopped at the next heartbeat: overlap
cancel_previous cancelled its run. The runner is cancelled (a webhook's request aborted) and no
outcome is written; a fire still waiting for its instant never starts."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from datetime import timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import (
    EveryTrigger,
    Job,
    JobState,
    OverlapPolicy,
    Schedule,
    TaskTarget,
    WebhookTarget,
)
from tickwork.domain.runs import AttemptStatus, Fire, RunStatus
from tickwork.scheduler.planning import plan_claim
from tickwork.store.memory import MemoryStore
from tickwork.tasks import TaskContext, TaskRegistry
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.task import TaskRunner

from .test_executor_backlog import T0

SEC = timedelta(seconds=1)
TTL = 5 * SEC
MS = timedelta(milliseconds=1)


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


class StoppableTasks:
    """An async and a sync task that wait to be let go, saying what happened to them."""

    def __init__(self) -> None:
        self.registry = TaskRegistry()
        self.started = threading.Event()  # set from the loop or from the task's thread
        self.cancelled = asyncio.Event()
        self.let_go = threading.Event()
        self.finished = threading.Event()
        self.registry.task("async.waits")(self.waits)
        self.registry.task("sync.blocks")(self.blocks)

    async def waits(self, ctx: TaskContext) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    def blocks(self, ctx: TaskContext) -> None:
        self.started.set()
        self.let_go.wait(10)
        self.finished.set()


@pytest.mark.parametrize("task", ["async.waits", "sync.blocks"])
async def test_a_cancelled_python_task_sees_cancelled_error_and_a_sync_one_runs_to_its_end(
    task: str,
) -> None:
    """docs/policies.md, cancel_previous: an async task gets CancelledError at its `await`; a
    sync task in its thread cannot be interrupted, runs to its end, and its result is ignored."""
    store, clock, tasks = MemoryStore(), ManualClock(T0), StoppableTasks()
    job = await cancel_previous_job(store)
    await store.update_job(replace(job, target=TaskTarget(name=task)))
    runner = TaskRunner(tasks.registry, store, clock, lease_ttl_ms=int(TTL / MS))
    executor = Executor(store, clock, runner, ExecutorConfig(node_id="w1"))
    [first] = await claim_next(store, clock)
    executor.submit([first])
    assert await asyncio.to_thread(tasks.started.wait, 5)
    clock.advance(SEC)
    await claim_next(store, clock)  # cancels the first run
    assert await executor.heartbeat() == 0
    if task == "async.waits":
        await asyncio.wait_for(tasks.cancelled.wait(), 5)
    else:
        assert not tasks.finished.is_set()  # still running in its thread
        tasks.let_go.set()
        assert await asyncio.to_thread(tasks.finished.wait, 5)
    await executor.drain()
    assert (executor.backlog, executor.holds(first.run_id)) == (0, False)
    # Its outcome, had it one, was never written: the run stays cancelled, its attempt too.
    assert (await store.get_run(first.run_id)).status is RunStatus.CANCELLED
    [attempt] = await store.list_attempts(first.run_id)
    assert attempt.status is AttemptStatus.CANCELLED
