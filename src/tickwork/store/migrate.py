"""Bring a tickwork database's schema up to date: Alembic, configured in code (no alembic.ini).

    upgrade(url, revision="head") -> str      the revision current afterwards
    current_revision(url) -> str | None       None for a database tickwork never migrated

`url` is the user's form (`sqlite:///PATH`, `postgresql://...`, `postgres://...`); it is mapped
to the async SQLAlchemy drivers here. Every service may run `upgrade` on start while an operator
runs `tickwork db upgrade`, so concurrent upgrades are safe on both dialects:

- PostgreSQL: the whole migration is one transaction (PostgreSQL DDL is transactional) whose
  first statement is `pg_advisory_xact_lock(MIGRATE_LOCK_KEY)`. A second upgrader blocks on the
  lock until the first commits, then reads the version table afresh and finds itself at head.
  The lock is released by the commit, the rollback, or the server when the connection dies.
- SQLite: the whole migration is one `BEGIN EXCLUSIVE` transaction (SQLite DDL is transactional
  too). Chosen over an fcntl lock file beside the database because (1) it is SQLite's own write
  lock, so it also keeps running tickwork processes from writing mid-migration, not only other
  migrators; (2) a crash mid-migration rolls back to the old schema instead of leaving half a new
  one; (3) there is no extra file to create, clean up or get wrong on a shared mount. A second
  upgrader waits in SQLite's busy handler (up to SQLITE_BUSY_TIMEOUT_S) and then, holding the
  lock, reads the version the first one committed.

Within one process, runs are serialized as well: Alembic keeps `op` and `context` in module
globals, so two overlapping runs (two tasks, even on different databases) would send one run's
DDL down the other's connection and hang or corrupt both.

Driver and connection errors leave this module as `StoreError` naming the URL (password hidden)
and what to check; a URL of an unknown form is `InvalidInput(field="database_url")`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import asyncpg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import Connection, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from tickwork.domain.partitions import check_partitions
from tickwork.errors import InvalidInput, StoreError, TickworkError
from tickwork.store.schema_head import VERSION_TABLE
from tickwork.store.sqlite.connection import create_private

__all__ = [
    "MIGRATE_LOCK_KEY",
    "MIGRATIONS_DIR",
    "VERSION_TABLE",
    "alembic_config",
    "current_revision",
    "upgrade",
]

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# A fixed signed 64-bit key: the first 8 bytes of sha256("tickwork-migrate").
MIGRATE_LOCK_KEY = int.from_bytes(
    hashlib.sha256(b"tickwork-migrate").digest()[:8], "big", signed=True
)
SQLITE_BUSY_TIMEOUT_S = 60.0
PG_CONNECT_TIMEOUT_S = 10.0

# See the module docstring: one Alembic run at a time per process, whatever the event loop.
_ALEMBIC_RUN = threading.Lock()

ACCEPTED_FORMS = (
    "use sqlite:///PATH (for example sqlite:///./.tickwork/tickwork.db) "
    "or postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME (postgres:// is accepted too)"
)


@dataclass(frozen=True, kw_only=True)
class _Target:
    dialect: Literal["sqlite", "postgresql"]
    url: URL  # the async SQLAlchemy URL
    dsn: str  # the user's URL, for asyncpg (which understands its query parameters)
    shown: str  # the user's URL with the password hidden, for messages
    sqlite_file: Path | None  # None for PostgreSQL and for :memory:


def _target(url: str) -> _Target:
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise InvalidInput(
            "database_url", f"{url!r} is not a database URL; {ACCEPTED_FORMS}"
        ) from None
    shown = parsed.render_as_string(hide_password=True)
    driver = parsed.drivername
    if driver in ("sqlite", "sqlite+aiosqlite"):
        if not parsed.database:
            raise InvalidInput("database_url", f"{shown!r} names no file; {ACCEPTED_FORMS}")
        memory = parsed.database == ":memory:"
        return _Target(
            dialect="sqlite",
            url=parsed.set(drivername="sqlite+aiosqlite"),
            dsn=url,
            shown=shown,
            sqlite_file=None if memory else Path(parsed.database),
        )
    if driver in ("postgresql", "postgres", "postgresql+asyncpg"):
        return _Target(
            dialect="postgresql",
            url=parsed.set(drivername="postgresql+asyncpg", query={}),
            dsn=url,
            shown=shown,
            sqlite_file=None,
        )
    raise InvalidInput(
        "database_url", f"unsupported scheme {driver + '://'!r} in {shown!r}; {ACCEPTED_FORMS}"
    )


def alembic_config() -> Config:
    """An Alembic Config for tickwork's scripts, e.g. `command.revision(alembic_config(), "msg")`.

    The scripts are found beside this module, so this works from a source tree and an installed
    wheel alike. Running migrations needs a connection in `config.attributes["connection"]`
    (see env.py): use `upgrade()` rather than `alembic upgrade`.
    """
    config = Config()
    # Config values go through ConfigParser interpolation: a '%' in the path must be doubled.
    config.set_main_option("script_location", str(MIGRATIONS_DIR).replace("%", "%%"))
    config.set_main_option("path_separator", "os")
    return config


async def upgrade(url: str, revision: str = "head", *, partitions: int | None = None) -> str:
    """Migrate the database at `url` to `revision`; return the revision current afterwards.

    `partitions` is P for a database whose partitions are created by this upgrade (revision
    0005; default 64); a database that has them keeps its P (`tickwork db repartition` changes
    it). Idempotent, and safe to run from many processes at once (see the module docstring).
    Raises InvalidInput for a bad URL or an unknown revision, StoreError when the database
    cannot be reached or the migration fails (nothing is half-applied: it rolls back).
    """
    target = _target(url)
    config = alembic_config()
    _check_revision(config, revision)
    if partitions is not None:
        try:
            config.attributes["partitions"] = check_partitions(partitions)
        except ValueError as exc:
            raise InvalidInput("partitions", str(exc)) from None
    if target.sqlite_file is not None:
        try:
            create_private(target.sqlite_file)
        except OSError as exc:
            raise StoreError(
                f"cannot create the directory for {target.shown}: {exc}; "
                "check the path and its permissions"
            ) from exc
    engine = _engine(target, exclusive=True)
    try:
        async with _alembic_turn(), engine.connect() as conn:
            return await conn.run_sync(_upgrade_locked, config, target, revision)
    except TickworkError:
        raise
    except Exception as exc:
        raise _store_error(target, "migrating", exc) from exc
    finally:
        await engine.dispose()


async def current_revision(url: str) -> str | None:
    """The schema revision of the database at `url`; None if it was never migrated.

    A SQLite file that does not exist yet reports None and is not created.
    """
    target = _target(url)
    if target.sqlite_file is not None and not target.sqlite_file.exists():
        return None
    engine = _engine(target, exclusive=False)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(_read_revision)
    except TickworkError:
        raise
    except Exception as exc:
        raise _store_error(target, "reading the schema revision of", exc) from exc
    finally:
        await engine.dispose()


@contextlib.asynccontextmanager
async def _alembic_turn() -> AsyncIterator[None]:
    # A threading.Lock, polled: Alembic's globals are shared by every thread and event loop
    # (an asyncio primitive is bound to one loop), polling never blocks the loop and is
    # cancellation-safe, and contention within one process is rare.
    while not _ALEMBIC_RUN.acquire(blocking=False):  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        _ALEMBIC_RUN.release()


def _check_revision(config: Config, revision: str) -> None:
    scripts = ScriptDirectory.from_config(config)
    known = ", ".join(s.revision for s in scripts.walk_revisions())
    try:
        found = scripts.get_revisions(revision)
    except (CommandError, RevisionError) as exc:
        raise InvalidInput(
            "revision", f"unknown revision {revision!r} ({exc}); use 'head' or one of: {known}"
        ) from exc
    if not found:
        raise InvalidInput("revision", f"{revision!r} is no upgrade target; use 'head' or {known}")


def _engine(target: _Target, *, exclusive: bool) -> AsyncEngine:
    # NullPool: a migration is one connection, closed when done; nothing lingers in a pool.
    if target.dialect == "postgresql":
        from tickwork.store.postgres.connect import asyncpg_dsn

        # asyncpg connects from the user's URL itself, so query parameters such as sslmode or
        # application_name mean what they mean to the store (SQLAlchemy would pass them on as
        # keyword arguments asyncpg.connect() does not take).
        async def connect() -> Any:
            return await asyncpg.connect(
                asyncpg_dsn(target.dsn),
                timeout=PG_CONNECT_TIMEOUT_S,
                server_settings={"application_name": "tickwork-migrate"},
            )

        return create_async_engine(target.url, poolclass=NullPool, async_creator=connect)
    engine = create_async_engine(
        target.url, poolclass=NullPool, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S}
    )
    if exclusive:
        # The driver's own implicit transactions never cover DDL; take over transaction control
        # so that SQLAlchemy's begin() is a real BEGIN EXCLUSIVE (the SQLAlchemy-documented
        # recipe for transactional DDL on pysqlite/aiosqlite). Foreign keys stay off (SQLite's
        # default) on this connection: PRAGMA foreign_keys cannot change inside a transaction,
        # and batch-mode table rebuilds must not cascade deletes.
        @event.listens_for(engine.sync_engine, "connect")
        def _driver_autocommit(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None

        @event.listens_for(engine.sync_engine, "begin")
        def _begin_exclusive(conn: Connection) -> None:
            conn.exec_driver_sql("BEGIN EXCLUSIVE")

    return engine


def _upgrade_locked(conn: Connection, config: Config, target: _Target, revision: str) -> str:
    with conn.begin():  # BEGIN EXCLUSIVE on SQLite (see _engine); commits on success
        if target.dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATE_LOCK_KEY})
        # env.py runs the scripts on this connection, inside this transaction and lock.
        _check_known(config, target, _read_revision(conn))
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        now = _read_revision(conn)
    if now is None:  # cannot happen: _check_revision admits only real revisions
        raise StoreError(f"migrating {target.shown} left no schema revision recorded")
    return now


def _check_known(config: Config, target: _Target, recorded: str | None) -> None:
    if recorded is None:
        return
    try:
        ScriptDirectory.from_config(config).get_revision(recorded)
    except (CommandError, RevisionError) as exc:
        raise StoreError(
            f"{target.shown} records schema revision {recorded!r}, which this tickwork does not "
            "know: a newer tickwork migrated it; upgrade tickwork (downgrading a database is "
            "not supported)"
        ) from exc


def _read_revision(conn: Connection) -> str | None:
    context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def _store_error(target: _Target, doing: str, exc: BaseException) -> StoreError:
    """Translate a driver/SQLAlchemy/Alembic error into one line that says what to check."""
    cause = _root_cause(exc)
    lines = str(cause).strip().splitlines()
    detail = f"{type(cause).__name__}: {lines[0]}" if lines else type(cause).__name__
    return StoreError(f"{doing} {target.shown} failed ({detail}); {_hint(target, cause)}")


def _root_cause(exc: BaseException) -> BaseException:
    """The driver's exception behind SQLAlchemy's wrappers (DBAPIError.orig, __cause__)."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "orig", None) if isinstance(exc, SQLAlchemyError) else None
        inner = inner or exc.__cause__
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc


def _hint(target: _Target, cause: BaseException) -> str:
    if target.dialect == "sqlite":
        message = str(cause)
        if "locked" in message or "busy" in message:
            return (
                "another connection kept the database locked (this one waits up to "
                f"{SQLITE_BUSY_TIMEOUT_S:.0f} s); retry when it is done"
            )
        if "unable to open" in message or "readonly" in message:
            return "check that the file's directory exists and is writable"
        return "check the file is a tickwork SQLite database and not corrupt"
    if isinstance(cause, asyncpg.InvalidCatalogNameError):
        return "create the database first (createdb), or fix the database name in the URL"
    if isinstance(
        cause, asyncpg.InvalidAuthorizationSpecificationError | asyncpg.InvalidPasswordError
    ):
        return "check the user name and password, and pg_hba.conf on the server"
    if isinstance(cause, asyncpg.InsufficientPrivilegeError):
        return "the user needs the right to create tables in this database"
    if isinstance(cause, TimeoutError):
        return (
            f"no answer within {PG_CONNECT_TIMEOUT_S:.0f} s; "
            "check the host and port, and any firewall in between"
        )
    if isinstance(cause, OSError):
        return "check that PostgreSQL is running and accepts TCP connections on that host and port"
    return "check the server's log for details"
