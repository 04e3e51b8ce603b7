"""Whether a database is already at this release's newest schema, read without Alembic.

Every tickwork process migrates its database when it starts (store.migrate.upgrade). Importing
Alembic and SQLAlchemy for that costs about half a second of each start, a third of the time a
worker takes to be ready, and on almost every start there is nothing to migrate. So a store
first reads the recorded revision itself, with the driver it uses anyway, and imports the
migration machinery only when that revision is not this release's newest one (a database never
migrated, an older one, or one a newer tickwork migrated: `upgrade` then reports it as before).

Reading the revision is safe while another process migrates: the migration is one transaction
that writes the version row last (PostgreSQL and SQLite alike), so a reader sees the newest
revision only once the whole schema is there.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Final

import asyncpg

# The newest file in migrations/versions: bump it with every new revision (a unit test holds
# it to Alembic's head).
HEAD_REVISION: Final = "0019"
VERSION_TABLE: Final = "tw_alembic_version"
_READ = f"SELECT version_num FROM {VERSION_TABLE}"
PG_CONNECT_TIMEOUT_S = 10.0


async def postgres_at_head(dsn: str) -> bool:
    """True if the PostgreSQL database at `dsn` (asyncpg's form) records HEAD_REVISION. Any
    failure (no version table, no server) is False: the migration then runs, or reports what
    is wrong in its own words."""
    try:
        conn = await asyncpg.connect(dsn, timeout=PG_CONNECT_TIMEOUT_S)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    try:
        recorded = await conn.fetchval(_READ)
    except asyncpg.PostgresError:
        return False
    finally:
        await conn.close()
    return bool(recorded == HEAD_REVISION)


def sqlite_at_head(path: Path) -> bool:
    """`postgres_at_head` for a SQLite file; a file that does not exist is not at head (and is
    not created here)."""
    if not path.exists():
        return False
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return False
    try:
        rows = conn.execute(_READ).fetchall()
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return rows == [(HEAD_REVISION,)]
