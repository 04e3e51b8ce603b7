"""The read side of the SQL stores, written once: each store supplies `_sql` (its named
statements, which include common.sql's) and `_query` (how it runs a read)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from tickwork.clock import to_us
from tickwork.domain.audit import AuditEntry
from tickwork.domain.jobs import Job
from tickwork.domain.keys import ApiKey
from tickwork.domain.occurrences import LedgerRange
from tickwork.domain.runs import AttemptRecord, Run
from tickwork.domain.tenants import Tenant
from tickwork.errors import NotFound
from tickwork.store.base import HELD_LEASE_US, JobQuery, StoreStats
from tickwork.store.sql import rows
from tickwork.store.sql.named import Statement, Statements
from tickwork.store.sql.sealed import SealedColumns

EARLIEST_US = -(2**63)  # no lower bound: every next_run_us is at or after it
ABOVE_EVERY_ID = 2**63 - 1  # the largest BIGINT: no upper bound on a page's ids


def floor_us(not_before: datetime | None) -> int:
    return EARLIEST_US if not_before is None else to_us(not_before)


class SqlReads:
    _sql: Statements
    _columns: SealedColumns  # how the secret-bearing columns are written and read

    async def _query(self, statement: Statement, params: Mapping[str, Any]) -> Sequence[rows.Row]:
        """Run one read-only statement with :named parameters."""
        raise NotImplementedError

    async def ping(self) -> None:
        await self._query(self._sql.ping, {})

    async def _read_run_caps(self) -> dict[str, int]:
        """{tenant: max_concurrent_runs} of the tenants that have it (the RunCaps cache's
        read, store/run_caps.py)."""
        return rows.run_caps_from_rows(await self._query(self._sql.tenants_with_limits, {}))

    async def get_job(self, job_id: str) -> Job:
        found = await self._query(self._sql.get_job, {"id": job_id})
        if not found:
            raise NotFound("job", job_id)
        return rows.job_from_row(found[0], self._columns)

    async def list_jobs(self, query: JobQuery) -> list[Job]:
        params = {
            "state": query.state.value if query.state else None,
            "tenant": query.tenant,
            "name_prefix": query.name_prefix,
            "after_id": query.after_id,
            "limit": query.limit,
        }
        return [
            rows.job_from_row(r, self._columns)
            for r in await self._query(self._sql.list_jobs, params)
        ]

    async def list_runs(
        self, job_id: str, *, limit: int = 50, before_id: int | None = None
    ) -> list[Run]:
        found = await self._query(
            self._sql.list_runs, {"job_id": job_id, "limit": limit, "before_id": before_id}
        )
        if not found:
            await self.get_job(job_id)  # NotFound for a missing job, [] for a quiet one
        return [rows.run_from_row(r) for r in found]

    async def runs_scheduled_between(
        self, job_id: str, start: datetime, end: datetime, *, limit: int
    ) -> list[Run]:
        params = {"job_id": job_id, "from_us": to_us(start), "to_us": to_us(end), "limit": limit}
        found = await self._query(self._sql.list_runs_scheduled_between, params)
        return [rows.run_from_row(r) for r in found]

    async def list_occurrences(
        self, job_id: str, start: datetime, end: datetime, *, limit: int
    ) -> list[LedgerRange]:
        params = {"job_id": job_id, "from_us": to_us(start), "to_us": to_us(end), "limit": limit}
        found = await self._query(self._sql.list_ledger, params)
        return [rows.ledger_from_row(r) for r in found]

    async def next_lease_at(self, after: datetime | None = None) -> datetime | None:
        params = {"after": None if after is None else to_us(after), "held": HELD_LEASE_US}
        found = await self._query(self._sql.next_lease, params)
        return rows.dt_or_none(found[0]["next_us"])

    async def oldest_leasable_at(self, now: datetime) -> datetime | None:
        found = await self._query(self._sql.oldest_leasable, {"now": to_us(now)})
        return rows.dt_or_none(found[0]["since_us"])

    async def leasable_runs(self, now: datetime) -> int:
        found = await self._query(self._sql.leasable_runs, {"now": to_us(now)})
        return int(found[0]["n"])

    async def get_run(self, run_id: int) -> Run:
        found = await self._query(self._sql.get_run, {"id": run_id})
        if not found:
            raise NotFound("run", str(run_id))
        return rows.run_from_row(found[0])

    async def list_attempts(self, run_id: int) -> list[AttemptRecord]:
        found = await self._query(self._sql.list_attempts, {"run_id": run_id})
        if not found:
            await self.get_run(run_id)
        return [rows.attempt_from_row(r) for r in found]

    async def list_dead_letters(
        self,
        *,
        limit: int = 50,
        before_id: int | None = None,
        job_id: str | None = None,
        tenant: str | None = None,
    ) -> list[Run]:
        params = {"limit": limit, "before_id": before_id, "job_id": job_id, "tenant": tenant}
        return [
            rows.run_from_row(r) for r in await self._query(self._sql.list_dead_letters, params)
        ]

    # -- API keys and tenants (AccessStore) ---------------------------------------------------
    async def get_key(self, key_id: str) -> ApiKey:
        found = await self._query(self._sql.get_key, {"id": key_id})
        if not found:
            raise NotFound("key", key_id)
        return rows.key_from_row(found[0])

    async def key_by_hash(self, secret_hash: str) -> ApiKey | None:
        found = await self._query(self._sql.get_key_by_hash, {"secret_hash": secret_hash})
        return rows.key_from_row(found[0]) if found else None

    async def list_keys(self, *, tenant: str | None = None) -> list[ApiKey]:
        found = await self._query(self._sql.list_keys, {"tenant": tenant})
        return [rows.key_from_row(r) for r in found]

    async def count_tenant_jobs(self, tenant: str | None = None) -> dict[str, int]:
        if tenant is None:
            found = await self._query(self._sql.job_counts_by_tenant, {})
            return {r["tenant"]: int(r["n"]) for r in found}
        [row] = await self._query(self._sql.count_tenant_jobs, {"tenant": tenant})
        return {tenant: int(row["n"])} if row["n"] else {}

    async def list_tenants(self) -> list[Tenant]:
        return [
            rows.tenant_from_row(r, self._columns)
            for r in await self._query(self._sql.list_tenants, {})
        ]

    # -- the audit log (AuditStore) -----------------------------------------------------------
    async def list_audit(
        self,
        *,
        limit: int = 100,
        before_id: int | None = None,
        tenant: str | None = None,
        key_id: str | None = None,
    ) -> list[AuditEntry]:
        params = {
            "limit": limit,
            "before_id": ABOVE_EVERY_ID if before_id is None else before_id,
            "tenant": tenant,
            "key_id": key_id,
        }
        # One statement per combination of filters (common.sql says why); each takes only the
        # parameters it names (Statement.args; sqlite3 ignores the others).
        if tenant is None:
            statement = self._sql.list_audit if key_id is None else self._sql.list_audit_of_key
        elif key_id is None:
            statement = self._sql.list_audit_of_tenant
        else:
            statement = self._sql.list_audit_of_tenant_and_key
        found = await self._query(statement, params)
        return [rows.audit_from_row(r) for r in found]

    async def stats(self) -> StoreStats:
        states = await self._query(self._sql.job_state_counts, {})
        pending = await self._query(self._sql.pending_runs, {})
        return StoreStats(
            jobs_by_state={r["state"]: r["n"] for r in states}, runs_pending=pending[0]["n"]
        )
