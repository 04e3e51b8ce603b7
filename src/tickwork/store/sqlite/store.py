"""SQLite store: the embedded default.

SQLite has no SKIP LOCKED, so claims serialise instead: every write runs as one
`BEGIN IMMEDIATE` transaction on a dedicated writer thread, which takes the database's write
lock before reading anything it will compare-and-set. Two processes sharing one file therefore
take turns (busy_timeout), and the compare-and-set on (fence_token, next_run_at) makes the
loser's plans fall away. Reads use a second connection: in WAL mode they never wait for a
writer.

Each transaction is a plain function run on the connection's own thread, so no other
coroutine's statement can interleave with it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from tickwork.clock import from_us, to_us
from tickwork.domain.audit import AuditEntry
from tickwork.domain.backfills import DEFAULT_BACKFILL_RATE, Backfill, BackfillSlice
from tickwork.domain.concurrency import pick_within_caps, room_left
from tickwork.domain.egress import EgressRules
from tickwork.domain.jobs import MAX_PRIORITY, MIN_PRIORITY, Job, JobState, OverlapPolicy
from tickwork.domain.keys import ApiKey
from tickwork.domain.occurrences import LedgerRange
from tickwork.domain.overlap import FIRE, Decision, Verdict, decide
from tickwork.domain.partitions import DEFAULT_PARTITIONS, DueHead, Node
from tickwork.domain.runs import (
    Envelope,
    Fire,
    Run,
    RunOutcome,
    RunStatus,
    manual_key,
    occurrence_key,
)
from tickwork.domain.tenant_limits import NO_LIMITS, TenantLimits, check_job_quota
from tickwork.domain.tenants import Tenant
from tickwork.errors import Conflict, NotFound, StaleJob, TenantExists, TenantHasJobs
from tickwork.sealing import Keyring
from tickwork.store.base import (
    CANCELLED_BY_OVERLAP,
    DEFAULT_TAKEOVER_GRACE_MS,
    HELD_LEASE_US,
    Applied,
    Claimed,
    ClaimPlan,
    DueJob,
    Extended,
    HistoryMaintenance,
    LeaseView,
    Level,
    NodeAnnouncement,
    ResealReport,
    Topic,
    Watchers,
    distinct_leases,
    last_outcome_per_lease,
    missing_or_stale,
)
from tickwork.store.run_caps import RunCaps
from tickwork.store.schema_head import sqlite_at_head
from tickwork.store.sql import rows
from tickwork.store.sql.backfills import (
    SqlBackfillReads,
    backfill_from_row,
    backfill_params,
    slice_keys,
    slice_params,
)
from tickwork.store.sql.named import Statement, load_statements
from tickwork.store.sql.reads import SqlReads, floor_us
from tickwork.store.sql.reseal import ResealStatements, reseal_all
from tickwork.store.sql.sealed import TENANT_SECRETS, SealedColumns
from tickwork.store.sqlite.connection import Connection, create_private, immediate

T = TypeVar("T")

SQL = load_statements("common", "backfills", "sqlite", numbered=False)
RESEAL = ResealStatements(
    job_page=SQL.job_secret_columns,
    reseal_job=SQL.reseal_job,
    tenants=SQL.tenant_secret_columns,
    reseal_tenant=SQL.reseal_tenant,
)


class SqliteStore(SqlReads, SqlBackfillReads):
    def __init__(
        self, path: str | Path, *, migrate: bool = True, keyring: Keyring | None = None
    ) -> None:
        self.path = Path(path)
        self._columns = SealedColumns(keyring)
        self._migrate = migrate
        self._writer = Connection(self.path, readonly=False)
        self._reader = Connection(self.path, readonly=True)
        self._run_caps = RunCaps(self._read_run_caps)
        self._watchers = Watchers()
        self._sql = SQL
        self._partitions = DEFAULT_PARTITIONS

    async def open(self) -> None:
        create_private(self.path)
        if self._migrate and not sqlite_at_head(self.path):
            from tickwork.store.migrate import upgrade

            await upgrade(f"sqlite:///{self.path}")
        await self._writer.open()
        await self._reader.open()
        found = await self._query(SQL.get_meta, {"key": "partitions"})
        self._partitions = int(found[0]["value"])

    async def close(self) -> None:
        await self._writer.close()
        await self._reader.close()

    def watch(self, topic: Topic) -> asyncio.Event:
        return self._watchers.watch(topic)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self._writer.run(lambda conn: immediate(conn, fn))

    async def _query(self, statement: Statement, params: Mapping[str, Any]) -> list[sqlite3.Row]:
        return await self._reader.run(lambda conn: conn.execute(statement.text, params).fetchall())

    # -- jobs -------------------------------------------------------------------------------
    async def create_job(self, job: Job, *, check_quota: bool = False) -> Job:
        params = rows.job_params(job, partitions=self._partitions, sealed=self._columns)

        def insert(conn: sqlite3.Connection) -> None:
            if check_quota:
                _check_quota(conn, job.tenant)
            conn.execute(SQL.insert_job.text, params).close()

        await self._write(insert)
        self._watchers.notify("jobs")
        return job

    async def update_job(self, job: Job, *, ledger: Sequence[LedgerRange] = ()) -> Job:
        def update(conn: sqlite3.Connection) -> tuple[sqlite3.Row | None, bool]:
            updated: sqlite3.Row | None = conn.execute(
                SQL.update_job.text,
                rows.job_params(job, partitions=self._partitions, sealed=self._columns),
            ).fetchone()
            if updated is not None:
                for entry in ledger:
                    conn.execute(SQL.insert_ledger_range.text, rows.ledger_params(entry))
            exists = updated is not None or _exists(conn, job.id)
            return updated, exists

        row, exists = await self._write(update)
        if not exists:
            raise NotFound("job", job.id)
        if row is None:
            raise StaleJob(f"job {job.id!r} was claimed since it was read")
        self._watchers.notify("jobs")
        return rows.job_from_row(row, self._columns)

    async def delete_job(self, job_id: str) -> None:
        def delete(conn: sqlite3.Connection) -> int:
            conn.execute(SQL.delete_attempts_of_job.text, {"id": job_id})
            conn.execute(SQL.delete_runs_of_job.text, {"id": job_id})
            conn.execute(SQL.delete_backfills_of_job.text, {"id": job_id})
            conn.execute(SQL.delete_ledger_of_job.text, {"id": job_id})
            return conn.execute(SQL.delete_job.text, {"id": job_id}).rowcount

        deleted = await self._write(delete)
        if not deleted:
            raise NotFound("job", job_id)
        self._watchers.notify("jobs")

    # -- fire path --------------------------------------------------------------------------
    async def claim(
        self,
        plans: Sequence[ClaimPlan],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
        takeover_grace_ms: int = DEFAULT_TAKEOVER_GRACE_MS,
    ) -> Claimed[Fire]:
        if not plans:
            return Claimed()
        common = _claim_common(owner, now, takeover_grace_ms)
        common["lease_until"] = to_us(lease_until)
        return await self._write(
            lambda conn: _claim(conn, plans, common, lease_until, self._columns)
        )

    async def claim_hand_off(
        self,
        plans: Sequence[ClaimPlan],
        *,
        owner: str,
        now: datetime,
        takeover_grace_ms: int = DEFAULT_TAKEOVER_GRACE_MS,
    ) -> Claimed[Envelope]:
        if not plans:
            return Claimed()
        common = _claim_common(owner, now, takeover_grace_ms)
        envelopes = await self._write(lambda conn: _claim_hand_off(conn, plans, common))
        if envelopes:
            self._watchers.notify("runs")
        return envelopes

    async def due_jobs(
        self,
        until: datetime,
        limit: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        params = {
            "until": to_us(until),
            "limit": limit,
            "not_before": floor_us(not_before),
            "partitions": _id_list(partitions),
        }
        return [rows.due_from_row(r) for r in await self._query(SQL.due_jobs, params)]

    async def count_due(
        self,
        until: datetime,
        cap: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> int:
        params = {
            "until": to_us(until),
            "limit": cap,
            "not_before": floor_us(not_before),
            "partitions": _id_list(partitions),
        }
        return int((await self._query(SQL.count_due, params))[0]["n"])

    async def next_due_at(
        self, not_before: datetime | None = None, *, partitions: Collection[int] | None = None
    ) -> datetime | None:
        params = {"not_before": floor_us(not_before), "partitions": _id_list(partitions)}
        found = await self._query(SQL.next_due, params)
        return rows.dt_or_none(found[0]["next_us"])

    async def due_counts(
        self,
        until: datetime,
        tenants: Sequence[str],
        cap: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> dict[Level, int]:
        common = {
            "cap": cap,
            "until": to_us(until),
            "not_before": floor_us(not_before),
            "partitions": _id_list(partitions),
        }
        counts: dict[Level, int] = {}
        for tenant in tenants:
            for priority in range(MIN_PRIORITY, MAX_PRIORITY + 1):
                params = common | {"tenant": tenant, "priority": priority}
                [found] = await self._query(SQL.due_count_of_level, params)
                if found["due"]:
                    counts[(tenant, priority)] = found["due"]
        return counts

    async def due_jobs_by_level(
        self,
        until: datetime,
        wanted: Mapping[Level, int],
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        common = {
            "until": to_us(until),
            "not_before": floor_us(not_before),
            "partitions": _id_list(partitions),
        }
        found: list[DueJob] = []
        for (tenant, priority), limit in wanted.items():
            if limit > 0:
                params = common | {"tenant": tenant, "priority": priority, "limit": limit}
                found += [
                    rows.due_from_row(r) for r in await self._query(SQL.due_jobs_of_level, params)
                ]
        return found

    async def tenant_limits(self) -> dict[str, TenantLimits]:
        found = await self._query(SQL.all_tenant_limits, {})
        return {r["tenant"]: rows.limits_from_text(r["limits"]) for r in found}

    async def planned_counts(self, first_s: int, last_s: int) -> dict[int, int]:
        params = {"lo": first_s * 1_000_000, "hi": (last_s + 1) * 1_000_000}
        return {r["second"]: r["fires"] for r in await self._query(SQL.planned_counts, params)}

    async def partition_heads(
        self, now: datetime, partitions: Collection[int] | None = None
    ) -> dict[int, DueHead]:
        params = {"now": to_us(now), "partitions": _id_list(partitions)}
        return rows.heads_from_rows(await self._query(SQL.partition_heads, params))

    async def gone_nodes(self, node_ids: Collection[str]) -> frozenset[str]:
        return frozenset()  # one scheduler at a time on a file: nobody to take over from

    # -- partitions and nodes (ADR 0015): the same protocol as PostgreSQL's --------------------
    def partition_count(self) -> int:
        return self._partitions

    async def partition_leases(self) -> LeaseView:
        return _lease_view(await self._query(SQL.list_partition_leases, {}))

    async def update_partition_leases(
        self,
        owner: str,
        *,
        renew: Mapping[int, int],
        release: Collection[int],
        acquire: Collection[int],
        ttl_ms: int,
    ) -> LeaseView:
        base = {"owner": owner, "ttl_us": ttl_ms * 1000}

        def update(conn: sqlite3.Connection) -> tuple[list[sqlite3.Row], bool]:
            for partition, epoch in renew.items():
                conn.execute(
                    SQL.renew_partition_lease.text, base | {"partition": partition, "epoch": epoch}
                )
            gone = {"partitions": json.dumps(sorted(release))}
            changed = (
                bool(release)
                and conn.execute(SQL.release_partition_leases.text, base | gone).rowcount > 0
            )
            for partition in sorted(acquire):
                taken = conn.execute(
                    SQL.acquire_partition_lease.text, base | {"partition": partition}
                ).fetchone()
                changed = changed or taken is not None
            return conn.execute(SQL.list_partition_leases.text).fetchall(), changed

        found, changed = await self._write(update)
        if changed:
            self._watchers.notify("cluster")
        return _lease_view(found)

    async def heartbeat_node(self, node: NodeAnnouncement, *, ttl_ms: int) -> list[Node]:
        params = rows.node_params(node, ttl_ms)

        def beat(conn: sqlite3.Connection) -> tuple[list[sqlite3.Row], bool]:
            known = conn.execute(SQL.list_nodes.text, {"all": True}).fetchall()
            conn.execute(SQL.heartbeat_node.text, params)
            live = conn.execute(SQL.list_nodes.text, {"all": False}).fetchall()
            return live, all((r["id"], r["role"]) != (node.id, node.role) for r in known)

        found, new = await self._write(beat)
        if new:
            self._watchers.notify("cluster")
        return [rows.node_from_row(r) for r in found]

    async def leave(self, node_id: str) -> None:
        def leave(conn: sqlite3.Connection) -> None:
            conn.execute(SQL.remove_node.text, {"id": node_id})
            conn.execute(SQL.release_partitions_of.text, {"owner": node_id})

        await self._write(leave)
        self._watchers.notify("cluster")

    async def forget_node(self, node_id: str, role: str) -> None:
        params = {"id": node_id, "role": role}
        await self._write(lambda conn: _execute(conn, SQL.remove_node_role.text, params))

    async def list_nodes(self, *, include_gone: bool = False) -> list[Node]:
        found = await self._query(SQL.list_nodes, {"all": include_gone})
        return [rows.node_from_row(r) for r in found]

    async def add_manual_run(self, job_id: str, *, now: datetime) -> Run:
        key = manual_key(job_id, now)
        params = {"job_id": job_id, "key": key, "now": to_us(now)}

        def insert(conn: sqlite3.Connection) -> sqlite3.Row | None:
            conn.execute(SQL.insert_manual_run.text, params)
            found: sqlite3.Row | None = conn.execute(SQL.get_run_by_key.text, params).fetchone()
            return found

        row = await self._write(insert)
        if row is None:
            raise NotFound("job", job_id)
        self._watchers.notify("runs")
        return rows.run_from_row(row)

    # -- backfills (the reads are SqlBackfillReads') -------------------------------------------
    async def create_backfill(self, backfill: Backfill) -> Backfill:
        params = backfill_params(backfill)
        row = await self._write(
            lambda conn: conn.execute(SQL.insert_backfill.text, params).fetchone()
        )
        return backfill_from_row(row)

    async def advance_backfill(self, advance: BackfillSlice, *, now: datetime) -> int | None:
        params = slice_params(advance, to_us(now))
        params["one_at_a_time"] = int(advance.one_at_a_time)
        runs = [
            {"key": key, "at_us": to_us(at), "now": params["now"], "origin": params["origin"]}
            for key, at in zip(slice_keys(advance), advance.occurrences, strict=True)
        ]

        def advance_(conn: sqlite3.Connection) -> int | None:
            moved = conn.execute(SQL.advance_backfill.text, params).fetchone()
            if moved is None:
                return None
            if moved["fence_token"] is None:
                return 0  # the job is gone: nothing to run
            ids = {
                "job_id": moved["job_id"],
                "fence": moved["fence_token"],
                "guarded": params["one_at_a_time"],  # its job has an overlap policy
            }
            return sum(conn.execute(SQL.insert_backfill_run.text, r | ids).rowcount for r in runs)

        inserted = await self._write(advance_)
        if inserted:
            self._watchers.notify("runs")
        return inserted

    async def cancel_backfill(self, backfill_id: int, *, now: datetime) -> Backfill:
        params = {"id": backfill_id, "now": to_us(now)}
        row = await self._write(
            lambda conn: conn.execute(SQL.cancel_backfill.text, params).fetchone()
        )
        if row is None:
            return await self.get_backfill(backfill_id)  # NotFound, or finished already
        return backfill_from_row(row)

    async def prune_backfills(self, *, before: datetime, limit: int) -> int:
        params = {"cutoff": to_us(before), "limit": limit}
        return await self._write(
            lambda conn: conn.execute(SQL.prune_backfills.text, params).rowcount
        )

    async def concurrency_caps(self) -> Mapping[str, int]:
        return await self._run_caps.current()

    async def lease_runs(
        self,
        *,
        now: datetime,
        owner: str,
        lease_until: datetime,
        limit: int,
        hand_offs_by: datetime | None = None,
        fresh_from: datetime | None = None,
        due_by: datetime | None = None,
        ahead_first: int = 0,
        after: datetime | None = None,
    ) -> list[Fire]:
        chosen = {
            "now": to_us(now),
            "hand_offs_by": to_us(now if hand_offs_by is None else hand_offs_by),
            "limit": limit,
            # Without a fresh range every run free by `now` is in the middle range: in order.
            "fresh_from": -(2**62) if fresh_from is None else to_us(fresh_from),
            "due_by": -(2**62),
            "after": -(2**62) if after is None else to_us(after),
        }
        if fresh_from is not None:  # without due_by the first range is empty
            chosen["due_by"] = to_us(fresh_from) - 1 if due_by is None else to_us(min(due_by, now))
        chosen["ahead_first"] = min(max(ahead_first, 0), limit) if fresh_from is not None else 0
        lease = {"owner": owner, "lease_until": to_us(lease_until), "now": to_us(now)}
        caps = await self._run_caps.current()

        def lease_batch(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            # Two statements in one BEGIN IMMEDIATE transaction (nothing else writes between
            # them): choose the runs, record the lost attempts of those leased before, lease.
            if caps:
                runs = _runs_within_caps(conn, chosen, caps)
            else:
                runs = conn.execute(SQL.runs_to_lease.text, chosen).fetchall()
            if not runs:
                return []
            _record_lost(conn, [(r["id"], r["fence_token"]) for r in runs if r["lease_owner"]])
            ids = json.dumps([r["id"] for r in runs])
            return conn.execute(SQL.lease_runs.text, {**lease, "ids": ids}).fetchall()

        leased = await self._write(lease_batch)
        return [rows.fire_from_row(r, lease_until, self._columns) for r in leased]

    async def lease_run(
        self, run_id: int, fence_token: int, *, owner: str, lease_until: datetime, now: datetime
    ) -> Fire | None:
        found = await self._by_fence([(run_id, fence_token)], owner, lease_until, now)
        return found[0] if found else None

    async def lease_fenced_runs(
        self,
        leases: Sequence[tuple[int, int]],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[Fire]:
        return await self._by_fence(leases, owner, lease_until, now)

    async def _by_fence(
        self,
        leases: Sequence[tuple[int, int]],
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[Fire]:
        """Lease every distinct (run, fence) pair with lease_run, in one BEGIN IMMEDIATE
        transaction (one commit, one fsync, for the whole batch), after one statement that
        records the lost attempts of the runs among them that were leased before."""
        if not leases:
            return []
        pairs = distinct_leases(leases)
        common: dict[str, Any] = {
            "owner": owner,
            "lease_until": to_us(lease_until),
            "now": to_us(now),
        }
        params = [{**common, "id": run_id, "fence": fence} for run_id, fence in pairs]
        caps = await self._run_caps.current()

        def each(conn: sqlite3.Connection) -> list[sqlite3.Row]:
            chosen = _fenced_within_caps(conn, params, caps, now) if caps else params
            _record_lost(conn, [(p["id"], p["fence"]) for p in chosen])
            found = (conn.execute(SQL.lease_run.text, p).fetchone() for p in chosen)
            return [row for row in found if row is not None]

        return [rows.fire_from_row(r, lease_until, self._columns) for r in await self._write(each)]

    async def release_leases(self, owners: Collection[str], *, now: datetime) -> int:
        if not owners:
            return 0
        params = {"owners": json.dumps(sorted(owners)), "now": to_us(now)}
        released = await self._write(
            lambda conn: conn.execute(SQL.release_leases.text, params).rowcount
        )
        if released:
            self._watchers.notify("runs")
        return int(released)

    async def take_back_own_leases(
        self,
        *,
        owner: str,
        holding: Collection[int],
        now: datetime,
        lease_until: datetime,
        limit: int,
    ) -> list[Fire]:
        params = {
            "owner": owner,
            "holding": json.dumps([int(i) for i in holding]),
            "now": to_us(now),
            "lease_until": to_us(lease_until),
            "limit": limit,
        }
        taken = await self._write(
            lambda conn: conn.execute(SQL.take_back_own_leases.text, params).fetchall()
        )
        return [rows.fire_from_row(r, lease_until, self._columns) for r in taken]

    async def extend_leases(
        self, leases: Sequence[tuple[int, int]], *, lease_until: datetime
    ) -> Extended:
        if not leases:
            return Extended(())
        until = to_us(lease_until)
        params = [
            {"id": run_id, "fence": fence, "lease_until": until}
            for run_id, fence in distinct_leases(leases)
        ]
        return Extended(
            await self._write(
                lambda conn: [
                    (p["id"], p["fence"])
                    for p in params
                    if conn.execute(SQL.extend_lease.text, p).rowcount
                ]
            )
        )

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        if not outcomes:
            return Applied(())
        params = [rows.outcome_params(o) for o in last_outcome_per_lease(outcomes)]
        applied, released = await self._write(lambda conn: _finish(conn, params))
        if released:  # buffer_one: a run held back became leasable
            self._watchers.notify("runs")
        return Applied(applied)

    async def get_tenant(self, tenant: str) -> Tenant | None:
        found = await self._query(SQL.get_tenant, {"tenant": tenant})
        return rows.tenant_from_row(found[0], self._columns) if found else None

    async def set_tenant_secrets(
        self, tenant: str, secrets: Sequence[str], *, now: datetime
    ) -> Tenant:
        params = {
            "tenant": tenant,
            "webhook_secrets": self._columns.write_secrets(tuple(secrets), purpose=TENANT_SECRETS),
            "now": to_us(now),
        }
        row = await self._write(
            lambda conn: conn.execute(SQL.set_tenant_secrets.text, params).fetchone()
        )
        return rows.tenant_from_row(row, self._columns)

    # -- API keys and tenants (AccessStore; the reads are SqlReads') --------------------------
    async def create_key(self, key: ApiKey) -> None:
        params = rows.key_params(key)
        inserted = await self._write(
            lambda conn: conn.execute(SQL.insert_key.text, params).fetchone()
        )
        if inserted is None:
            raise Conflict(f"a key with id {key.id!r} or with the same secret exists already")

    async def revoke_key(self, key_id: str, *, now: datetime) -> ApiKey:
        params = {"id": key_id, "now": to_us(now)}
        row = await self._write(lambda conn: conn.execute(SQL.revoke_key.text, params).fetchone())
        if row is None:
            raise NotFound("key", key_id)
        return rows.key_from_row(row)

    async def touch_keys(self, used: Mapping[str, datetime]) -> None:
        if not used:
            return
        params = {"used": json.dumps({key_id: to_us(when) for key_id, when in used.items()})}
        await self._write(lambda conn: _execute(conn, SQL.touch_keys.text, params))

    async def reseal_secrets(self) -> ResealReport:
        async def write(statement: Statement, params: Mapping[str, Any]) -> list[sqlite3.Row]:
            return await self._write(lambda conn: conn.execute(statement.text, params).fetchall())

        return await reseal_all(RESEAL, self._columns, self._query, write)

    async def create_tenant(
        self,
        tenant: str,
        *,
        now: datetime,
        webhook_secrets: Sequence[str] = (),
        limits: TenantLimits = NO_LIMITS,
    ) -> Tenant:
        params = {
            "tenant": tenant,
            "now": to_us(now),
            "webhook_secrets": self._columns.write_secrets(
                tuple(webhook_secrets), purpose=TENANT_SECRETS
            ),
            "limits": rows.limits_text(limits),
        }
        row = await self._write(
            lambda conn: conn.execute(SQL.insert_tenant.text, params).fetchone()
        )
        self._run_caps.invalidate()  # its limits count from the next lease on
        if row is None:
            raise TenantExists(tenant)
        return rows.tenant_from_row(row, self._columns)

    async def set_tenant_egress(self, tenant: str, egress: EgressRules, *, now: datetime) -> Tenant:
        params = {"tenant": tenant, "egress": rows.egress_text(egress), "now": to_us(now)}
        row = await self._write(
            lambda conn: conn.execute(SQL.set_tenant_egress.text, params).fetchone()
        )
        if row is None:
            raise NotFound("tenant", tenant)
        return rows.tenant_from_row(row, self._columns)

    async def set_tenant_limits(
        self,
        tenant: str,
        limits: TenantLimits,
        *,
        now: datetime,
        expected_updated_at: datetime | None = None,
    ) -> Tenant:
        params = rows.tenant_limits_params(tenant, limits, now, expected_updated_at)
        row = await self._write(
            lambda conn: conn.execute(SQL.set_tenant_limits.text, params).fetchone()
        )
        self._run_caps.invalidate()
        if row is None:
            raise await missing_or_stale(self, tenant)
        return rows.tenant_from_row(row, self._columns)

    async def delete_tenant(self, tenant: str, *, now: datetime) -> None:
        params = {"tenant": tenant, "now": to_us(now)}

        def delete(conn: sqlite3.Connection) -> tuple[bool, int]:
            found = conn.execute(SQL.tenant_jobs.text, params).fetchone()
            if found["found"] and not found["jobs"]:
                conn.execute(SQL.delete_tenant.text, params)
                conn.execute(SQL.revoke_tenant_keys.text, params)
            return bool(found["found"]), int(found["jobs"])

        existed, jobs = await self._write(delete)
        if not existed:
            raise NotFound("tenant", tenant)
        if jobs:
            raise TenantHasJobs(tenant, jobs)

    # -- the audit log (AuditStore; list_audit is SqlReads') -----------------------------------
    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        if not entries:
            return
        params = [rows.audit_params(e) for e in entries]
        # closed on the writer's thread, as in _execute: concurrent audit writes share this text
        await self._write(lambda conn: conn.executemany(SQL.insert_audit.text, params).close())

    async def prune_audit(self, *, before: datetime, limit: int) -> int:
        params = {"before": to_us(before), "limit": limit}
        return await self._write(lambda conn: conn.execute(SQL.prune_audit.text, params).rowcount)

    async def redrive(self, run_ids: Sequence[int] | None, *, now: datetime) -> int:
        params = {"ids": _id_list(run_ids), "now": to_us(now)}
        redriven = await self._write(lambda conn: conn.execute(SQL.redrive.text, params).rowcount)
        if redriven:
            self._watchers.notify("runs")
        return redriven

    async def purge_dead_letters(self, run_ids: Sequence[int] | None) -> int:
        params = {"ids": _id_list(run_ids)}
        return await self._write(
            lambda conn: conn.execute(SQL.purge_dead_letters.text, params).rowcount
        )

    async def prune_history(self, *, finished_before: datetime, limit: int) -> int:
        params = {"cutoff": to_us(finished_before), "limit": limit}

        def prune(conn: sqlite3.Connection) -> int:
            gone = 0
            for statement in (SQL.prune_attempts, SQL.prune_runs, SQL.prune_ledger):
                params["limit"] = max(limit - gone, 0)
                gone += conn.execute(statement.text, params).rowcount
            return gone

        return await self._write(prune)

    async def maintain_history(self, *, now: datetime, retention: timedelta) -> HistoryMaintenance:
        # SQLite has no partitions: prune_history's batched deletes are the whole retention.
        return HistoryMaintenance()


def _exists(conn: sqlite3.Connection, job_id: str) -> bool:
    return conn.execute(SQL.get_job.text, {"id": job_id}).fetchone() is not None


def _id_list(ids: Collection[int] | None) -> str | None:
    """A list of ids as JSON text for json_each (SQLite has no arrays); None stays NULL."""
    return None if ids is None else json.dumps([int(i) for i in ids])


def _lease_view(found: Sequence[sqlite3.Row]) -> LeaseView:
    now = from_us(found[0]["now_us"]) if found else datetime.now(UTC)
    return LeaseView(now=now, leases=tuple(rows.lease_from_row(r) for r in found))


def _room(conn: sqlite3.Connection, caps: Mapping[str, int], now_us: int) -> dict[str, int]:
    """The room each capped tenant has at `now_us` (cap minus its runs going)."""
    tenants = json.dumps(sorted(caps))
    found = conn.execute(SQL.running_by_tenant.text, {"tenants": tenants, "now": now_us})
    return room_left(caps, {row["tenant"]: int(row["n"]) for row in found})


def _runs_within_caps(
    conn: sqlite3.Connection, chosen: Mapping[str, Any], caps: Mapping[str, int]
) -> list[sqlite3.Row]:
    """runs_to_lease while some tenant has max_concurrent_runs (ADR 0024): the runs of the
    tenants at their cap are not read; of the others' a capped tenant gets its room."""
    room = _room(conn, caps, chosen["now"])
    full = json.dumps(sorted(t for t, left in room.items() if left <= 0))
    found = conn.execute(SQL.runs_to_lease_capped.text, {**chosen, "full": full}).fetchall()
    keep = set(pick_within_caps([(r["id"], r["tenant"]) for r in found], room, len(found)))
    return [r for r in found if r["id"] in keep]


