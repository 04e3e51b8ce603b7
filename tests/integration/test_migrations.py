"""Migrations runner against real SQLite files and real PostgreSQL databases.

Concurrency is tested with real contention: several upgraders (tasks on separate engines, and
separate OS processes released together through a stdin barrier) race on one fresh database.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest

from tickwork.domain.egress import EgressRules, parse_rules
from tickwork.errors import InvalidInput, StoreError
from tickwork.settings import sqlite_path
from tickwork.store.migrate import MIGRATE_LOCK_KEY, VERSION_TABLE, current_revision, upgrade
from tickwork.store.postgres import PostgresStore
from tickwork.store.schema_head import HEAD_REVISION
from tickwork.store.sqlite import SqliteStore
from tickwork.testing import ThrowawayPostgres, free_port
from tickwork.webhooks import generate_secret

HEAD = HEAD_REVISION  # the newest migration (schema_head.py: bump it with every revision)
SCHEMA_TABLES = {
    "tw_jobs",
    "tw_runs",
    "tw_attempts",
    "tw_tenants",
    "tw_meta",
    "tw_partition_leases",
    "tw_nodes",
    "tw_api_keys",
    "tw_audit",
    VERSION_TABLE,
}
SCHEMA_INDEXES = {
    "tw_jobs_due",
    "tw_jobs_tenant_name",
    "tw_runs_job",
    "tw_runs_dead",
    "tw_attempts_run",
    "tw_attempts_finished",
    "tw_api_keys_tenant",
    "tw_audit_tenant",
    "tw_audit_at",
}
# A run's attempts as a reader sees them: tw_attempts and the succeeded runs (0019).
SCHEMA_VIEWS = {"tw_attempt_history"}
# The pending runs: found on tw_runs on SQLite, through a queue table on PostgreSQL (0017).
SQLITE_ONLY = {"tw_runs_pending", "tw_runs_finished"}
PG_ONLY = {"tw_queue", "tw_queue_lease", "tw_queue_guarded", "tw_runs_created"}
SQLITE_SCHEMA = SCHEMA_TABLES | SCHEMA_INDEXES | SCHEMA_VIEWS | SQLITE_ONLY
PG_SCHEMA = SCHEMA_TABLES | SCHEMA_INDEXES | SCHEMA_VIEWS | PG_ONLY

# Each child imports everything first, says "ready", and starts upgrading only on "go": the
# parent releases all of them at once, so they really race for the fresh database.
UPGRADER = """
import asyncio, sys
import sqlalchemy.dialects.postgresql.asyncpg, sqlalchemy.dialects.sqlite.aiosqlite
from tickwork.store.migrate import upgrade
print("ready", flush=True)
sys.stdin.readline()
print(asyncio.run(upgrade(sys.argv[1])), flush=True)
"""

GATHERER = """
import asyncio, sys
from tickwork.store.migrate import upgrade
async def main():
    for revision in await asyncio.gather(*(upgrade(url) for url in sys.argv[1:])):
        print(revision)
