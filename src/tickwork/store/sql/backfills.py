"""Backfills on the SQL stores: their rows, and the reads both dialects run alike. Each store
supplies `_sql` and `_query` (as for `SqlReads`) and its own writes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tickwork.clock import from_us, to_us
from tickwork.domain.backfills import (
    Backfill,
    BackfillKind,
    BackfillSlice,
    BackfillState,
    RunningBackfill,
)
from tickwork.domain.runs import occurrence_key
from tickwork.errors import NotFound
from tickwork.store.sql import rows
from tickwork.store.sql.named import Statement, Statements


def backfill_from_row(row: rows.Row) -> Backfill:
    return Backfill(
        id=row["id"],
        job_id=row["job_id"],
        tenant=row["tenant"],
        kind=BackfillKind(row["kind"]),
        from_at=from_us(row["from_us"]),
        to_at=from_us(row["to_us"]),
        cursor_at=rows.dt_or_none(row["cursor_us"]),
        total=row["total"],
        done=row["done"],
        state=BackfillState(row["state"]),
        rate_per_s=float(row["rate_per_s"]),
        created_at=from_us(row["created_us"]),
        updated_at=from_us(row["updated_us"]),
        paced_at=from_us(row["paced_us"]),
    )


def backfill_params(backfill: Backfill) -> dict[str, Any]:
    return {
        "job_id": backfill.job_id,
        "tenant": backfill.tenant,
        "kind": backfill.kind.value,
        "from_us": to_us(backfill.from_at),
        "to_us": to_us(backfill.to_at),
        "cursor_us": rows.us_or_none(backfill.cursor_at),
        "total": backfill.total,
        "done": backfill.done,
        "state": backfill.state.value,
        "rate_per_s": backfill.rate_per_s,
        "created_us": to_us(backfill.created_at),
        "updated_us": to_us(backfill.updated_at),
        "paced_us": to_us(backfill.paced_at),
    }


def slice_params(advance: BackfillSlice, now_us: int) -> dict[str, Any]:
    """The compare-and-set's parameters (advance_backfill, both dialects)."""
    completes = advance.completes
    return {
        "id": advance.backfill_id,
        "expected_us": rows.us_or_none(advance.expected_cursor),
        "cursor_us": rows.us_or_none(advance.new_cursor),
        "n": len(advance.occurrences),
        "state": (BackfillState.COMPLETED if completes else BackfillState.RUNNING).value,
        "paced_us": to_us(advance.paced_at),
        "one_at_a_time": advance.one_at_a_time,
        "now": now_us,
        "origin": advance.origin.value,
    }


def slice_keys(advance: BackfillSlice) -> list[str]:
    return [occurrence_key(advance.job_id, t, advance.origin) for t in advance.occurrences]


class SqlBackfillReads:
    _sql: Statements

    async def _query(self, statement: Statement, params: Mapping[str, Any]) -> Sequence[rows.Row]:
        raise NotImplementedError

    async def get_backfill(self, backfill_id: int) -> Backfill:
        found = await self._query(self._sql.get_backfill, {"id": backfill_id})
        if not found:
            raise NotFound("backfill", str(backfill_id))
        return backfill_from_row(found[0])

    async def list_backfills(self, job_id: str, *, limit: int = 100) -> list[Backfill]:
        found = await self._query(
            self._sql.list_backfills_of_job, {"job_id": job_id, "limit": limit}
        )
        return [backfill_from_row(r) for r in found]

    async def running_backfills(self, *, limit: int) -> list[RunningBackfill]:
        found = await self._query(self._sql.running_backfills, {"limit": limit})
        return [
            RunningBackfill(backfill=backfill_from_row(r), schedule=rows.schedule_from_row(r))
            for r in found
        ]