def _fenced_within_caps(
    conn: sqlite3.Connection,
    params: list[dict[str, Any]],
    caps: Mapping[str, int],
    now: datetime,
) -> list[dict[str, Any]]:
    """The lease-by-fence pairs a capped tenant has room for, in their order; the others stay
    pending, unowned, and become leasable by lease_runs (refuse_for_cap)."""
    room = _room(conn, caps, to_us(now))
    ids = json.dumps([p["id"] for p in params])
    found = conn.execute(SQL.tenants_of_runs.text, {"ids": ids})
    tenant_of = {(row["id"], row["fence_token"]): row["tenant"] for row in found}
    chosen = []
    for p in params:
        tenant = tenant_of.get((p["id"], p["fence"]))
        if tenant is None:
            continue  # finished or superseded: it leases nothing, and takes no room
        if tenant in room:
            if room[tenant] <= 0:
                conn.execute(SQL.refuse_for_cap.text, {"id": p["id"], "fence": p["fence"]})
                continue
            room[tenant] -= 1
        chosen.append(p)
    return chosen


def _record_lost(conn: sqlite3.Connection, pairs: Sequence[tuple[int, int]]) -> None:
    """Append the lost attempts of the (run, fence) pairs about to be leased whose previous
    lease ended without an outcome (its owner still recorded); before the lease, which
    overwrites the owner and the start."""
    if pairs:
        conn.execute(SQL.record_lost_leases.text, {"pairs": json.dumps(pairs)})


