"""tw_attempts' daily partitions on a real PostgreSQL (ADR 0007), with an injected `now`.

Rows are located with `tableoid::regclass`, so each test checks which partition really holds
them, not only that the store still returns them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from alembic import command
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import RunOutcome, RunStatus
from tickwork.errors import NotFound
from tickwork.store.base import HistoryMaintenance
from tickwork.store.migrate import alembic_config, upgrade
from tickwork.store.postgres import PostgresStore

DAY = timedelta(days=1)
T0 = datetime(2026, 12, 2, 1, 30, tzinfo=UTC)  # partition tw_attempts_p20261202
RETENTION = timedelta(days=30)
COMING = [f"tw_attempts_p202612{d:02d}" for d in (2, 3, 4, 5)]


@pytest.fixture
async def store(pg_dsn: str) -> AsyncIterator[PostgresStore]:
    opened = PostgresStore(pg_dsn)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


async def finished_run(
    store: PostgresStore, name: str, finished_at: datetime, status: RunStatus
) -> int:
    """A manual run of a new job, leased and finished at `finished_at`; returns its id.

    PENDING: the attempt failed and is retried a year later. Every status but SUCCEEDED writes
    a row to tw_attempts; a success stays on its run (ADR 0033)."""
    job = Job(
        id=name,
        name=name,
        schedule=Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0)),
        target=WebhookTarget(url="http://127.0.0.1:9/"),
        state=JobState.PAUSED,
        next_run_at=None,
        created_at=T0,
        updated_at=T0,
    )
    await store.create_job(job)
    run = await store.add_manual_run(job.id, now=finished_at)
    [fire] = await store.lease_runs(
        now=finished_at, owner="w", lease_until=finished_at + DAY, limit=1
    )
    assert fire.run_id == run.id
    outcome = RunOutcome(
        run_id=fire.run_id,
        job_id=job.id,
        attempt=fire.attempt,
        fence_token=fire.fence_token,
        status=status,
        started_at=finished_at,
        finished_at=finished_at,
        retry_at=finished_at + 365 * DAY if status is RunStatus.PENDING else None,
    )
    assert await store.finish_runs([outcome]) == 1
    return run.id


async def where(dsn: str, run_id: int) -> list[str]:
    """The partitions holding the attempts of `run_id`."""
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(
            "SELECT tableoid::regclass::text AS p FROM tw_attempts WHERE run_id = $1", run_id
        )
    finally:
        await conn.close()
    return [r["p"] for r in found]


async def partitions(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'tw_attempts'::regclass ORDER BY c.relname"
        )
    finally:
        await conn.close()
    return [r["relname"] for r in found]


async def test_after_upgrade_attempts_are_partitioned_and_land_in_default(
    store: PostgresStore, pg_dsn: str
) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        kind = await conn.fetchval(
            "SELECT relkind::text FROM pg_class WHERE relname = 'tw_attempts'"
        )
        key = await conn.fetchval(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = 'tw_attempts'::regclass AND contype = 'p'"
        )
    finally:
        await conn.close()
    assert kind == "p"
    assert key == "PRIMARY KEY (id, finished_us)"
    assert await partitions(pg_dsn) == ["tw_attempts_default"]
    run_id = await finished_run(store, "no-partition-yet", T0, RunStatus.PENDING)
    assert await where(pg_dsn, run_id) == ["tw_attempts_default"]
    assert [a.run_id for a in await store.list_attempts(run_id)] == [run_id]


async def test_maintenance_creates_the_coming_days_and_moves_default_rows_in(
    store: PostgresStore, pg_dsn: str
) -> None:
    early = await finished_run(store, "early", T0, RunStatus.PENDING)
    later = await finished_run(store, "later", T0 + 2 * DAY, RunStatus.PENDING)
    stray = await finished_run(store, "stray", T0 - 3 * DAY, RunStatus.PENDING)
    done = await store.maintain_history(now=T0, retention=RETENTION)
    assert list(done.created) == COMING
    assert done.dropped == ()
    assert await partitions(pg_dsn) == ["tw_attempts_default", *COMING]
    assert await where(pg_dsn, early) == ["tw_attempts_p20261202"]
    assert await where(pg_dsn, later) == ["tw_attempts_p20261204"]
    assert await where(pg_dsn, stray) == ["tw_attempts_default"]  # no partition for that day
    # New attempts route to their day; the history reads the same as before.
    today = await finished_run(store, "today", T0 + timedelta(hours=20), RunStatus.PENDING)
    assert await where(pg_dsn, today) == ["tw_attempts_p20261202"]
    assert [a.run_id for a in await store.list_attempts(early)] == [early]
    # Nothing left to do the same day; the next day brings one more partition.
    same_day = await store.maintain_history(now=T0 + timedelta(hours=22), retention=RETENTION)
    assert same_day == HistoryMaintenance()
    next_day = await store.maintain_history(now=T0 + DAY, retention=RETENTION)
    assert next_day.created == ("tw_attempts_p20261206",)


async def test_an_expired_partition_is_dropped_but_dead_letters_keep_their_attempts(
    store: PostgresStore, pg_dsn: str
) -> None:
    await store.maintain_history(now=T0, retention=RETENTION)
    ok = await finished_run(store, "ok", T0, RunStatus.SUCCEEDED)
    retried = await finished_run(store, "retried", T0, RunStatus.PENDING)
    dead = await finished_run(store, "dead", T0, RunStatus.FAILED)
    young = await finished_run(store, "young", T0 + DAY, RunStatus.PENDING)
    assert await where(pg_dsn, retried) == ["tw_attempts_p20261202"]
    assert await where(pg_dsn, dead) == ["tw_attempts_p20261202"]
    assert await where(pg_dsn, ok) == []  # a success stays on its run (ADR 0033)

    # 30 days after Dec 2 ends: that whole day is past the retention, Dec 3 is not.
    now = datetime(2027, 1, 2, 0, 0, tzinfo=UTC)
    done = await store.maintain_history(now=now, retention=RETENTION)
    assert done.dropped == ("tw_attempts_p20261202",)
    assert done.kept_attempts == 1
    assert "tw_attempts_p20261202" not in await partitions(pg_dsn)
    assert await store.list_attempts(retried) == []
    # ok's success lives as long as its run, which the batched delete below takes.
    assert [a.status for a in await store.list_attempts(ok)] == [RunStatus.SUCCEEDED]
    assert await where(pg_dsn, dead) == ["tw_attempts_default"]
    [attempt] = await store.list_attempts(dead)
    assert (attempt.status, attempt.finished_at) == (RunStatus.FAILED, T0)
    assert await where(pg_dsn, young) == ["tw_attempts_p20261203"]

    # The batched delete takes ok's run but not the dead letter's kept attempt, nor the
    # retried run, which is still pending.
    assert await store.prune_history(finished_before=now - RETENTION, limit=100) == 1
    with pytest.raises(NotFound):
        await store.list_attempts(ok)
    assert [r.id for r in await store.list_dead_letters()] == [dead]
    assert len(await store.list_attempts(dead)) == 1
    # Purged, the dead letter is ordinary history: DEFAULT's batched delete takes it all.
    assert await store.purge_dead_letters([dead]) == 1
    assert await store.prune_history(finished_before=now - RETENTION, limit=100) == 2
    assert await where(pg_dsn, dead) == []


async def test_concurrent_maintenance_calls_do_not_fail(pg_dsn: str) -> None:
    stores = [PostgresStore(pg_dsn) for _ in range(3)]
    for one in stores:
        await one.open()
    try:
        await finished_run(stores[0], "waiting-in-default", T0, RunStatus.PENDING)
        results = await asyncio.gather(
            *(one.maintain_history(now=T0, retention=RETENTION) for one in stores for _ in (1, 2))
        )
        again = await stores[0].maintain_history(now=T0, retention=RETENTION)
    finally:
        for one in stores:
            await one.close()
    # One call won the lock and created all four (moving the DEFAULT row); the others skipped
    # while it held the lock or found nothing left to do after it.
    assert [list(r.created) for r in results if r.created] == [COMING]
    assert again.created == ()
    assert await partitions(pg_dsn) == ["tw_attempts_default", *COMING]


# -- migration 0004 with data -------------------------------------------------------------------

ATTEMPT = (
    "INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us,"
    " finished_us, status) VALUES ($1, 'j', 1, 1, 'w', $2, $2, 'succeeded') RETURNING id"
)


async def downgrade(dsn: str, revision: str) -> None:
    """Alembic's downgrade on one connection in one transaction, as migrate.upgrade runs."""
    engine = create_async_engine(
        dsn.replace("postgresql://", "postgresql+asyncpg://", 1), poolclass=NullPool
    )

    def run(conn: Connection) -> None:
        with conn.begin():
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, revision)

    try:
        async with engine.connect() as conn:
            await conn.run_sync(run)
    finally:
        await engine.dispose()


