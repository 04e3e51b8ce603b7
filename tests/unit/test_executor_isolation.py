"""Worker isolation in the executor (ADR 0023), against the memory store and a runner that
holds chosen fires: fires over a host or tenant cap wait parked without a slot, parked fires
do not use up what the leaser may lease for other tenants, tasks are capped by their job's
tenant, and a waiting first attempt starts before a waiting retry."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from datetime import timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import (
    EveryTrigger,
    Job,
    JobState,
    Schedule,
    Target,
    TaskTarget,
    WebhookTarget,
)
from tickwork.domain.runs import Fire, RunOutcome
from tickwork.store.base import Applied
from tickwork.store.memory import MemoryStore
from tickwork.worker.admission import Pool, PoolLimits
from tickwork.worker.base import Attempt
from tickwork.worker.executor import UNRECORDED_HARD_FACTOR, Executor, ExecutorConfig
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

from .test_executor_backlog import T0

SLOW = "http://slow.example:8080/hook"
FAST = "http://fast.example/hook"


class Gate:
    """A runner that records every start and holds the fires `held` picks until `open`."""

    def __init__(self, held: Callable[[Fire], bool]) -> None:
        self.held = held
        self.started: list[Fire] = []
        self.opened = asyncio.Event()
        self._changed = asyncio.Event()

    async def __call__(self, fire: Fire) -> Attempt:
        self.started.append(fire)
        self._changed.set()
        if self.held(fire):
            await self.opened.wait()
        return Attempt(ok=True, http_status=200)

    async def until(self, check: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not check():
                self._changed.clear()
                await self._changed.wait()

    def jobs_started(self) -> list[str]:
        return [fire.job_id for fire in self.started]


JOB_NUMBERS = itertools.count()


async def add_runs(store: MemoryStore, tenant: str, target: Target, count: int) -> str:
    """A job of `tenant` with `count` manual runs, all leasable at T0; returns its id."""
    if tenant not in {t.tenant for t in await store.list_tenants()}:
        await store.create_tenant(tenant, now=T0)
    job_id = f"{tenant}-{next(JOB_NUMBERS):08d}"
    job = Job(
        id=job_id, name=job_id, tenant=tenant, target=target,
        schedule=Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0)),
        state=JobState.PAUSED, next_run_at=None, created_at=T0, updated_at=T0,
    )  # fmt: skip
    await store.create_job(job)
    for _ in range(count):
        await store.add_manual_run(job_id, now=T0)
    return job_id


def worker(store: MemoryStore, runner: Gate, **config: int | float) -> tuple[Executor, StoreLeaser]:
    clock = ManualClock(T0)
    executor = Executor(
        store,
        clock,
        runner,
        ExecutorConfig(node_id="w1", **config),  # type: ignore[arg-type]
    )
    return executor, StoreLeaser(store, clock, executor, LeaserConfig(node_id="w1"))


async def lease_until_full(leaser: StoreLeaser) -> None:
    while (await leaser.run_once()).started:
        pass


async def test_fires_parked_at_a_host_cap_leave_the_leaser_room_for_other_tenants() -> None:
    store = MemoryStore()
    runner = Gate(held=lambda fire: "slow" in str(fire.target))
    executor, leaser = worker(store, runner, max_per_host=2, backlog_limit=8, parked_limit=30)
    await add_runs(store, "a", WebhookTarget(url=SLOW), 20)
    await lease_until_full(leaser)
    # Until its job's tenant is read, a fire counts as about to run: it takes room.
    await runner.until(lambda: len(runner.started) == 2)
    await lease_until_full(leaser)
    assert executor.backlog == 20  # every run of A is held here: 2 running, 18 parked
    assert executor.room() == 6  # what is not parked: the backlog limit minus the 2 running

    b_job = await add_runs(store, "b", WebhookTarget(url=FAST), 5)
    await lease_until_full(leaser)
    await runner.until(lambda: runner.jobs_started().count(b_job) == 5)
    assert len(runner.started) == 7  # and still only 2 of A's: its origin is at its cap

    runner.opened.set()
    await executor.drain()
    assert len(runner.started) == 25
    assert executor.backlog == 0


async def test_parked_fires_beyond_their_own_bound_count_against_the_backlog() -> None:
    store = MemoryStore()
    runner = Gate(held=lambda fire: True)
    executor, leaser = worker(store, runner, max_per_host=2, backlog_limit=8, parked_limit=4)
    await add_runs(store, "a", WebhookTarget(url=SLOW), 20)
    await lease_until_full(leaser)
    await runner.until(lambda: len(runner.started) == 2)
    await lease_until_full(leaser)
    # 2 running and 10 parked: 4 within the parked bound, 6 beyond it that count against
    # the backlog limit with the running ones (2 + 6 = 8). At most limit + bound are held.
    assert executor.backlog == 12
    assert executor.room() == 0
    runner.opened.set()
    await executor.drain()


async def test_a_tenant_s_tasks_hold_at_most_its_share_of_the_task_slots() -> None:
    store = MemoryStore()
    runner = Gate(held=lambda fire: fire.job_id.startswith("a"))
    executor, leaser = worker(store, runner, concurrency=4, tenant_share=0.5)
    task = TaskTarget(name="work")
    a_job = await add_runs(store, "a", task, 6)
    await lease_until_full(leaser)
    await runner.until(lambda: len(runner.started) == 2)
    b_job = await add_runs(store, "b", task, 3)
    await lease_until_full(leaser)
    await runner.until(lambda: runner.jobs_started().count(b_job) == 3)
    # A holds its share (2 of 4) however many of its tasks are due, and B's three run beside
    # it (the host cap is for webhooks only: tasks have no origin).
    assert runner.jobs_started().count(a_job) == 2
    runner.opened.set()
    await executor.drain()
    assert len(runner.started) == 9


async def test_a_waiting_first_attempt_starts_before_a_waiting_retry() -> None:
    store = MemoryStore()
    runner = Gate(held=lambda fire: fire.job_id == "blocker")
    # Hand-made fires, no jobs to read tenants from: an executor without `tenants`.
    config = ExecutorConfig(node_id="w1", webhook_concurrency=1)
    executor = Executor(store, ManualClock(T0), runner, config)

    def fire(job_id: str, attempt: int, late_s: int) -> Fire:
        return Fire(
            run_id=hash(job_id) % 10_000, job_id=job_id, key=job_id,
            scheduled_for=T0 - timedelta(seconds=late_s), fence_token=1, attempt=attempt,
            target=WebhookTarget(url=FAST), lease_until=T0 + timedelta(seconds=5),
        )  # fmt: skip

    executor.submit([fire("blocker", 1, 10)])
    await runner.until(lambda: len(runner.started) == 1)
    executor.submit([fire("retry", 3, 5), fire("late-first", 1, 1), fire("first", 1, 2)])
    runner.opened.set()
    await executor.drain()
    assert runner.jobs_started() == ["blocker", "first", "late-first", "retry"]


def test_the_default_limits_and_caps_turned_off() -> None:
    limits = ExecutorConfig(node_id="w1").limits()
    assert limits[Pool.WEBHOOK] == PoolLimits(slots=512, tenant_cap=256, host_cap=32)
    assert limits[Pool.TASK] == PoolLimits(slots=256, tenant_cap=128)
    off = ExecutorConfig(node_id="w1", max_per_host=0, tenant_share=1).limits()
    assert off[Pool.WEBHOOK] == PoolLimits(slots=512, tenant_cap=512, host_cap=None)


class RecordingStore(MemoryStore):
    """The memory store, noting which runs each outcome write carried."""

    def __init__(self) -> None:
        super().__init__()
        self.written: set[int] = set()
        self.wrote = asyncio.Event()

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        self.written.update(outcome.run_id for outcome in outcomes)
        self.wrote.set()
        return await super().finish_runs(outcomes)


async def test_outcomes_are_written_while_another_tenants_fires_stay_parked() -> None:
    # The write loop holds finished outcomes back while due fires wait to start (a herd goes
    # first), but only for a bounded time: tenant A's fires parked behind their origin's cap
    # for as long as its endpoint hangs must not keep B's finished run from being written.
    store = RecordingStore()
    runner = Gate(held=lambda fire: "slow" in str(fire.target))
    executor, leaser = worker(store, runner, max_per_host=2)
    await add_runs(store, "a", WebhookTarget(url=SLOW), 20)
    b_job = await add_runs(store, "b", WebhookTarget(url=FAST), 1)
    await lease_until_full(leaser)
    await runner.until(lambda: b_job in runner.jobs_started())
    b_run = next(fire.run_id for fire in runner.started if fire.job_id == b_job)

    stop = asyncio.Event()
    writing = asyncio.create_task(executor.run(stop))
    async with asyncio.timeout(5):
        while b_run not in store.written:
            store.wrote.clear()
            await store.wrote.wait()
    assert executor.backlog == 20  # A's fires: 2 running, 18 still parked
    runner.opened.set()
    stop.set()
    await writing
    assert executor.backlog == 0


async def test_at_the_unrecorded_limit_outcomes_are_written_at_once_even_during_a_hold() -> None:
    # A's fires stay parked behind their origin's cap, which would hold the write back, and the
    # flush interval is a minute: only the limit can make the write loop write B's outcomes
    # before the test's 5 s timeout. A worker that died now would run those bodies again.
    store = RecordingStore()
    runner = Gate(held=lambda fire: "slow" in str(fire.target))
    executor, leaser = worker(
        store, runner, max_per_host=2, flush_interval_ms=60_000, unrecorded_limit=5
    )
    await add_runs(store, "a", WebhookTarget(url=SLOW), 20)
    b_job = await add_runs(store, "b", WebhookTarget(url=FAST), 5)
    stop = asyncio.Event()
    writing = asyncio.create_task(executor.run(stop))
    await lease_until_full(leaser)
    await runner.until(lambda: len(store_fires(runner, b_job)) == 5)
    b_runs = {fire.run_id for fire in store_fires(runner, b_job)}
    async with asyncio.timeout(5):
        while not b_runs <= store.written:
            store.wrote.clear()
            await store.wrote.wait()
    assert store.written == b_runs  # A's held fires are still running or parked
    runner.opened.set()
    stop.set()
    await writing


def store_fires(runner: Gate, job_id: str) -> list[Fire]:
    return [fire for fire in runner.started if fire.job_id == job_id]


def test_the_unrecorded_limit_is_at_least_one() -> None:
    with pytest.raises(ValueError, match="unrecorded_limit"):
        ExecutorConfig(node_id="w1", unrecorded_limit=0)


class HeldWrites(RecordingStore):
    """Holds each outcome write until `release` is set, noting how many fires the runner had
    started and how many outcomes were written when the write began."""

    def __init__(self, runner: Gate) -> None:
        super().__init__()
        self.runner = runner
        self.release = asyncio.Event()
        self.began = asyncio.Event()
        self.at_writes: list[tuple[int, int]] = []  # (fires started, outcomes written before)

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        self.at_writes.append((len(self.runner.started), len(self.written)))
        self.began.set()
        await self.release.wait()
        return await super().finish_runs(outcomes)


async def test_fires_that_never_suspend_stop_at_the_hard_bound_of_unwritten_outcomes() -> None:
    # A runner whose fires finish without suspending goes from fire to fire without returning
    # to the loop: without ADR 0034's turn and bound it ran all 60 before the write loop could
    # take any, and a crash then would have repeated all 60.
    runner = Gate(held=lambda fire: False)
    store = HeldWrites(runner)
    # One runner: the turns it gives the write loop are then the only ones the loop gets.
    executor, leaser = worker(
        store, runner, flush_interval_ms=60_000, unrecorded_limit=5, concurrency=1
    )
    hard = UNRECORDED_HARD_FACTOR * 5
    job = await add_runs(store, "a", TaskTarget(name="noop"), 60)
    stop = asyncio.Event()
    writing = asyncio.create_task(executor.run(stop))
    await lease_until_full(leaser)
    async with asyncio.timeout(5):
        await store.began.wait()  # the write loop took a batch before the backlog ran
    await runner.until(lambda: len(runner.started) >= hard)
    for _ in range(100):  # the loop's turns: nothing more starts while the write is held
        await asyncio.sleep(0)
    assert len(runner.started) == hard
    assert store.at_writes[0][0] < hard  # the turns let the write loop take a batch early
    store.release.set()
    await runner.until(lambda: len(store_fires(runner, job)) == 60)
    async with asyncio.timeout(5):
        while len(store.written) < 60:
            store.wrote.clear()
            await store.wrote.wait()
    # Whenever a write began, at most the hard bound's worth had run unwritten.
    assert all(started - written <= hard for started, written in store.at_writes)
    assert len(store.at_writes) >= 60 // hard
    stop.set()
    await writing


@pytest.mark.parametrize("herd", [19, 40])
async def test_a_herd_that_fits_under_the_hard_bound_runs_whole_before_it_is_written(
    herd: int,
) -> None:
    # ADR 0034: at the unrecorded limit the write loop is told to write only when the fires
    # in hand would carry the unwritten past the hard bound. A herd that fits (19 here) runs
    # undisturbed by writes (the aligned load's p99) and is written in one batch after; a
    # larger one (40) is written while it runs, well before the bound stops its runner.
    runner = Gate(held=lambda fire: False)
    store = HeldWrites(runner)
    store.release.set()
    executor, leaser = worker(
        store, runner, flush_interval_ms=10, unrecorded_limit=5, concurrency=1
    )
    hard = UNRECORDED_HARD_FACTOR * 5
    await add_runs(store, "a", TaskTarget(name="noop"), herd)
    stop = asyncio.Event()
    writing = asyncio.create_task(executor.run(stop))
    await lease_until_full(leaser)
    async with asyncio.timeout(5):
        while len(store.written) < herd:
            store.wrote.clear()
            await store.wrote.wait()
    if herd <= hard:
        assert store.at_writes == [(herd, 0)]
    else:
        assert store.at_writes[0][0] < hard
    stop.set()
    await writing