asyncio.run(main())
"""


# -- schema inspection (independent of the code under test) -------------------------------------


def sqlite_schema(url: str) -> dict[str, str]:
    """name -> SQL of every table, view and explicit index in the SQLite file behind `url`."""
    path = sqlite_path(url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
    return {name: sql for name, sql in rows}


def sqlite_versions(url: str) -> list[str]:
    path = sqlite_path(url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute(f"SELECT version_num FROM {VERSION_TABLE}")]


async def pg_schema(dsn: str) -> dict[str, str]:
    """name -> definition of every table, view and index in the public schema of `dsn`."""
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        views = await conn.fetch("SELECT viewname FROM pg_views WHERE schemaname = 'public'")
        indexes = await conn.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
        )
    finally:
        await conn.close()
    schema = {row["tablename"]: "table" for row in tables}
    schema.update({row["viewname"]: "view" for row in views})
    schema.update({row["indexname"]: row["indexdef"] for row in indexes})
    return schema


async def pg_versions(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return [r["version_num"] for r in await conn.fetch(f"SELECT * FROM {VERSION_TABLE}")]
    finally:
        await conn.close()


async def run_upgrader_processes(url: str, count: int) -> list[str]:
    """Start `count` processes that each run upgrade(url), release them together, return stdout."""
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            UPGRADER,
            url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(count)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line != b"ready\n":
                _, err = await proc.communicate()
                pytest.fail(f"upgrader did not start: {line!r} {err.decode()}")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
        results = await asyncio.wait_for(
            asyncio.gather(*(proc.communicate() for proc in procs)), 90
        )
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    outputs = []
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err.decode()
        outputs.append(out.decode().strip())
    return outputs


# -- SQLite -------------------------------------------------------------------------------------


async def test_sqlite_upgrade_creates_schema_and_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "not" / "yet" / "there" / "tickwork.db"
    url = f"sqlite:///{db}"
    assert await current_revision(url) is None
    assert not db.exists(), "current_revision must not create the database file"

    assert await upgrade(url) == HEAD
    assert await current_revision(url) == HEAD
    schema = sqlite_schema(url)
    assert schema.keys() >= SQLITE_SCHEMA
    assert not schema.keys() & PG_ONLY
    assert "WHERE state = 'scheduled'" in schema["tw_jobs_due"], "tw_jobs_due must be partial"
    assert "WHERE status = 'pending'" in schema["tw_runs_pending"]
    assert sqlite_versions(url) == [HEAD]

    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO tw_jobs (id, name, state, schedule_kind, misfire, misfire_grace_ms,"
            " target, created_us, updated_us) VALUES ('j1', 'n', 'scheduled', 'every', 'skip',"
            " 0, '{}', 1, 1)"
        )
    assert await upgrade(url) == HEAD
    assert sqlite_schema(url) == schema
    assert sqlite_versions(url) == [HEAD]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT id FROM tw_jobs").fetchall() == [("j1",)]


async def test_sqlite_concurrent_upgrades_in_one_process(sqlite_url: str) -> None:
    assert await asyncio.gather(*(upgrade(sqlite_url) for _ in range(4))) == [HEAD] * 4
    assert sqlite_versions(sqlite_url) == [HEAD]
    assert sqlite_schema(sqlite_url).keys() >= SQLITE_SCHEMA


async def test_concurrent_upgrades_of_different_databases_in_one_process(tmp_path: Path) -> None:
    """Alembic keeps `op`/`context` in module globals: runs in one process must not overlap, or
    one database's DDL lands on another's connection. Run in a child with a hard deadline: when
    this breaks it can hang rather than fail."""
    urls = [f"sqlite:///{tmp_path}/db{i}.db" for i in range(4)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        GATHERER,
        *urls,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        pytest.fail("concurrent upgrades of different databases hung")
    assert proc.returncode == 0, err.decode()
    assert out.decode().split() == [HEAD] * 4
    for url in urls:
        assert sqlite_versions(url) == [HEAD]
        assert sqlite_schema(url).keys() >= SQLITE_SCHEMA


async def test_sqlite_concurrent_upgrades_in_separate_processes(sqlite_url: str) -> None:
    assert await run_upgrader_processes(sqlite_url, 4) == [HEAD] * 4
    assert sqlite_versions(sqlite_url) == [HEAD]
    assert sqlite_schema(sqlite_url).keys() >= SQLITE_SCHEMA


async def test_sqlite_failed_migration_leaves_nothing_behind(sqlite_url: str) -> None:
    """The whole upgrade is one transaction: a failure half-way rolls every table back."""
    path = sqlite_path(sqlite_url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE tw_runs (x INTEGER)")  # 0001 fails on its last table
    with pytest.raises(StoreError, match="tw_runs"):
        await upgrade(sqlite_url)
    assert set(sqlite_schema(sqlite_url)) == {"tw_runs"}
    assert await current_revision(sqlite_url) is None


async def test_sqlite_0006_gives_every_tenant_in_use_a_row(sqlite_url: str) -> None:
    assert await upgrade(sqlite_url, "0005") == "0005"
    path = sqlite_path(sqlite_url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        for statement, params in BEFORE_0006:
            conn.execute(statement.replace("$", "?"), params)  # SQLite's ?NNN: $NNN
    started_us = time.time_ns() // 1000
    assert await upgrade(sqlite_url) == HEAD
    with sqlite3.connect(path) as conn:
        tenants = conn.execute(f"{TENANT_ROWS} ORDER BY tenant").fetchall()
        assert conn.execute("SELECT count(*) FROM tw_api_keys").fetchone() == (0,)
    assert_tenants_in_use(tenants, started_us)


# -- PostgreSQL ---------------------------------------------------------------------------------


async def test_pg_upgrade_creates_schema_and_is_idempotent(pg_dsn: str) -> None:
    assert await current_revision(pg_dsn) is None
    assert await upgrade(pg_dsn) == HEAD
    assert await current_revision(pg_dsn) == HEAD
    schema = await pg_schema(pg_dsn)
    assert schema.keys() >= PG_SCHEMA
    # No index of tw_runs names a column that a lease or an outcome changes (ADR 0030).
    assert not schema.keys() & (SQLITE_ONLY | {"tw_runs_active"})
    assert "WHERE (state = 'scheduled'::text)" in schema["tw_jobs_due"]
    assert await pg_versions(pg_dsn) == [HEAD]

    assert await upgrade(pg_dsn.replace("postgresql://", "postgres://", 1)) == HEAD
    assert await pg_schema(pg_dsn) == schema
    assert await pg_versions(pg_dsn) == [HEAD]


async def test_pg_concurrent_upgrades_on_separate_engines(pg_dsn: str) -> None:
    assert await asyncio.gather(*(upgrade(pg_dsn) for _ in range(4))) == [HEAD] * 4
    assert await pg_versions(pg_dsn) == [HEAD]
    assert (await pg_schema(pg_dsn)).keys() >= PG_SCHEMA


async def test_pg_concurrent_upgrades_in_separate_processes(pg_dsn: str) -> None:
    assert await run_upgrader_processes(pg_dsn, 4) == [HEAD] * 4
    assert await pg_versions(pg_dsn) == [HEAD]
    assert (await pg_schema(pg_dsn)).keys() >= PG_SCHEMA


async def test_pg_upgrade_waits_for_the_migration_lock(pg_dsn: str) -> None:
    """Deterministic check of the lock: while another session holds it, upgrade waits."""
    holder = await asyncpg.connect(pg_dsn)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATE_LOCK_KEY)
        task = asyncio.create_task(upgrade(pg_dsn))
        await _until(lambda: _advisory_lock_waiters(holder), "upgrade never queued on the lock")
        assert not task.done()
        assert await pg_schema(pg_dsn) == {}, "upgrade ran DDL without the lock"
        await holder.execute("SELECT pg_advisory_unlock($1)", MIGRATE_LOCK_KEY)
        assert await asyncio.wait_for(task, 30) == HEAD
    finally:
        await holder.close()
    assert await pg_versions(pg_dsn) == [HEAD]


async def test_pg_failed_migration_leaves_nothing_behind(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE TABLE tw_runs (x INTEGER)")
    finally:
        await conn.close()
    with pytest.raises(StoreError, match="tw_runs"):
        await upgrade(pg_dsn)
    assert set(await pg_schema(pg_dsn)) == {"tw_runs"}
    assert await current_revision(pg_dsn) is None


async def test_pg_0006_gives_every_tenant_in_use_a_row(pg_dsn: str) -> None:
    assert await upgrade(pg_dsn, "0005") == "0005"
    conn = await asyncpg.connect(pg_dsn)
    try:
        for statement, params in BEFORE_0006:
            await conn.execute(statement, *params)
        started_us = time.time_ns() // 1000
        assert await upgrade(pg_dsn) == HEAD
        rows = await conn.fetch(f'{TENANT_ROWS} ORDER BY tenant COLLATE "C"')
        assert await conn.fetchval("SELECT count(*) FROM tw_api_keys") == 0
    finally:
        await conn.close()
    assert_tenants_in_use([tuple(r) for r in rows], started_us)


async def _advisory_lock_waiters(conn: asyncpg.Connection) -> bool:
    waiting = await conn.fetchval(
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
        " WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = current_database()"
    )
    return bool(waiting)


async def _until(check: Callable[[], Awaitable[bool]], message: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(message)
        await asyncio.sleep(0.02)


# -- 0017: PostgreSQL's queue of pending runs -------------------------------------------------

# A database at 0016: one run of each kind the queue must know (ADR 0030).
_RUN_AT_0016 = (
    "INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,"
    " lease_owner, lease_until_us, created_us, guarded, planned_us)"
    " VALUES ('j1', $1, $2, 100, $3, $4, 1, $5, $6, 1, $7, $8)"
)
RUNS_AT_0016: list[tuple[object, ...]] = [
    # key, origin, status, attempt, owner, lease end, guarded, planned
    ("handed-off", "schedule", "pending", 0, None, 100, 0, None),  # in flight
    ("jittered", "schedule", "pending", 0, None, 150, 0, 150),  # in flight, at its plan
    ("leased", "schedule", "pending", 1, "w1", 5_000, 1, None),  # guarded: the job's id
    ("manual", "manual", "pending", 0, None, 100, 0, None),
    ("done", "schedule", "succeeded", 1, None, None, 1, None),  # no queue row
]


async def test_pg_0017_queues_every_pending_run_and_makes_their_updates_hot(pg_dsn: str) -> None:
    assert await upgrade(pg_dsn, "0016") == "0016"
    conn = await asyncpg.connect(pg_dsn)
    try:
        for run in RUNS_AT_0016:
            await conn.execute(_RUN_AT_0016, *run)
        assert await upgrade(pg_dsn) == HEAD
        queued = await conn.fetch(
            "SELECT r.key, q.lease_until_us, q.in_flight, q.guarded_job"
            " FROM tw_queue q JOIN tw_runs r ON r.id = q.run_id ORDER BY r.key"
        )
        options = await conn.fetchval("SELECT reloptions FROM pg_class WHERE relname = 'tw_runs'")
        # The invariant every lease relies on, as the store's own check states it; and that
        # check sees a queue row gone and one that disagrees.
        store = PostgresStore(pg_dsn, migrate=False)
        await store.open()
        try:
            holds = await store.queue_mismatches()
            ids = dict(await conn.fetch("SELECT key, id FROM tw_runs"))
            await conn.execute("DELETE FROM tw_queue WHERE run_id = $1", ids["manual"])
            flip = "UPDATE tw_queue SET in_flight = true WHERE run_id = $1"
            await conn.execute(flip, ids["leased"])
            broken = await store.queue_mismatches()
        finally:
            await store.close()
    finally:
        await conn.close()
    assert holds == []
    assert sorted(broken) == sorted([ids["manual"], ids["leased"]])
    assert [tuple(r) for r in queued] == [
        ("handed-off", 100, True, None),
        ("jittered", 150, True, None),
        ("leased", 5_000, False, "j1"),
        ("manual", 100, False, None),
    ]
    assert options == ["fillfactor=50"]


IDENTIFIERS = """
SELECT table_name || '.' || column_name, collation_name FROM information_schema.columns
WHERE table_schema = 'public' AND table_name = ANY($1::text[]) AND data_type = 'text'
  AND column_name = ANY($2::text[])