async def test_upgrade_and_downgrade_keep_the_rows_and_the_id_sequence(pg_dsn: str) -> None:
    assert await upgrade(pg_dsn, "0003") == "0003"
    conn = await asyncpg.connect(pg_dsn)
    try:
        before = [await conn.fetchval(ATTEMPT, n, 1_000 + n) for n in range(3)]
        assert await upgrade(pg_dsn, "0004") == "0004"
        rows = await conn.fetch("SELECT id, run_id, tableoid::regclass::text AS p FROM tw_attempts")
        assert sorted(r["id"] for r in rows) == before
        assert {r["p"] for r in rows} == {"tw_attempts_default"}
        after_upgrade = await conn.fetchval(ATTEMPT, 9, 2_000)
        assert after_upgrade > max(before)  # the identity continued, no collision

        await downgrade(pg_dsn, "0003")
        kind = await conn.fetchval(
            "SELECT relkind::text FROM pg_class WHERE relname = 'tw_attempts'"
        )
        assert kind == "r"
        ids = sorted(r["id"] for r in await conn.fetch("SELECT id FROM tw_attempts"))
        assert ids == [*before, after_upgrade]
        assert await conn.fetchval(ATTEMPT, 10, 3_000) > after_upgrade
        indexes = {r["indexname"] for r in await conn.fetch("SELECT indexname FROM pg_indexes")}
        assert {"tw_attempts_pkey", "tw_attempts_run", "tw_attempts_finished"} <= indexes
    finally:
        await conn.close()
