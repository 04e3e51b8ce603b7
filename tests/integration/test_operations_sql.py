"""The SQL that docs/operations.md gives operators runs on a database tickwork migrated."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from tickwork.store.migrate import upgrade

pytestmark = pytest.mark.postgres

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def sql_blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", OPERATIONS.read_text(), flags=re.DOTALL)


async def test_the_autovacuum_settings_apply_to_every_table_they_name(pg_dsn: str) -> None:
    blocks = sql_blocks()
    assert blocks, "docs/operations.md has no ```sql block"
    await upgrade(pg_dsn)
    conn = await asyncpg.connect(pg_dsn)
    try:
        for block in blocks:
            await conn.execute(block)
        options = dict(
            await conn.fetch(
                "SELECT relname, reloptions FROM pg_class WHERE relname = ANY($1::text[])",
                ["tw_jobs", "tw_runs", "tw_queue"],
            )
        )
    finally:
        await conn.close()
    assert "autovacuum_vacuum_threshold=1000" in options["tw_jobs"]
    assert "autovacuum_vacuum_threshold=1000" in options["tw_queue"]
    # Storage parameters add up: the migration's fillfactor stays beside the operator's.
    assert {"fillfactor=50", "autovacuum_vacuum_cost_delay=1"} <= set(options["tw_runs"])