"""


async def test_pg_0018_compares_identifiers_byte_by_byte_and_keeps_them(pg_dsn: str) -> None:
    assert await upgrade(pg_dsn, "0017") == "0017"
    conn = await asyncpg.connect(pg_dsn)
    tables = ["tw_jobs", "tw_runs", "tw_queue", "tw_attempts", "tw_tenants", "tw_audit"]
    columns = ["id", "job_id", "key", "tenant", "name", "guarded_job", "actor_tenant", "status"]
    try:
        await conn.execute(_RUN_AT_0016, *RUNS_AT_0016[0])
        before = await conn.fetch("SELECT id, job_id, key FROM tw_runs")
        assert await upgrade(pg_dsn) == HEAD
        after = await conn.fetch("SELECT id, job_id, key FROM tw_runs")
        collations = dict(await conn.fetch(IDENTIFIERS, tables, columns))
        # The rebuilt key index still finds the run.
        found = await conn.fetchval("SELECT id FROM tw_runs WHERE key = $1", before[0]["key"])
    finally:
        await conn.close()
    assert [tuple(r) for r in after] == [tuple(r) for r in before]
    assert found == before[0]["id"]
    identifiers = {k: v for k, v in collations.items() if not k.endswith(".status")}
    assert len(identifiers) == 10
    assert set(identifiers.values()) == {"C"}
    assert collations["tw_runs.status"] is None  # other text keeps the database's collation


# -- 0006: every tenant in use gets a row -------------------------------------------------------

# A database at 0005: jobs of three tenants (one named twice), and one tenant with settings.
_JOB_AT_0005 = (
    "INSERT INTO tw_jobs (id, tenant, name, state, schedule_kind, misfire, misfire_grace_ms,"
    " target, created_us, updated_us) VALUES ($1, $2, 'n', 'scheduled', 'every', 'skip', 0,"
    " '{}', 1, 1)"
)
BEFORE_0006: list[tuple[str, tuple[object, ...]]] = [
    *(
        (_JOB_AT_0005, (f"j{n}", tenant))
        for n, tenant in enumerate(["acme", "globex", "acme", "default"])
    ),
    (
        "INSERT INTO tw_tenants (tenant, webhook_secrets, created_us, updated_us)"
        " VALUES ($1, $2, 5, 6)",
        ("acme", '["whsec_x"]'),
    ),
]
TENANT_ROWS = "SELECT tenant, webhook_secrets, created_us, updated_us FROM tw_tenants"


def assert_tenants_in_use(rows: list[tuple[object, ...]], started_us: int) -> None:
    """acme kept as it was; default and globex added once each, created at the upgrade."""
    assert [r[0] for r in rows] == ["acme", "default", "globex"]
    assert tuple(rows[0]) == ("acme", '["whsec_x"]', 5, 6)
    for tenant, secrets, created_us, updated_us in rows[1:]:
        assert secrets is None, tenant
        assert created_us == updated_us
        assert started_us <= created_us <= time.time_ns() // 1000  # type: ignore[operator]


# -- 0008: tenants' destination lists ----------------------------------------------------------


async def test_0008_leaves_every_tenant_without_lists_and_keeps_its_settings(
    sqlite_url: str, pg_dsn: str
) -> None:
    """A tenant from before 0008 reads back with no lists and its secrets, on both databases;
    and lists can be set on it afterwards."""
    secret = generate_secret()
    for url in (sqlite_url, pg_dsn):
        assert await upgrade(url, "0007") == "0007"
        insert = (
            "INSERT INTO tw_tenants (tenant, webhook_secrets, created_us, updated_us)"
            " VALUES ('acme', $1, 5, 6)"
        )
        path = sqlite_path(url)
        store: SqliteStore | PostgresStore
        if path is not None:
            store = SqliteStore(path)
            with sqlite3.connect(path) as conn:
                conn.execute(insert.replace("$1", "?"), (f'["{secret}"]',))
        else:
            store = PostgresStore(url)
            conn_pg = await asyncpg.connect(url)
            try:
                await conn_pg.execute(insert, f'["{secret}"]')
            finally:
                await conn_pg.close()
        assert await upgrade(url) == HEAD
        await store.open()
        try:
            found = await store.get_tenant("acme")
            assert found is not None
            assert (found.webhook_secrets, found.egress) == ((secret,), EgressRules())
            lists = parse_rules(["*.example.com"], [])
            assert (await store.set_tenant_egress("acme", lists, now=found.updated_at)).egress
        finally:
            await store.close()


# -- 0009: run policies --------------------------------------------------------------------------


async def test_jobs_from_before_the_overlap_policy_are_allow(sqlite_url: str, pg_dsn: str) -> None:
    """docs/policies.md: `allow` is the default for jobs created before the policy existed."""
    for url in (sqlite_url, pg_dsn):
        assert await upgrade(url, "0008") == "0008"
        path = sqlite_path(url)
        if path is not None:
            with sqlite3.connect(path) as conn:
                conn.execute(_JOB_AT_0005.replace("$", "?"), ("old", "acme"))
        else:
            conn_pg = await asyncpg.connect(url)
            try:
                await conn_pg.execute(_JOB_AT_0005, "old", "acme")
            finally:
                await conn_pg.close()
        assert await upgrade(url) == HEAD
        read = "SELECT overlap, max_runs, fired_count FROM tw_jobs WHERE id = 'old'"
        if path is not None:
            with sqlite3.connect(path) as conn:
                found = conn.execute(read).fetchone()
        else:
            conn_pg = await asyncpg.connect(url)
            try:
                found = tuple(await conn_pg.fetchrow(read))
            finally:
                await conn_pg.close()
        assert found == ("allow", None, 0), url


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["mysql://root@127.0.0.1/tickwork", "redis://127.0.0.1:6379/0", "tickwork.db", "sqlite://"],
)
async def test_unknown_url_form_is_invalid_input(url: str) -> None:
    for call in (upgrade, current_revision):
        with pytest.raises(InvalidInput) as caught:
            await call(url)
        assert caught.value.field == "database_url"
        assert "sqlite:///" in caught.value.message
        assert "postgresql://" in caught.value.message


async def test_unknown_target_revision_is_invalid_input(sqlite_url: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        await upgrade(sqlite_url, "9999")
    assert caught.value.field == "revision"
    assert await current_revision(sqlite_url) is None


async def test_database_from_a_newer_tickwork_is_refused(sqlite_url: str) -> None:
    await upgrade(sqlite_url)
    path = sqlite_path(sqlite_url)
    assert path is not None
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '0999'")
    with pytest.raises(StoreError, match="newer tickwork"):
        await upgrade(sqlite_url)


async def test_unreachable_postgres_is_store_error_quickly() -> None:
    port = free_port()  # nobody listens here
    url = f"postgresql://postgres:hunter2@127.0.0.1:{port}/tickwork"
    for call in (upgrade, current_revision):
        started = time.monotonic()
        with pytest.raises(StoreError) as caught:
            await call(url)
        assert time.monotonic() - started < 10
        message = str(caught.value)
        assert f"127.0.0.1:{port}" in message
        assert "hunter2" not in message
        assert "check" in message


async def test_unwritable_sqlite_location_is_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StoreError, match=str(blocker)):
        await upgrade(f"sqlite:///{blocker}/tickwork.db")


# -- ThrowawayPostgres --------------------------------------------------------------------------


async def test_throwaway_postgres_keeps_committed_data_through_a_crash(
    throwaway_pg: ThrowawayPostgres,
) -> None:
    dsn = throwaway_pg.dsn()
    assert await upgrade(dsn) == HEAD
    conn = await asyncpg.connect(dsn)
    await conn.execute("CREATE TABLE chaos (note TEXT)")
    await conn.execute("INSERT INTO chaos VALUES ('committed')")
    open_tx = conn.transaction()
    await open_tx.start()
    await conn.execute("INSERT INTO chaos VALUES ('in flight')")

    throwaway_pg.stop("immediate")
    with pytest.raises(ConnectionRefusedError):
        await asyncpg.connect(dsn, timeout=2)
    conn.terminate()

    throwaway_pg.start()
    conn = await asyncpg.connect(dsn)
    try:
        assert [r["note"] for r in await conn.fetch("SELECT note FROM chaos")] == ["committed"]
    finally:
        await conn.close()
    assert await current_revision(dsn) == HEAD


async def test_throwaway_postgres_cleans_up(throwaway_pg: ThrowawayPostgres) -> None:
    # The fixture proved clusters can start here; now check both ways of ending one.
    root, dsn = throwaway_pg.root, throwaway_pg.dsn()
    throwaway_pg.cleanup()
    assert not root.exists()
    with pytest.raises(ConnectionRefusedError):
        await asyncpg.connect(dsn, timeout=2)

    with ThrowawayPostgres() as pg:
        root, dsn = pg.root, pg.dsn()
        conn = await asyncpg.connect(dsn)
        assert await conn.fetchval("SHOW port") == str(pg.port)
        await conn.close()
    assert not root.exists()
    with pytest.raises(ConnectionRefusedError):
        await asyncpg.connect(dsn, timeout=2)


async def test_pg_url_query_parameters_reach_the_driver(pg_dsn: str) -> None:
    # A DSN with libpq-style parameters (here application_name) must migrate and open like a
    # bare one; SQLAlchemy once handed them to asyncpg.connect() as unknown keyword arguments.
    url = f"{pg_dsn}?application_name=tw-query-test"
    assert await upgrade(url) == HEAD
    store = PostgresStore(url)
    await store.open()
    try:
        conn = await asyncpg.connect(pg_dsn)
        try:
            names = await conn.fetch(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
            )
        finally:
            await conn.close()
    finally:
        await store.close()
    assert "tw-query-test" in {row["application_name"] for row in names}
