"""A lease_runs call that commits and then loses its reply costs the store leaser one round, not
a lease TTL: the next round takes back its own live leases (`take_back_own_leases`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Fire, RunOutcome, RunStatus
from tickwork.errors import StoreError
from tickwork.store.base import Applied, ClaimPlan
from tickwork.store.memory import MemoryStore
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOUR_MS = 3_600_000  # a lease TTL no test waits out: only the repair can bring the fire back


class LostLeaseReply(MemoryStore):
    """Fault injection: the next lease_runs call commits (when `commit`), then its reply is lost
    (StoreError), as when the connection drops between the commit and the answer. Then
    `take_back_down` take-back calls fail, as while the store is still unreachable."""

    def __init__(self, *, commit: bool = True, take_back_down: int = 0) -> None:
        super().__init__()
        self.commit = commit
        self.fail_next = True
        self.take_back_down = take_back_down
        self.lost: list[Fire] = []  # what the lost reply carried
        self.recorded = asyncio.Event()

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
        if not self.fail_next:
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
        self.fail_next = False
        if self.commit:
            self.lost = await super().lease_runs(
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
        raise StoreError("PostgreSQL error while leasing: connection lost")

    async def take_back_own_leases(
        self,
        *,
        owner: str,
        holding: Collection[int],
        now: datetime,
        lease_until: datetime,
        limit: int,
    ) -> list[Fire]:
        if self.take_back_down > 0:
            self.take_back_down -= 1
            raise StoreError("PostgreSQL error while taking back leases: connection refused")
        return await super().take_back_own_leases(
            owner=owner, holding=holding, now=now, lease_until=lease_until, limit=limit
        )

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        applied = await super().finish_runs(outcomes)
        self.recorded.set()
        return applied


class Runner:
    """Records every fire it is asked to run, and succeeds."""

    def __init__(self) -> None:
        self.ran: list[Fire] = []

    async def __call__(self, fire: Fire) -> Attempt:
        self.ran.append(fire)
        return Attempt(ok=True, http_status=200)


async def add_job(store: MemoryStore) -> Job:
    every = Schedule(trigger=EveryTrigger(interval_ms=HOUR_MS, anchor=T0))
    job = Job(
        id="a" * 32, name="j", schedule=every,
        target=WebhookTarget(url="http://127.0.0.1:9/"), state=JobState.SCHEDULED,
        next_run_at=T0, created_at=T0, updated_at=T0,
    )  # fmt: skip
    return await store.create_job(job)


def worker_for(store: MemoryStore, runner: Runner) -> tuple[Executor, StoreLeaser]:
    clock = ManualClock(T0)
    config = ExecutorConfig(node_id="w1", lease_ttl_ms=HOUR_MS, flush_interval_ms=1)
    executor = Executor(store, clock, runner, config)
    leases = LeaserConfig(node_id="w1", lease_ttl_ms=HOUR_MS, pause_ms=1)
    return executor, StoreLeaser(store, clock, executor, leases)


async def test_a_lease_whose_reply_was_lost_is_run_on_the_next_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store, runner = LostLeaseReply(), Runner()
    run = await store.add_manual_run((await add_job(store)).id, now=T0)  # leasable at once
    executor, leaser = worker_for(store, runner)
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="tickwork.leaser"):
        running = asyncio.gather(executor.run(stop), leaser.run(stop))
        # Without the repair the run stays leased to w1 for an hour: this times out.
        await asyncio.wait_for(store.recorded.wait(), 5)
        stop.set()
        await running

    [lost] = store.lost
    assert lost.run_id == run.id
    # Run once, at the fence the lost reply carried (the fence was not moved again) ...
    assert [(f.run_id, f.fence_token, f.attempt) for f in runner.ran] == [
        (run.id, lost.fence_token, lost.attempt)
    ]
    # ... and exactly one outcome recorded, which applied.
    attempts = await store.list_attempts(run.id)
    assert [(a.fence_token, a.status) for a in attempts] == [
        (lost.fence_token, RunStatus.SUCCEEDED)
    ]
    assert (await store.get_run(run.id)).status is RunStatus.SUCCEEDED
    # The outage is logged as before: one failure, one recovery.
    messages = [r.getMessage() for r in caplog.records if r.name == "tickwork.leaser"]
    assert messages.count("leasing from the store failed") == 1
    assert messages.count("store leases recovered") == 1


async def test_the_take_back_is_retried_until_the_store_answers() -> None:
    store, runner = LostLeaseReply(take_back_down=2), Runner()
    run = await store.add_manual_run((await add_job(store)).id, now=T0)
    executor, leaser = worker_for(store, runner)

    with pytest.raises(StoreError):  # the lease committed, its reply was lost
        await leaser.run_once()
    for _ in range(2):  # the store is still down: the take-back is owed until it answers
        with pytest.raises(StoreError, match="taking back"):
            await leaser.run_once()
    assert (await leaser.run_once()).taken_back == 1
    await executor.drain()
    assert (await leaser.run_once()).started == 0  # settled: nothing is taken back twice

    [lost] = store.lost
    assert [(f.run_id, f.fence_token) for f in runner.ran] == [(run.id, lost.fence_token)]
    assert len(await store.list_attempts(run.id)) == 1


async def test_a_run_the_scheduler_of_this_process_also_hands_over_runs_once() -> None:
    # The lease failed before its commit; meanwhile this process's scheduler claimed a run for
    # w1 and, its reply not yet in, has not handed it to the executor. The take-back finds the
    # run (leased to w1, live, not held), and the scheduler hands it over afterwards.
    store, runner = LostLeaseReply(commit=False), Runner()
    job = await add_job(store)
    executor, leaser = worker_for(store, runner)
    with pytest.raises(StoreError):
        await leaser.run_once()

    plan = ClaimPlan(
        job_id=job.id, expected_fence=0, expected_next_run_at=T0, scheduled_for=T0,
        coalesced=0, new_next_run_at=T0 + timedelta(hours=1),
    )  # fmt: skip
    claimed = await store.claim([plan], owner="w1", lease_until=T0 + timedelta(hours=1), now=T0)
    assert (await leaser.run_once()).taken_back == 1  # taken back before the dispatch
    executor.submit(claimed)  # the scheduler's dispatch, late
    await executor.drain()

    assert [(f.run_id, f.fence_token) for f in runner.ran] == [
        (claimed[0].run_id, claimed[0].fence_token)
    ]
    assert len(await store.list_attempts(claimed[0].run_id)) == 1
