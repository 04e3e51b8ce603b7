"""Shared fixtures: real services, skipped locally when missing, failed when CI requires them.

TICKWORK_TEST_REQUIRE is a comma list of services that must be available (`postgres`, `redis`,
`nats`, ... or `all`); .ci/run sets it so that green means tested. A test asks for a service
through `unavailable(service, reason)`, which skips with a one-line reason or fails if required.

Fixtures:
    required_services   frozenset[str] of required names ("all" stands for every service)
    pg_admin_dsn        the shared server's admin DSN, checked reachable once per session
    pg_dsn              a fresh, empty database on it per test (dropped at teardown)
    sqlite_url          sqlite:///<tmp_path>/tickwork.db
    throwaway_pg        a private PostgreSQL cluster per test (tickwork.testing.ThrowawayPostgres)
    throwaway_nats      a private nats-server -js for the session (tickwork.testing.ThrowawayNats)
    throwaway_redis     a private redis-server for the session (tickwork.testing.ThrowawayRedis)
    restartable_nats    the same, but per test: for tests that stop, kill or restart the server
    restartable_redis
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tickwork.testing import ServiceUnavailable, ThrowawayNats, ThrowawayPostgres, ThrowawayRedis

DEFAULT_PG_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
REACHABILITY_TIMEOUT_S = 2.0
TEST_DB_PREFIX = "tw_test_"


# -- required services --------------------------------------------------------------------------


def required_services() -> frozenset[str]:
    raw = os.environ.get("TICKWORK_TEST_REQUIRE", "")
    return frozenset(part.strip().lower() for part in raw.split(",") if part.strip())


def is_required(service: str) -> bool:
    required = required_services()
    return "all" in required or service.lower() in required


def unavailable(service: str, reason: str) -> NoReturn:
    """Skip (locally) or fail (service listed in TICKWORK_TEST_REQUIRE) with a one-line reason."""
    line = " ".join(f"{service} unavailable: {reason}".split())
    if is_required(service):
        pytest.fail(f"{line} (required by TICKWORK_TEST_REQUIRE)", pytrace=False)
    pytest.skip(line)


@pytest.fixture(scope="session", name="required_services")
def required_services_fixture() -> frozenset[str]:
    return required_services()


# -- PostgreSQL on the shared server ------------------------------------------------------------


async def pg_unreachable_reason(dsn: str, timeout_s: float = REACHABILITY_TIMEOUT_S) -> str | None:
    """None if `dsn` accepts a connection and a query within `timeout_s`, else why not."""
    try:
        conn = await asyncpg.connect(dsn, timeout=timeout_s)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        return f"{_hide_password(dsn)}: {type(exc).__name__}: {exc}"
    try:
        await asyncio.wait_for(conn.fetchval("SELECT 1"), timeout_s)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        return f"{_hide_password(dsn)}: {type(exc).__name__}: {exc}"
    finally:
        await conn.close(timeout=timeout_s)
    return None


def pg_unreachable_reason_sync(dsn: str, timeout_s: float = REACHABILITY_TIMEOUT_S) -> str | None:
    """The same check from synchronous code; runs its own loop in a thread, away from the test's."""
    result: list[str | None] = []

    def check() -> None:
        result.append(asyncio.run(pg_unreachable_reason(dsn, timeout_s)))

    thread = threading.Thread(target=check, name="pg-reachability")
    thread.start()
    thread.join()
    return result[0] if result else f"{_hide_password(dsn)}: the reachability check crashed"


@pytest.fixture(scope="session")
def pg_admin_dsn() -> str:
    """Admin DSN of the shared server (TICKWORK_TEST_PG_DSN), checked once per session."""
    dsn = os.environ.get("TICKWORK_TEST_PG_DSN", DEFAULT_PG_ADMIN_DSN)
    reason = pg_unreachable_reason_sync(dsn)
    if reason is not None:
        unavailable("postgres", reason)
    return dsn


@pytest.fixture
async def pg_dsn(pg_admin_dsn: str) -> AsyncIterator[str]:
    """A fresh, empty database per test: `postgresql://.../tw_test_<random>`, dropped afterwards."""
    name = f"{TEST_DB_PREFIX}{secrets.token_hex(6)}"
    admin = await asyncpg.connect(pg_admin_dsn, timeout=REACHABILITY_TIMEOUT_S)
    try:
        # template0: independent of whatever someone put into template1 on the shared server.
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    finally:
        await admin.close()
    try:
        yield _with_database(pg_admin_dsn, name)
    finally:
        await drop_test_database(pg_admin_dsn, name)


