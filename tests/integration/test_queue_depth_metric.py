"""`tickwork_queue_depth` on a running worker's /metrics (table queue on PostgreSQL).

Runs are made to wait the way they wait in production, for a worker that cannot take them yet:
the test holds their rows locked, so the worker's `FOR UPDATE SKIP LOCKED` lease passes them
over while the depth (a plain count) still sees them. Releasing the rows lets the worker run
them, and the depth falls back to 0.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from tickwork.domain.jobs import AtTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.store.base import ClaimPlan
from tickwork.store.postgres import PostgresStore, asyncpg_dsn

from ..support.proc import UpProcess
from ..support.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

DEPTH = re.compile(r"^tickwork_queue_depth (\S+)$", re.MULTILINE)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


async def queue_depth(proc: UpProcess) -> float:
    found = DEPTH.search((await proc.call("GET", "/metrics")).text)
    assert found is not None, "tickwork_queue_depth missing from /metrics"
    return float(found.group(1))


async def depth_reaches(proc: UpProcess, expected: float, timeout_s: float = 15.0) -> float:
    """Poll the remote gauge (another process: there is no event to await) until it reads
    `expected`; returns the last reading."""
    depth = await queue_depth(proc)
    async with asyncio.timeout(timeout_s):
        while depth != expected:
            await asyncio.sleep(0.05)
            depth = await queue_depth(proc)
    return depth


async def hand_off(store: PostgresStore, url: str, count: int, due: datetime) -> None:
    """What a scheduler process does: claim `count` one-shots, leaving their runs to workers."""
    plans = []
    for n in range(count):
        job = Job(
            id=f"{n + 1:032x}",
            name=f"d{n}",
            schedule=Schedule(trigger=AtTrigger(at=due)),
            target=WebhookTarget(url=url, method="POST"),
            state=JobState.SCHEDULED,
            next_run_at=due,
            created_at=due,
            updated_at=due,
        )
        await store.create_job(job)
        plans.append(
            ClaimPlan(
                job_id=job.id,
                expected_fence=0,
                expected_next_run_at=due,
                scheduled_for=due,
                coalesced=0,
                new_next_run_at=None,
            )
        )
    handed_off = await store.claim_hand_off(plans, owner="sched", now=due)
    assert len(handed_off) == count


async def test_a_workers_metrics_show_the_queue_depth_rise_and_fall_back(
    pg_dsn: str, receiver: Receiver
) -> None:
    store = PostgresStore(pg_dsn)
    await store.open()
    worker = await UpProcess(
        pg_dsn, command="worker", extra_env={"TICKWORK_METRICS_INTERVAL_MS": "100"}
    ).start()
    holder = await asyncpg.connect(asyncpg_dsn(pg_dsn))
    try:
        assert await depth_reaches(worker, 0) == 0
        due = datetime.now(UTC) + timedelta(seconds=2)  # time to lock the rows before they are due
        await hand_off(store, receiver.url("/due"), 3, due)
        hold = holder.transaction()
        await hold.start()
        locked = await holder.fetch("SELECT id FROM tw_runs WHERE status = 'pending' FOR UPDATE")
        assert len(locked) == 3

        assert await depth_reaches(worker, 3) == 3  # due, and no worker can take them
        assert receiver.for_path("/due") == []

        await hold.rollback()
        await receiver.wait_for("/due", 3)
        assert await depth_reaches(worker, 0) == 0
    finally:
        await holder.close()
        await worker.stop()
        await store.close()
