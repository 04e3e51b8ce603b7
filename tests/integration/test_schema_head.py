"""A store that opens a database already at the newest schema skips Alembic (schema_head.py).

The check reads the recorded revision with the store's own driver; anything but this release's
newest revision (never migrated, older, or from a newer tickwork) still goes through the
migration, whose own tests (test_migrations.py) cover what it then does.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tickwork.settings import sqlite_path
from tickwork.store.migrate import upgrade
from tickwork.store.postgres import asyncpg_dsn
from tickwork.store.schema_head import (
    HEAD_REVISION,
    VERSION_TABLE,
    postgres_at_head,
    sqlite_at_head,
)
from tickwork.testing import free_port

# Opens and closes a store in a fresh interpreter and prints whether Alembic was imported.
OPEN_AND_REPORT = """
import asyncio, sys
from tickwork.runtime.factory import store_for_url

async def main(url):
    store = store_for_url(url)
    await store.open()
    await store.close()
    print("alembic" in sys.modules)

asyncio.run(main(sys.argv[1]))
"""


def _opened_with_alembic(url: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-c", OPEN_AND_REPORT, url], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1] == "True"


async def test_sqlite_at_head_only_after_the_migration(sqlite_url: str) -> None:
    path = sqlite_path(sqlite_url)
    assert path is not None
    assert not sqlite_at_head(path)
    assert not path.exists()  # the check creates nothing
    await upgrade(sqlite_url)
    assert sqlite_at_head(path)
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '0016'")
    assert not sqlite_at_head(path)


@pytest.mark.postgres
async def test_postgres_at_head_only_after_the_migration(pg_dsn: str) -> None:
    dsn = asyncpg_dsn(pg_dsn)
    assert not await postgres_at_head(dsn)  # no version table yet
    await upgrade(pg_dsn)
    assert await postgres_at_head(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '0999'")
    finally:
        await conn.close()
    assert not await postgres_at_head(dsn)


async def test_unreachable_postgres_is_not_at_head() -> None:
    assert not await postgres_at_head(f"postgresql://postgres@127.0.0.1:{free_port()}/x")


def test_a_store_at_head_opens_without_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/tickwork.db"
    assert _opened_with_alembic(url)  # a new file: migrated on open
    path = sqlite_path(url)
    assert path is not None
    assert sqlite_at_head(path)
    assert not _opened_with_alembic(url)  # at head: Alembic is never imported


@pytest.mark.postgres
def test_a_postgres_store_at_head_opens_without_alembic(pg_dsn: str) -> None:
    assert _opened_with_alembic(pg_dsn)
    assert not _opened_with_alembic(pg_dsn)


def test_head_revision_is_the_newest_migration() -> None:
    from alembic.script import ScriptDirectory

    from tickwork.store.migrate import alembic_config

    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == HEAD_REVISION