def _finish(conn: sqlite3.Connection, params: list[dict[str, Any]]) -> tuple[list[int], int]:
    """Apply the outcomes; the runs they applied to, and how many held runs they released."""
    applied = []
    released = 0
    for p in params:
        done = conn.execute(SQL.finish_run.text, p).fetchone()
        if done is None:
            continue
        if p["status"] != RunStatus.SUCCEEDED.value:  # a success stays on its run (ADR 0033)
            conn.execute(SQL.insert_attempt.text, p)
        applied.append(p["run_id"])
        if done["releases_key"] is not None and p["retry_us"] is None:
            release = {"key": done["releases_key"], "finished_us": p["finished_us"]}
            held = {"held": HELD_LEASE_US}
            released += conn.execute(SQL.release_held_run.text, release | held).rowcount
    return applied, released


def _claim_common(owner: str, now: datetime, takeover_grace_ms: int) -> dict[str, Any]:
    overdue_before = now - timedelta(milliseconds=takeover_grace_ms)
    return {"owner": owner, "now": to_us(now), "overdue_before": to_us(overdue_before)}


Claimed_ = tuple[ClaimPlan, datetime, str, sqlite3.Row, int]


def _claimed_runs(
    conn: sqlite3.Connection,
    plans: Sequence[ClaimPlan],
    common: dict[str, Any],
    claim_job: str,
    insert_run: str,
) -> tuple[list[Claimed_], int]:
    """Both claims' loop: per plan, the job's compare-and-set, then its run's insert. Returns
    (plan, its occurrence, key, the claimed job's row, run id) for each run inserted, and how
    many plans were refused for their partition epoch alone."""
    done: list[Claimed_] = []
    refused = 0
    for plan in plans:
        params = {**common, **_plan_params(plan)}
        decision = _overlap(conn, plan)
        if decision.verdict is Verdict.SKIP:
            params["fired_us"] = None  # advance without counting a fire
            if plan.next_if_skipped is not None:  # not the max_runs-th fire after all
                params["new_next_us"] = to_us(plan.next_if_skipped)
                params["new_state"] = JobState.SCHEDULED.value
        claimed = conn.execute(claim_job, params).fetchone()
        if claimed is None:
            if plan.epoch is not None and conn.execute(SQL.claim_refused.text, params).fetchone():
                refused += 1  # the job is as planned: only the partition check said no
            continue
        if plan.catchup_first is not None:
            _create_catchup(conn, plan, params)
        scheduled_for = plan.scheduled_for
        if scheduled_for is None:
            _record_missed(conn, plan, params)
            continue
        key = occurrence_key(plan.job_id, scheduled_for)
        params.update(fence=claimed["fence_token"], key=key, coalesced=plan.coalesced)
        params["throttled_ms"] = plan.throttled_ms
        params.update(lease_epoch=claimed["lease_epoch"], fired_us=to_us(scheduled_for))
        if _apply_overlap(conn, decision, params):
            # Skipped or held back: no fire now. Occurrences folded into a skipped one are
            # skipped with it; into a held one, they are coalesced into the held run.
            skipped = decision.verdict is Verdict.SKIP
            _record_missed(conn, plan, params | {"key": None} if skipped else params)
            continue
        inserted = conn.execute(insert_run, params).fetchone()
        _record_missed(conn, plan, params)
        if inserted is None:
            continue  # this occurrence already has a run: never fire it twice
        done.append((plan, scheduled_for, key, claimed, inserted["id"]))
    return done, refused


