"""A run's successful last attempt lives on its own row, not in tw_attempts (ADR 0033), on both
SQL stores: what the tables hold, what a reader is shown, and what a downgrade writes back.

The tables are read directly (sqlite3, asyncpg), so each test checks what is really stored, not
only that the store still lists the same attempts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from alembic import command
from sqlalchemy import Connection, create_engine
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from tests.contract.store_helpers import SEC, T0, claim, make_job, outcome, plan_for
from tickwork.domain.runs import AttemptStatus, RunStatus
from tickwork.store.base import ScheduleStore
from tickwork.store.migrate import alembic_config, upgrade
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore


@pytest.fixture(params=["sqlite", "postgres"])
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database of each SQL store."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tickwork.db'}"
    return str(request.getfixturevalue("pg_dsn"))


def store_for(url: str) -> ScheduleStore:
    if url.startswith("sqlite:///"):
        return SqliteStore(Path(url.removeprefix("sqlite:///")))
    return PostgresStore(url)


@pytest.fixture
async def sql_store(sql_url: str) -> AsyncIterator[tuple[ScheduleStore, str]]:
    """An opened SQL store and the URL of its database."""
    store = store_for(sql_url)
    await store.open()
    try:
        yield store, sql_url
    finally:
        await store.close()


async def fetch(url: str, sql: str) -> list[tuple[Any, ...]]:
    """Rows of `sql` read straight from the database behind `url`."""
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    conn = await asyncpg.connect(url)
    try:
        return [tuple(r) for r in await conn.fetch(sql)]
    finally:
        await conn.close()


async def claimed_fire(store: ScheduleStore) -> Any:
    """The fire of one new job's first occurrence, claimed and leased (attempt 1)."""
    job = make_job(1)
    await store.create_job(job)
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])
    return fire


# (run, worker, status) of every row tw_attempts holds, oldest first.
STORED = "SELECT run_id, worker, status FROM tw_attempts ORDER BY id"


async def test_a_success_writes_no_attempt_row_and_is_listed_from_its_run(
    sql_store: tuple[ScheduleStore, str],
) -> None:
    store, url = sql_store
    fire = await claimed_fire(store)
    assert await store.finish_runs([outcome(fire)]) == 1

    assert await fetch(url, STORED) == []
    assert await fetch(url, f"SELECT finished_by FROM tw_runs WHERE id = {fire.run_id}") == [
        ("w1",)
    ]
    [attempt] = await store.list_attempts(fire.run_id)
    shown = (attempt.id, attempt.attempt, attempt.fence_token, attempt.worker, attempt.status)
    assert shown == (0, fire.attempt, fire.fence_token, "w1", AttemptStatus.SUCCEEDED)
    assert (attempt.started_at, attempt.finished_at, attempt.http_status, attempt.error) == (
        T0 + 0.003 * SEC,
        T0 + 0.040 * SEC,
        200,
        None,
    )


async def test_a_retry_is_stored_and_the_success_after_it_is_not(
    sql_store: tuple[ScheduleStore, str],
) -> None:
    store, url = sql_store
    fire = await claimed_fire(store)
    retry = outcome(fire, status=RunStatus.PENDING, retry_at=T0 + 30 * SEC)
    assert await store.finish_runs([retry]) == 1
    [again] = await store.lease_runs(
        now=T0 + 30 * SEC, owner="b", lease_until=T0 + 99 * SEC, limit=5
    )
    assert await store.finish_runs([outcome(again)]) == 1

    assert await fetch(url, STORED) == [(fire.run_id, "w1", "pending")]
    listed = [(a.attempt, a.status) for a in await store.list_attempts(fire.run_id)]
    assert listed == [(1, AttemptStatus.RETRIED), (2, AttemptStatus.SUCCEEDED)]


async def test_a_success_sharing_its_attempt_number_with_a_retry_is_listed_after_it(
    sql_store: tuple[ScheduleStore, str],
) -> None:
    # An outcome applied at the same fence as the retry before it (no lease between them)
    # keeps the attempt number: the success, shown from the run (id 0), must still come last.
    store, _ = sql_store
    fire = await claimed_fire(store)
    retry = outcome(fire, status=RunStatus.PENDING, retry_at=T0 + 30 * SEC)
    assert await store.finish_runs([retry]) == 1
    assert await store.finish_runs([outcome(fire)]) == 1
    listed = [(a.attempt, a.status) for a in await store.list_attempts(fire.run_id)]
    assert listed == [(1, AttemptStatus.RETRIED), (1, AttemptStatus.SUCCEEDED)]


async def test_a_dead_letter_keeps_its_failed_attempt_row(
    sql_store: tuple[ScheduleStore, str],
) -> None:
    store, url = sql_store
    fire = await claimed_fire(store)
    assert await store.finish_runs([outcome(fire, status=RunStatus.FAILED)]) == 1
    assert await fetch(url, STORED) == [(fire.run_id, "w1", "failed")]
    assert [a.status for a in await store.list_attempts(fire.run_id)] == [AttemptStatus.FAILED]


async def test_a_success_stored_before_0019_is_listed_once(
    sql_store: tuple[ScheduleStore, str],
) -> None:
    store, url = sql_store
    fire = await claimed_fire(store)
    assert await store.finish_runs([outcome(fire)]) == 1
    # What the outcome wrote before revision 0019: the same attempt as a row of its own.
    await execute(
        url,
        "INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us,"
        " finished_us, status, http_status, error)"
        f" SELECT id, job_id, attempt, fence_token, 'w-old', started_us, finished_us, status,"
        f" http_status, error FROM tw_runs WHERE id = {fire.run_id}",
    )
    [attempt] = await store.list_attempts(fire.run_id)
    assert (attempt.worker, attempt.status) == ("w-old", AttemptStatus.SUCCEEDED)
    assert attempt.id != 0


async def test_a_downgrade_writes_the_successes_back_into_tw_attempts(
    sql_store: tuple[ScheduleStore, str],
) -> None:
    store, url = sql_store
    fire = await claimed_fire(store)
    assert await store.finish_runs([outcome(fire)]) == 1

    await downgrade(url, "0018")
    assert await fetch(url, STORED) == [(fire.run_id, "w1", "succeeded")]
    # And up again: the row written back is the one listed, once (a store opened afresh: the
    # first one's prepared statements predate the schema change).
    assert await upgrade(url) == "0019"
    again = store_for(url)
    await again.open()
    try:
        [attempt] = await again.list_attempts(fire.run_id)
    finally:
        await again.close()
    assert (attempt.worker, attempt.status) == ("w1", AttemptStatus.SUCCEEDED)
    assert attempt.id != 0


async def execute(url: str, sql: str) -> None:
    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute(sql)
        return
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def downgrade(url: str, revision: str) -> None:
    """Alembic's downgrade on one connection in one transaction, as migrate.upgrade runs."""

    def run(conn: Connection) -> None:
        with conn.begin():
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, revision)

    if url.startswith("sqlite:///"):
        engine = create_engine(url, poolclass=NullPool)
        try:
            with engine.connect() as conn:
                run(conn)
        finally:
            engine.dispose()
        return
    pg = create_async_engine(
        url.replace("postgresql://", "postgresql+asyncpg://", 1), poolclass=NullPool
    )
    try:
        async with pg.connect() as conn:
            await conn.run_sync(run)
    finally:
        await pg.dispose()