async def drop_test_database(admin_dsn: str, name: str) -> None:
    """Terminate leftover sessions (a test's pools, killed subprocesses), then drop."""
    admin = await asyncpg.connect(admin_dsn, timeout=10)
    try:
        await admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
        # FORCE as well: a session that connected between the two statements cannot block us.
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def _with_database(dsn: str, database: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


def _hide_password(dsn: str) -> str:
    parts = urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# -- SQLite and private servers -----------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/tickwork.db"


@pytest.fixture
def throwaway_pg() -> Iterator[ThrowawayPostgres]:
    """A private PostgreSQL cluster for tests that crash or restart the server."""
    try:
        pg = ThrowawayPostgres()
    except ServiceUnavailable as exc:
        unavailable("postgres", f"no throwaway cluster: {exc}".splitlines()[0])
    try:
        pg.start()
    except ServiceUnavailable as exc:
        pg.cleanup()
        unavailable("postgres", f"throwaway cluster did not start: {exc}".splitlines()[0])
    try:
        yield pg
    finally:
        pg.cleanup()


# -- private NATS and Redis servers (never the machine's shared 4222 / 6379) --------------------


def start_throwaway_nats() -> ThrowawayNats:
    """A started ThrowawayNats, or skip/fail (TICKWORK_TEST_REQUIRE=nats) with the reason."""
    try:
        server = ThrowawayNats()
    except ServiceUnavailable as exc:
        unavailable("nats", str(exc).splitlines()[0])
    try:
        server.start()
    except ServiceUnavailable as exc:
        server.cleanup()
        unavailable("nats", f"throwaway nats-server did not start: {exc}".splitlines()[0])
    return server


def start_throwaway_redis() -> ThrowawayRedis:
    """A started ThrowawayRedis, or skip/fail (TICKWORK_TEST_REQUIRE=redis) with the reason."""
    try:
        server = ThrowawayRedis()
    except ServiceUnavailable as exc:
        unavailable("redis", str(exc).splitlines()[0])
    try:
        server.start()
    except ServiceUnavailable as exc:
        server.cleanup()
        unavailable("redis", f"throwaway redis-server did not start: {exc}".splitlines()[0])
    return server


@pytest.fixture(scope="session")
def throwaway_nats() -> Iterator[ThrowawayNats]:
    """One private nats-server -js for the session; tests isolate by unique stream names."""
    server = start_throwaway_nats()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def throwaway_redis() -> Iterator[ThrowawayRedis]:
    """One private redis-server for the session; tests isolate by unique key names."""
    server = start_throwaway_redis()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def restartable_nats() -> Iterator[ThrowawayNats]:
    """A private nats-server for one test that stops, kills or restarts it."""
    server = start_throwaway_nats()
    try:
        yield server
    finally:
        server.cleanup()


@pytest.fixture
def restartable_redis() -> Iterator[ThrowawayRedis]:
    """A private redis-server for one test that stops, kills or restarts it."""
    server = start_throwaway_redis()
    try:
        yield server
    finally:
        server.cleanup()


# -- secrets never logged -----------------------------------------------------------------------

CANARY_PREFIX = "tw-canary-"


class CanaryWatch(logging.Handler):
    """Every log record of the whole session that contains a test secret (a `tw-canary-...`
    value, used by the secrets tests): tickwork must never log one, so any is a failure."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += repr(record.exc_info[1])
        if CANARY_PREFIX in text:
            self.hits.append(f"{record.name}: {text[:300]}")


_CANARY_WATCH = CanaryWatch()


def pytest_sessionstart(session: pytest.Session) -> None:
    logging.getLogger().addHandler(_CANARY_WATCH)
    tickwork_logs = logging.getLogger("tickwork")
    if tickwork_logs.level == logging.NOTSET or tickwork_logs.level > logging.INFO:
        tickwork_logs.setLevel(logging.INFO)  # so the watch sees tickwork's info records too


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _CANARY_WATCH.hits:
        print("\nsecrets were logged:\n  " + "\n  ".join(_CANARY_WATCH.hits[:20]))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
