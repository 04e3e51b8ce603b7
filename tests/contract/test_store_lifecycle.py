"""The ScheduleStore contract, part StoreLifecycle: ping and change notification.

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py.
"""

from __future__ import annotations

import asyncio

from tickwork.store.base import ScheduleStore

from .store_helpers import (
    T0,
    make_job,
)


async def test_watchers_are_told_about_changes(store: ScheduleStore) -> None:
    jobs_changed = store.watch("jobs")
    runs_changed = store.watch("runs")
    job = make_job(1)
    await store.create_job(job)
    await asyncio.wait_for(jobs_changed.wait(), 5)
    await store.add_manual_run(job.id, now=T0)
    await asyncio.wait_for(runs_changed.wait(), 5)


async def test_ping_answers_on_an_open_store(store: ScheduleStore) -> None:
    await store.ping()