def _record_missed(conn: sqlite3.Connection, plan: ClaimPlan, params: dict[str, Any]) -> None:
    """The ledger's row of a plan that folded or skipped occurrences (one statement, only for
    such plans: an on-time claim runs none)."""
    count = plan.coalesced if plan.missed_count is None else plan.missed_count
    if plan.missed_first is None or plan.missed_last is None or count <= 0:
        return
    params.setdefault("key", None)
    skipped = {"key": None} if plan.missed_count is not None else {}  # fire_all: not folded
    record = params | skipped
    record.update(
        missed_first_us=to_us(plan.missed_first),
        missed_last_us=to_us(plan.missed_last),
        coalesced=count,
    )
    conn.execute(SQL.record_missed.text, record)


def _create_catchup(conn: sqlite3.Connection, plan: ClaimPlan, params: dict[str, Any]) -> None:
    """The plan's catch-up backfill, in the claim's transaction (a crash loses neither)."""
    assert plan.catchup_first is not None
    assert plan.catchup_last is not None
    conn.execute(
        SQL.insert_catchup.text,
        {
            "job_id": plan.job_id,
            "from_us": to_us(plan.catchup_first),
            "last_us": to_us(plan.catchup_last),
            "total": plan.catchup_total,
            "rate_per_s": DEFAULT_BACKFILL_RATE,
            "now": params["now"],
        },
    )


