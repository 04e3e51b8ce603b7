"""A task that runs for several lease TTLs keeps its lease: the executor's heartbeat renews it,
so another worker polling the same store never takes the run, and the task's outcome applies.

Two workers (executor + store leaser each, each with its own store connection) share one
store, SQLite or PostgreSQL, with a short lease so the test runs in seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path

import pytest

from tickwork.clock import SystemClock
from tickwork.domain.jobs import AtTrigger, Job, JobState, Schedule, TaskTarget
from tickwork.domain.runs import RunStatus
from tickwork.store.base import ClaimPlan, ScheduleStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore
from tickwork.tasks import TaskContext, TaskRegistry
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.task import TaskRunner
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

TTL_MS = 1_000
HEARTBEAT_MS = 200  # the shortest heartbeat this TTL allows is just over TTL / 4
TASK_S = 3.5 * TTL_MS / 1000  # several TTLs: without renewals the lease would lapse thrice


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], ScheduleStore]:
    """Builds stores on one database, each like the connection of a separate worker process."""
    if request.param == "sqlite":
        path = tmp_path / "tickwork.db"
        return lambda: SqliteStore(path)
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
async def stores(make_store: Callable[[], ScheduleStore]) -> AsyncIterator[list[ScheduleStore]]:
    """Two opened stores: worker a's and worker b's."""
    opened: list[ScheduleStore] = []
    try:
        for _ in range(2):
            opened.append(make_store())
            await opened[-1].open()
        yield opened
    finally:
        for store in opened:
            await store.close()


def worker(store: ScheduleStore, name: str, registry: TaskRegistry) -> tuple[Executor, StoreLeaser]:
    clock = SystemClock()
    runner = TaskRunner(registry, store, clock, lease_ttl_ms=TTL_MS)
    config = ExecutorConfig(node_id=name, lease_ttl_ms=TTL_MS, heartbeat_ms=HEARTBEAT_MS)
    executor = Executor(store, clock, runner, config)
    # A leaser that looks often: it would take the run the moment its lease lapsed.
    leases = LeaserConfig(node_id=name, lease_ttl_ms=TTL_MS, scan_interval_ms=50, pause_ms=5)
    return executor, StoreLeaser(store, clock, executor, leases)


async def test_a_task_running_for_several_ttls_keeps_its_lease_and_its_outcome_applies(
    stores: list[ScheduleStore],
) -> None:
    registry = TaskRegistry()
    started, finished = asyncio.Event(), asyncio.Event()

    @registry.task("long")
    async def long(ctx: TaskContext) -> None:
        started.set()
        await asyncio.sleep(TASK_S)  # the work itself: it takes this long, nothing to await
        finished.set()

    store_a, store_b = stores
    now = SystemClock().now()
    job = Job(
        id=f"{1:032x}",
        name="long",
        schedule=Schedule(trigger=AtTrigger(at=now)),
        target=TaskTarget(name="long", timeout_s=30),
        state=JobState.SCHEDULED,
        next_run_at=now,
        created_at=now,
        updated_at=now,
    )
    await store_a.create_job(job)
    plan = ClaimPlan(
        job_id=job.id, expected_fence=0, expected_next_run_at=now, scheduled_for=now,
        coalesced=0, new_next_run_at=None,
    )  # fmt: skip
    # Worker a's own scheduler claims the occurrence for it, leased for one TTL (`tickwork up`).
    [fire] = await store_a.claim(
        [plan], owner="a", lease_until=now + timedelta(milliseconds=TTL_MS), now=now
    )
    executor_a, leaser_a = worker(store_a, "a", registry)
    executor_b, leaser_b = worker(store_b, "b", registry)
    stop = asyncio.Event()
    executor_a.submit([fire])
    running = [
        asyncio.create_task(service)
        for service in (executor_a.run(stop), leaser_a.run(stop), executor_b.run(stop),
                        leaser_b.run(stop))
    ]  # fmt: skip
    try:
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(finished.wait(), TASK_S + 5)
    finally:
        stop.set()  # each executor drains: a's outcome is written before its run() returns
        await asyncio.gather(*running)

    run = await store_b.get_run(fire.run_id)
    attempts = await store_b.list_attempts(fire.run_id)
    # Leased once (every lease is a new attempt), run once, by a, and its outcome applied.
    assert (run.status, run.attempt, run.fence_token) == (RunStatus.SUCCEEDED, 1, fire.fence_token)
    assert [(a.attempt, a.worker, a.status) for a in attempts] == [(1, "a", RunStatus.SUCCEEDED)]
