"""The scheduler sleeps until the next due job and is woken by writes, not a blind poll."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tickwork.clock import SystemClock
from tickwork.domain.jobs import AtTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.base import ScheduleStore
from tickwork.store.memory import MemoryStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore


def one_shot(at: datetime) -> Job:
    now = datetime.now(UTC)
    return Job(
        id="0" * 31 + "1",
        name="soon",
        schedule=Schedule(trigger=AtTrigger(at=at)),
        target=WebhookTarget(url="http://127.0.0.1:9/"),
        state=JobState.SCHEDULED,
        next_run_at=at,
        created_at=now,
        updated_at=now,
    )


async def fire_latency_after_create(writer: ScheduleStore, reader: ScheduleStore) -> timedelta:
    """Start a scheduler on `reader` that would idle for a minute, create a job due in 200 ms
    through `writer`, and return how late its fire was dispatched."""
    dispatched: asyncio.Future[Fire] = asyncio.get_running_loop().create_future()

    def dispatch(fires: Sequence[Fire]) -> None:
        if not dispatched.done():
            dispatched.set_result(fires[0])

    config = SchedulerConfig(node_id="t", lookahead_ms=0, max_idle_ms=60_000)
    service = SchedulerService(reader, SystemClock(), config, dispatch)
    stop = asyncio.Event()
    loop = asyncio.create_task(service.run(stop))
    try:
        await asyncio.sleep(0.2)  # let the scheduler find nothing and go to sleep
        at = datetime.now(UTC) + timedelta(milliseconds=200)
        await writer.create_job(one_shot(at))
        fire = await asyncio.wait_for(dispatched, timeout=10)
        return datetime.now(UTC) - fire.scheduled_for
    finally:
        stop.set()
        await loop


async def test_in_process_write_wakes_the_scheduler(tmp_path: Path) -> None:
    for store in (MemoryStore(), SqliteStore(tmp_path / "w.db")):
        await store.open()
        try:
            late = await fire_latency_after_create(store, store)
        finally:
            await store.close()
        assert late < timedelta(seconds=2), f"{type(store).__name__}: woke {late} late"


@pytest.mark.postgres
async def test_notify_from_another_process_wakes_the_scheduler(pg_dsn: str) -> None:
    api_side, scheduler_side = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    await api_side.open()
    await scheduler_side.open()
    try:
        late = await fire_latency_after_create(api_side, scheduler_side)
    finally:
        await api_side.close()
        await scheduler_side.close()
    assert late < timedelta(seconds=2), f"woke {late} late: LISTEN/NOTIFY did not reach it"