def _overlap(conn: sqlite3.Connection, plan: ClaimPlan) -> Decision:
    """The overlap decision for a plan: a look-up through tw_runs_active, except for ALLOW."""
    if plan.overlap is OverlapPolicy.ALLOW or plan.scheduled_for is None:
        return FIRE
    found = conn.execute(SQL.pending_runs_of_job.text, {"job_id": plan.job_id}).fetchall()
    held = [r["id"] for r in found if r["lease_until_us"] == HELD_LEASE_US]
    active = [r["id"] for r in found if r["lease_until_us"] != HELD_LEASE_US]
    return decide(plan.overlap, active, held)


def _apply_overlap(conn: sqlite3.Connection, decision: Decision, params: dict[str, Any]) -> bool:
    """Apply a claimed plan's overlap decision; whether that took the place of its fire."""
    if decision.verdict is Verdict.SKIP:
        skip = params | {"blocker": decision.blocker}
        if not conn.execute(SQL.extend_skipped_overlap.text, skip).rowcount:
            conn.execute(SQL.record_skipped_overlap.text, skip)
        return True
    if decision.verdict is Verdict.HOLD:
        if conn.execute(SQL.insert_held_run.text, params | {"held": HELD_LEASE_US}).fetchone():
            conn.execute(SQL.mark_releases.text, params | {"blocker": decision.blocker})
        return True
    if decision.verdict is Verdict.CANCEL:
        cancel = {"job_id": params["job_id"], "now": params["now"], "error": CANCELLED_BY_OVERLAP}
        for run in conn.execute(SQL.cancel_runs_of_job.text, cancel).fetchall():
            if run["worker"] is not None:  # it was leased: its attempt ends here
                conn.execute(SQL.insert_attempt.text, _cancelled_attempt(run, params["now"]))
    return False


