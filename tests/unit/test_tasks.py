"""Python tasks: registration, execution outcomes, timeouts, heartbeats."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, TaskTarget
from tickwork.domain.runs import Fire
from tickwork.store.memory import MemoryStore
from tickwork.tasks import PermanentFailure, TaskContext, TaskRegistry
from tickwork.worker.executors.task import TaskRunner

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def fire(name: str, *, args: object = None, timeout_s: float = 5.0) -> Fire:
    return Fire(
        run_id=7,
        job_id="j",
        key="j:1",
        scheduled_for=T0,
        fence_token=3,
        attempt=2,
        target=TaskTarget(name=name, args=args, timeout_s=timeout_s),
        lease_until=T0 + timedelta(seconds=60),
    )


@pytest.fixture
def registry() -> TaskRegistry:
    tasks = TaskRegistry()
    seen: list[TaskContext] = []

    @tasks.task("async.ok")
    async def async_ok(ctx: TaskContext) -> None:
        seen.append(ctx)

    @tasks.task("sync.ok")
    def sync_ok(ctx: TaskContext) -> None:
        assert threading.current_thread() is not threading.main_thread()  # off the loop
        seen.append(ctx)

    @tasks.task("boom")
    def boom(ctx: TaskContext) -> None:
        raise RuntimeError("disk full")

    @tasks.task("refuse")
    async def refuse(ctx: TaskContext) -> None:
        raise PermanentFailure("bad input")

    @tasks.task("slow")
    async def slow(ctx: TaskContext) -> None:
        await asyncio.sleep(30)

    tasks.seen = seen  # type: ignore[attr-defined]
    return tasks


def runner(registry: TaskRegistry, store: MemoryStore | None = None) -> TaskRunner:
    return TaskRunner(registry, store or MemoryStore(), ManualClock(T0), lease_ttl_ms=60_000)


@pytest.mark.parametrize("name", ["async.ok", "sync.ok"])
async def test_tasks_get_the_occurrence_context(registry: TaskRegistry, name: str) -> None:
    attempt = await runner(registry)(fire(name, args={"n": 1}))
    assert attempt.ok
    [ctx] = registry.seen  # type: ignore[attr-defined]
    assert (ctx.key, ctx.attempt, ctx.fence_token, ctx.args) == ("j:1", 2, 3, {"n": 1})


@pytest.mark.parametrize(
    ("name", "retryable", "error"),
    [
        ("boom", True, "RuntimeError: disk full"),
        ("refuse", False, "PermanentFailure: bad input"),
        ("missing", False, "no task named 'missing' here"),
    ],
)
async def test_failures_say_whether_to_retry(
    registry: TaskRegistry, name: str, retryable: bool, error: str
) -> None:
    attempt = await runner(registry)(fire(name))
    assert (attempt.ok, attempt.retryable) == (False, retryable)
    assert attempt.error is not None
    assert attempt.error.startswith(error)


async def test_a_task_past_its_timeout_is_cancelled(registry: TaskRegistry) -> None:
    attempt = await runner(registry)(fire("slow", timeout_s=0.05))
    assert (attempt.ok, attempt.retryable, attempt.error) == (False, True, "timed out after 0.05 s")


async def test_heartbeat_extends_the_lease_of_the_fire() -> None:
    store = MemoryStore()
    job = Job(
        id="j",
        name="j",
        schedule=Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0)),
        target=TaskTarget(name="beat"),
        state=JobState.PAUSED,
        next_run_at=None,
        created_at=T0,
        updated_at=T0,
    )
    await store.create_job(job)
    await store.add_manual_run("j", now=T0)
    [leased] = await store.lease_runs(now=T0, owner="w", lease_until=T0, limit=1)
    tasks = TaskRegistry()

    @tasks.task("beat")
    async def beat(ctx: TaskContext) -> None:
        await ctx.heartbeat()

    assert (await runner(tasks, store)(leased)).ok
    assert await store.next_lease_at() == T0 + timedelta(seconds=60)  # extended from T0


def test_names_are_unique_per_registry() -> None:
    tasks = TaskRegistry()
    tasks.task("a")(lambda ctx: None)
    with pytest.raises(ValueError, match="already registered"):
        tasks.task("a")(lambda ctx: None)
    with pytest.raises(ValueError, match="1 to 200"):
        tasks.task("")


async def test_each_task_is_held_to_its_own_timeout(registry: TaskRegistry) -> None:
    # One timer serves every running task (worker/deadlines.py): a task that starts later
    # with a shorter timeout must still be cancelled at its own deadline, not the first's.
    run = runner(registry)
    patient = asyncio.create_task(run(fire("slow", timeout_s=20)))
    await asyncio.sleep(0)  # the patient task registers its deadline first
    hasty = await asyncio.wait_for(run(fire("slow", timeout_s=0.05)), timeout=5)
    assert hasty.error == "timed out after 0.05 s"
    assert not patient.done()
    quick = await run(fire("async.ok", timeout_s=0.05))
    assert quick.ok
    patient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await patient  # a cancel from outside (shutdown) is not turned into a timeout


async def test_a_task_that_finishes_in_time_is_never_cancelled_later(
    registry: TaskRegistry,
) -> None:
    run = runner(registry)
    assert (await run(fire("async.ok", timeout_s=0.02))).ok
    # The timer armed for that deadline still fires while this (the same) task sleeps; it
    # must find nothing to cancel, or the sleep raises CancelledError.
    assert await asyncio.sleep(0.1, "still here") == "still here"


async def test_a_task_mutating_its_args_does_not_change_the_next_fire() -> None:
    tasks = TaskRegistry()
    seen: list[object] = []

    @tasks.task("mutate")
    async def mutate(ctx: TaskContext) -> None:
        seen.append(dict(ctx.args))
        ctx.args["n"] += 1

    shared = fire("mutate", args={"n": 1})  # parsed targets are shared between fires
    run = runner(tasks)
    assert (await run(shared)).ok
    assert (await run(shared)).ok
    assert seen == [{"n": 1}, {"n": 1}]
