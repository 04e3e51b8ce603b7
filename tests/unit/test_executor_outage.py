"""While the store is down the executor backs off and logs one traceback, not fifty a second."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import SystemClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Fire, RunOutcome
from tickwork.errors import StoreError
from tickwork.store.base import Applied, ClaimPlan
from tickwork.store.memory import MemoryStore
from tickwork.timing.outage import outage_pause_s
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig


class DownThenUp(MemoryStore):
    """The memory store whose outcome writes fail `down` times, as during a database outage."""

    def __init__(self, down: int) -> None:
        super().__init__()
        self.down = down
        self.recorded = asyncio.Event()

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        if self.down > 0:
            self.down -= 1
            raise StoreError("PostgreSQL error while recording runs: connection refused")
        applied = await super().finish_runs(outcomes)
        self.recorded.set()
        return applied


async def one_fire(store: MemoryStore) -> Fire:
    now = datetime.now(UTC) - timedelta(seconds=1)
    every = Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=now))
    job = Job(
        id="a" * 32, name="j", schedule=every,
        target=WebhookTarget(url="http://127.0.0.1:9/"), state=JobState.SCHEDULED,
        next_run_at=now, created_at=now, updated_at=now,
    )  # fmt: skip
    await store.create_job(job)
    plan = ClaimPlan(
        job_id=job.id, expected_fence=0, expected_next_run_at=now, scheduled_for=now,
        coalesced=0, new_next_run_at=now + timedelta(minutes=1),
    )  # fmt: skip
    [fire] = await store.claim([plan], owner="w", lease_until=now + timedelta(minutes=1), now=now)
    return fire


async def succeed(_fire: Fire) -> Attempt:
    return Attempt(ok=True, http_status=200)


def test_the_pause_doubles_from_50_ms_to_one_second() -> None:
    assert [outage_pause_s(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


async def test_an_outage_is_logged_once_and_its_end_once(caplog: pytest.LogCaptureFixture) -> None:
    store = DownThenUp(down=5)
    executor = Executor(store, SystemClock(), succeed, ExecutorConfig(node_id="w"))
    executor.submit([await one_fire(store)])
    stop = asyncio.Event()
    with caplog.at_level(logging.INFO, logger="tickwork.executor"):
        running = asyncio.create_task(executor.run(stop))
        await asyncio.wait_for(store.recorded.wait(), 10)
        stop.set()
        await running
    messages = [r.getMessage() for r in caplog.records if r.name == "tickwork.executor"]
    assert messages.count("executor housekeeping failed") == 1
    assert messages.count("executor housekeeping recovered") == 1
    assert store.down == 0  # every failed round was retried until the outcome was recorded