def _cancelled_attempt(run: sqlite3.Row, now_us: int) -> dict[str, Any]:
    return {
        "run_id": run["run_id"],
        "job_id": run["job_id"],
        "attempt": run["attempt"],
        "fence": run["fence"],
        "worker": run["worker"],
        "started_us": now_us,
        "finished_us": now_us,
        "status": RunStatus.CANCELLED.value,
        "http_status": None,
        "error": CANCELLED_BY_OVERLAP,
    }


def _claim(
    conn: sqlite3.Connection,
    plans: Sequence[ClaimPlan],
    common: dict[str, Any],
    lease_until: datetime,
    columns: SealedColumns,
) -> Claimed[Fire]:
    done, refused = _claimed_runs(
        conn, plans, common, SQL.claim_job_for_fire.text, SQL.insert_claimed_run.text
    )
    fires = []
    for plan, scheduled_for, key, claimed, run_id in done:
        target, tenant_secrets, on_failure, unreadable = rows.fire_parts(columns, claimed)
        fire = Fire(
            run_id=run_id,
            job_id=plan.job_id,
            key=key,
            scheduled_for=scheduled_for,
            planned_for=plan.planned_for,
            fence_token=claimed["fence_token"],
            attempt=1,
            target=target,
            lease_until=lease_until,
            retry=rows.retry_from_json(claimed["retry_policy"]),
            tenant_secrets=tenant_secrets,
            on_failure=on_failure,
            tenant=claimed["tenant"],
            unreadable=unreadable,
        )
        fires.append(fire)
    return Claimed(fires, refused=refused)


def _claim_hand_off(
    conn: sqlite3.Connection, plans: Sequence[ClaimPlan], common: dict[str, Any]
) -> Claimed[Envelope]:
    done, refused = _claimed_runs(
        conn, plans, common, SQL.claim_job.text, SQL.insert_handed_off_run.text
    )
    envelopes = (
        Envelope(
            run_id=run_id,
            job_id=plan.job_id,
            key=key,
            scheduled_for=scheduled_for,
            fence_token=claimed["fence_token"],
            attempt=0,  # a hand-off counts from its first lease
        )
        for plan, scheduled_for, key, claimed, run_id in done
    )
    return Claimed(envelopes, refused=refused)


def _plan_params(plan: ClaimPlan) -> dict[str, Any]:
    completed = plan.new_next_run_at is None
    return {
        "id": plan.job_id,
        "job_id": plan.job_id,
        "fence": plan.expected_fence,
        "expected_us": to_us(plan.expected_next_run_at),
        # A completed job keeps its last next_run_us so the API can still show it.
        "new_next_us": to_us(plan.expected_next_run_at if completed else plan.new_next_run_at),  # type: ignore[arg-type]
        "new_state": (JobState.COMPLETED if completed else JobState.SCHEDULED).value,
        "fired_us": rows.us_or_none(plan.scheduled_for),
        "planned_us": rows.us_or_none(plan.planned_for),
        "epoch": plan.epoch,
        # The runs of a job with an overlap policy enter tw_runs_active (migration 0010).
        "guarded": int(plan.overlap is not OverlapPolicy.ALLOW),
    }


def _execute(conn: sqlite3.Connection, text: str, params: Mapping[str, Any]) -> None:
    """Run one statement for its effect and close its cursor here, on the connection's thread.

    A cursor handed back to the event loop is freed there, and freeing it resets its prepared
    statement, which the connection's statement cache may have handed to this thread's next
    statement of the same text meanwhile: SQLite then refuses that one ("bad parameter or other
    API misuse"), as concurrent audit writes were.
    """
    conn.execute(text, params).close()


def _check_quota(conn: sqlite3.Connection, tenant: str) -> None:
    """QuotaExceeded if `tenant` is at its job quota. Runs in the insert's write transaction:
    SQLite admits one writer at a time, so no other create can slip in before the insert."""
    found = conn.execute(SQL.tenant_limits.text, {"tenant": tenant}).fetchone()
    limits = rows.limits_from_text(None if found is None else found["limits"])
    if limits.max_jobs is not None:
        [jobs] = conn.execute(SQL.count_tenant_jobs.text, {"tenant": tenant}).fetchone()
        check_job_quota(tenant, limits, int(jobs))
