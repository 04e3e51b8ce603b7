"""PostgreSQL store: many schedulers and API processes on one database.

The claim is ONE statement per batch (`claim` / `claim_hand_off` in sql/postgres.sql): a
compare-and-set on (fence_token, next_run_at) over rows taken with `FOR UPDATE SKIP LOCKED` (a
row another scheduler is claiming is skipped, not waited for), which advances each job and
inserts its pending run in the same transaction. Writes that should wake other processes send
`NOTIFY tickwork, '<topic>'`; a dedicated connection LISTENs and sets this process's watch
events.

Every driver call goes through `_fetch` / `_execute` (or `translated` directly), so driver
errors become store errors in one place (`errors.py`).

The due-scan reads only the partitions a scheduler holds: one range of the index
(partition, next_run_us) per partition, merged in time order (`due_jobs_in_partitions`). Those
statements run on a pool of their own with generic plans: every branch is an index range scan
whatever the parameters, and planning 64 branches afresh took about 2 ms of each tick (ADR 0015).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from tickwork.clock import from_us, to_us
from tickwork.domain.audit import AuditEntry
from tickwork.domain.backfills import DEFAULT_BACKFILL_RATE, Backfill, BackfillSlice
from tickwork.domain.egress import EgressRules
from tickwork.domain.jobs import Job, JobState, OverlapPolicy
from tickwork.domain.keys import ApiKey
from tickwork.domain.occurrences import LedgerRange
from tickwork.domain.partitions import DEFAULT_PARTITIONS, DueHead, Node
from tickwork.domain.runs import Envelope, Fire, Run, RunOutcome, manual_key, occurrence_key
from tickwork.domain.tenant_limits import NO_LIMITS, TenantLimits, check_job_quota
from tickwork.domain.tenants import Tenant
from tickwork.errors import Conflict, NotFound, StaleJob, StoreError, TenantExists, TenantHasJobs
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
    all_plain,
    distinct_leases,
    last_outcome_per_lease,
    missing_or_stale,
)
from tickwork.store.postgres import history
from tickwork.store.postgres.connect import (
    SERVER_SETTINGS,
    asyncpg_dsn,
    keep_session,
    names_itself,
    session_name,
)
from tickwork.store.postgres.errors import translated
from tickwork.store.postgres.listen import NotifyListener
from tickwork.store.postgres.statements import SQL
from tickwork.store.run_caps import RunCaps
from tickwork.store.schema_head import postgres_at_head
from tickwork.store.sql import rows
from tickwork.store.sql.backfills import (
    SqlBackfillReads,
    backfill_from_row,
    backfill_params,
    slice_keys,
    slice_params,
)
from tickwork.store.sql.named import Statement
from tickwork.store.sql.reads import EARLIEST_US, SqlReads, floor_us
from tickwork.store.sql.reseal import ResealStatements, reseal_all
from tickwork.store.sql.sealed import TENANT_SECRETS, SealedColumns

log = logging.getLogger("tickwork.store.postgres")

CHANNEL = "tickwork"
# The capped leases' lock (ADR 0024), a fixed signed 64-bit key: sha256("tickwork-run-caps").
RUN_CAPS_LOCK = int.from_bytes(
    hashlib.sha256(b"tickwork-run-caps").digest()[:8], "big", signed=True
)
TOPICS: tuple[Topic, ...] = ("jobs", "runs", "cluster")
# The scan pool's sessions: generic plans for the due-scan's unions (see the module docstring).
SCAN_SETTINGS = {"plan_cache_mode": "force_generic_plan"}
# The due-scan unions one branch per partition held: ~300 characters each, 19 KB for all 64,
# over asyncpg's default cacheable size (15 KB), which made it parse and plan on every tick
# (5-9 ms instead of 0.4-0.5 ms with nothing due; bench/partitions scan). A scheduler holds
# one set of partitions at a time, so a few large entries is all the cache ever keeps.
SCAN_CACHEABLE_BYTES = 512 * 1024  # room for MAX_PARTITIONS branches
SCAN_CACHE_STATEMENTS = 32
RESEAL = ResealStatements(
    job_page=SQL.job_secret_columns,
    reseal_job=SQL.reseal_job,
    tenants=SQL.tenant_secret_columns,
    reseal_tenant=SQL.reseal_tenant,
)


class PostgresStore(SqlReads, SqlBackfillReads):
    def __init__(
        self,
        url: str,
        *,
        migrate: bool = True,
        pool_size: int = 10,
        keyring: Keyring | None = None,
        node_id: str | None = None,
    ) -> None:
        self.url = url
        # A process's sessions carry its node id (application_name), announced in its
        # heartbeat, so that another scheduler can tell when it is gone (gone_nodes, ADR 0032).
        # A store made without one (tools, tests), or on a URL that names its sessions itself,
        # announces nothing and is never judged gone that way.
        self._session = session_name(node_id) if node_id and not names_itself(url) else None
        named = {} if self._session is None else {"application_name": self._session}
        self._columns = SealedColumns(keyring)
        self._dsn = asyncpg_dsn(url)
        self._migrate = migrate
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._scan_pool: asyncpg.Pool | None = None
        self._partitions = DEFAULT_PARTITIONS
        self._watchers = Watchers()
        self._settings = {**SERVER_SETTINGS, **named}
        self._scan_settings = {**SCAN_SETTINGS, **named}
        self.listener = NotifyListener(
            self._dsn, CHANNEL, self._on_notify, self._after_relisten, server_settings=named
        )
        self._sql = SQL
        self._run_caps = RunCaps(self._read_run_caps)

    # -- lifecycle --------------------------------------------------------------------------
    async def open(self) -> None:
        if self._migrate and not await postgres_at_head(self._dsn):
            from tickwork.store.migrate import upgrade

            await upgrade(self.url)
        with translated("connecting"):
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=1,
                max_size=self._pool_size,
                server_settings=self._settings,
                reset=keep_session,
            )
            self._scan_pool = await asyncpg.create_pool(
                self._dsn,
                min_size=1,
                max_size=2,
                server_settings=self._scan_settings,
                reset=keep_session,
                statement_cache_size=SCAN_CACHE_STATEMENTS,
                max_cacheable_statement_size=SCAN_CACHEABLE_BYTES,
            )
        found = await self._query(self._sql.get_meta, {"key": "partitions"})
        self._partitions = int(found[0]["value"])
        await self.listener.start()

    async def close(self) -> None:
        await self.listener.close()
        for pool in (self._pool, self._scan_pool):
            if pool is not None:
                await pool.close()
        self._pool = self._scan_pool = None

    def watch(self, topic: Topic) -> asyncio.Event:
        return self._watchers.watch(topic)

    def _on_notify(self, payload: str) -> None:
        if payload in TOPICS:
            self._watchers.notify(payload)

    def _after_relisten(self) -> None:
        """Wake every loop: what was notified while nobody listened must be found by a scan."""
        for topic in TOPICS:
            self._watchers.notify(topic)

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("PostgresStore used before open()")
        return self._pool

    # -- the driver, behind the error map ------------------------------------------------------
    async def _fetch(
        self, statement: Statement, values: Mapping[str, Any], doing: str
    ) -> list[asyncpg.Record]:
        with translated(doing):
            return list(await self.pool.fetch(statement.text, *statement.args(values)))

    async def _execute(self, statement: Statement, values: Mapping[str, Any], doing: str) -> int:
        """Run a write; returns how many rows it changed."""
        with translated(doing):
            status = await self.pool.execute(statement.text, *statement.args(values))
        return int(status.split()[-1])

    async def _query(self, statement: Statement, params: Mapping[str, Any]) -> list[asyncpg.Record]:
        return await self._fetch(statement, params, f"running {statement.name}")

    async def _write_notify(
        self, statement: Statement, values: Mapping[str, Any], topic: Topic
    ) -> list[asyncpg.Record]:
        """Run one write and NOTIFY `topic` at its commit (the NOTIFY is sent at commit)."""
        with translated(f"running {statement.name}"):
            async with self.pool.acquire() as conn, conn.transaction():
                found = await conn.fetch(statement.text, *statement.args(values))
                await self._notify(conn, topic)
        self._watchers.notify(topic)
        return list(found)

    async def _execute_notify(
        self, statement: Statement, values: Mapping[str, Any], topic: Topic
    ) -> int:
        """Run one write and NOTIFY `topic` at its commit if it changed anything."""
        with translated(f"running {statement.name}"):
            async with self.pool.acquire() as conn, conn.transaction():
                status = await conn.execute(statement.text, *statement.args(values))
                changed = int(status.split()[-1])
                if changed:
                    await self._notify(conn, topic)
        if changed:
            self._watchers.notify(topic)
        return changed

    async def _notify(self, conn: Any, topic: Topic) -> None:
        await conn.execute(self._sql.notify.text, CHANNEL, topic)

    # -- jobs -------------------------------------------------------------------------------
    async def create_job(self, job: Job, *, check_quota: bool = False) -> Job:
        values = rows.job_params(job, partitions=self._partitions, sealed=self._columns)
        if not check_quota:
            await self._write_notify(self._sql.insert_job, values, "jobs")
            return job
        with translated("running insert_job within the tenant's quota"):
            async with self.pool.acquire() as conn, conn.transaction():
                # The lock makes concurrent creates of this tenant queue here; each then
                # counts in a statement of its own, whose snapshot sees the jobs the creates
                # before it committed (READ COMMITTED takes a snapshot per statement).
                tenant = {"tenant": job.tenant}
                found = await _fetch(conn, self._sql.lock_tenant_limits, tenant)
                limits = rows.limits_from_text(found[0]["limits"] if found else None)
                if limits.max_jobs is not None:
                    [counted] = await _fetch(conn, self._sql.count_tenant_jobs, tenant)
                    check_job_quota(job.tenant, limits, int(counted["n"]))
                await _run(conn, self._sql.insert_job, values)
                await self._notify(conn, "jobs")
        self._watchers.notify("jobs")
        return job

    async def update_job(self, job: Job, *, ledger: Sequence[LedgerRange] = ()) -> Job:
        values = rows.job_params(job, partitions=self._partitions, sealed=self._columns)
        if ledger:
            found = await self._update_recording(values, ledger)
        else:
            found = await self._write_notify(self._sql.update_job, values, "jobs")
        if not found:
            await self.get_job(job.id)  # NotFound if it is gone
            raise StaleJob(f"job {job.id!r} was claimed since it was read")
        return rows.job_from_row(found[0], self._columns)

    async def _update_recording(
        self, values: Mapping[str, Any], ledger: Sequence[LedgerRange]
    ) -> list[asyncpg.Record]:
        """update_job and its ledger ranges in one transaction (none if the update is stale)."""
        with translated("running update_job"):
            async with self.pool.acquire() as conn, conn.transaction():
                found = await _fetch(conn, self._sql.update_job, values)
                if found:
                    for entry in ledger:
                        await _run(conn, self._sql.insert_ledger_range, rows.ledger_params(entry))
                    await self._notify(conn, "jobs")
        if found:
            self._watchers.notify("jobs")
        return found

    async def delete_job(self, job_id: str) -> None:
        found = await self._write_notify(self._sql.delete_job_and_runs, {"id": job_id}, "jobs")
        if not found:
            raise NotFound("job", job_id)

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
        values = _claim_values(plans, owner, now, takeover_grace_ms)
        values["lease_until"] = to_us(lease_until)
        statement = self._sql.claim_plain if all_plain(plans) else self._sql.claim
        found = await self._fetch(statement, values, "claiming")
        return Claimed(
            (
                rows.fire_from_row(r, lease_until, self._columns)
                for r in found
                if r["id"] is not None
            ),
            refused=_refused(found),
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
        values = _claim_values(plans, owner, now, takeover_grace_ms)
        plain = all_plain(plans)
        statement = self._sql.claim_hand_off_plain if plain else self._sql.claim_hand_off
        with translated("claiming"):
            found = await self.pool.fetch(statement.text, *statement.args(values))
            envelopes = [rows.envelope_from_row(r) for r in found if r["id"] is not None]
            if envelopes:  # wake the workers of other processes
                await self._notify(self.pool, "runs")
        if envelopes:
            self._watchers.notify("runs")
        return Claimed(envelopes, refused=_refused(found))

    async def due_jobs(
        self,
        until: datetime,
        limit: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        parts = self._parts(partitions)
        if not parts:
            return []
        statement = _over_partitions("due_jobs", parts)
        values = {"until": to_us(until), "limit": limit, "not_before": floor_us(not_before)}
        found = await self._scan(statement, values, "scanning for due jobs")
        return [rows.due_from_row(r) for r in found]

    async def count_due(
        self,
        until: datetime,
        cap: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> int:
        parts = self._parts(partitions)
        if not parts:
            return 0
        values = {"until": to_us(until), "limit": cap, "not_before": floor_us(not_before)}
        found = await self._scan(_over_partitions("count_due", parts), values, "counting due jobs")
        return int(found[0]["n"])

    async def next_due_at(
        self, not_before: datetime | None = None, *, partitions: Collection[int] | None = None
    ) -> datetime | None:
        parts = self._parts(partitions)
        if not parts:
            return None
        values = {"not_before": floor_us(not_before)}
        found = await self._scan(
            _over_partitions("next_due", parts), values, "looking for the next due job"
        )
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
        parts = self._parts(partitions)
        if not parts or not tenants:
            return {}
        values = {
            "tenants": list(tenants),
            "cap": cap,
            "until": to_us(until),
            "not_before": floor_us(not_before),
            "parts": list(parts),
        }
        found = await self._scan(self._sql.due_counts, values, "counting due jobs per tenant")
        return {(r["tenant"], r["priority"]): r["due"] for r in found}

    async def due_jobs_by_level(
        self,
        until: datetime,
        wanted: Mapping[Level, int],
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        parts = self._parts(partitions)
        levels = [(level, limit) for level, limit in wanted.items() if limit > 0]
        if not parts or not levels:
            return []
        values = {
            "tenants": [tenant for (tenant, _), _ in levels],
            "priorities": [priority for (_, priority), _ in levels],
            "limits": [limit for _, limit in levels],
            "until": to_us(until),
            "not_before": floor_us(not_before),
            "parts": list(parts),
        }
        found = await self._scan(self._sql.due_jobs_by_level, values, "scanning per tenant")
        return [rows.due_from_row(r) for r in found]

    async def tenant_limits(self) -> dict[str, TenantLimits]:
        found = await self._query(self._sql.all_tenant_limits, {})
        return {r["tenant"]: rows.limits_from_text(r["limits"]) for r in found}

    async def planned_counts(self, first_s: int, last_s: int) -> dict[int, int]:
        values = {
            "parts": list(range(self._partitions)),
            "lo": first_s * 1_000_000,
            "hi": (last_s + 1) * 1_000_000,
        }
        found = await self._scan(self._sql.planned_counts, values, "counting planned fires")
        return {r["second"]: r["fires"] for r in found}

    def _parts(self, partitions: Collection[int] | None) -> tuple[int, ...]:
        if partitions is None:
            return tuple(range(self._partitions))
        return tuple(sorted({p for p in partitions if 0 <= p < self._partitions}))

    async def _scan(
        self, statement: Statement, values: Mapping[str, Any], doing: str
    ) -> list[asyncpg.Record]:
        if self._scan_pool is None:
            raise StoreError("PostgresStore used before open()")
        with translated(doing):
            return list(await self._scan_pool.fetch(statement.text, *statement.args(values)))

    async def add_manual_run(self, job_id: str, *, now: datetime) -> Run:
        key = manual_key(job_id, now)
        values = {"job_id": job_id, "key": key, "now": to_us(now)}
        await self._write_notify(self._sql.insert_manual_run, values, "runs")
        found = await self._query(self._sql.get_run_by_key, values)
        if not found:
            raise NotFound("job", job_id)
        return rows.run_from_row(found[0])

    # -- backfills (the reads are SqlBackfillReads') -------------------------------------------
    async def create_backfill(self, backfill: Backfill) -> Backfill:
        found = await self._fetch(
            self._sql.insert_backfill, backfill_params(backfill), "creating a backfill"
        )
        return backfill_from_row(found[0])

    async def advance_backfill(self, advance: BackfillSlice, *, now: datetime) -> int | None:
        values = slice_params(advance, to_us(now)) | {
            "keys": slice_keys(advance),
            "at_us": [to_us(at) for at in advance.occurrences],
        }
        with translated("advancing a backfill"):
            async with self.pool.acquire() as conn, conn.transaction():
                [result] = await _fetch(conn, self._sql.advance_backfill, values)
                if result["inserted"]:
                    await self._notify(conn, "runs")
        if not result["moved"]:
            return None
        if result["inserted"]:
            self._watchers.notify("runs")
        return int(result["inserted"])

    async def cancel_backfill(self, backfill_id: int, *, now: datetime) -> Backfill:
        values = {"id": backfill_id, "now": to_us(now)}
        found = await self._fetch(self._sql.cancel_backfill, values, "cancelling a backfill")
        if not found:
            return await self.get_backfill(backfill_id)  # NotFound, or finished already
        return backfill_from_row(found[0])

    async def prune_backfills(self, *, before: datetime, limit: int) -> int:
        values = {"cutoff": to_us(before), "limit": limit}
        return await self._execute(self._sql.prune_backfills, values, "pruning backfills")

    async def partition_heads(
        self, now: datetime, partitions: Collection[int] | None = None
    ) -> dict[int, DueHead]:
        values = {"now": to_us(now), "partitions": list(self._parts(partitions))}
        return rows.heads_from_rows(await self._query(self._sql.partition_heads, values))

    async def gone_nodes(self, node_ids: Collection[str]) -> frozenset[str]:
        found = await self._query(self._sql.gone_nodes, {"ids": list(node_ids)})
        return frozenset(r["id"] for r in found)

    # -- partitions and nodes (ADR 0015) ----------------------------------------------------
    def partition_count(self) -> int:
        return self._partitions

    async def partition_leases(self) -> LeaseView:
        found = await self._query(self._sql.list_partition_leases, {})
        return _lease_view(found)

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
        changed = False
        with translated("updating partition leases"):
            async with self.pool.acquire() as conn, conn.transaction():
                if renew:
                    held = {"partitions": list(renew), "epochs": list(renew.values())}
                    await _run(conn, self._sql.renew_partition_leases, base | held)
                if release:
                    gone = {"partitions": sorted(release)}
                    status = await _run(conn, self._sql.release_partition_leases, base | gone)
                    changed = status != "UPDATE 0"
                if acquire:
                    wanted = {"partitions": sorted(acquire)}
                    taken = await _fetch(conn, self._sql.acquire_partition_leases, base | wanted)
                    changed = changed or bool(taken)
                if changed:
                    await self._notify(conn, "cluster")
                found = await _fetch(conn, self._sql.list_partition_leases, {})
        if changed:
            self._watchers.notify("cluster")
        return _lease_view(found)

    async def heartbeat_node(self, node: NodeAnnouncement, *, ttl_ms: int) -> list[Node]:
        with translated("announcing this node"):
            if self._session is not None:
                node = replace(node, info={**node.info, "session": self._session})
            async with self.pool.acquire() as conn, conn.transaction():
                params = rows.node_params(node, ttl_ms)
                [upsert] = await _fetch(conn, self._sql.heartbeat_node, params)
                found = await _fetch(conn, self._sql.list_nodes, {"all": False})
                if upsert["inserted"]:  # a new member: the others rebalance at once
                    await self._notify(conn, "cluster")
        if upsert["inserted"]:
            self._watchers.notify("cluster")
        return [rows.node_from_row(r) for r in found]

    async def leave(self, node_id: str) -> None:
        with translated("leaving the cluster"):
            async with self.pool.acquire() as conn, conn.transaction():
                await _run(conn, self._sql.remove_node, {"id": node_id})
                await _run(conn, self._sql.release_partitions_of, {"owner": node_id})
                await self._notify(conn, "cluster")
        self._watchers.notify("cluster")

    async def forget_node(self, node_id: str, role: str) -> None:
        await self._execute(self._sql.remove_node_role, {"id": node_id, "role": role}, "leaving")

    async def list_nodes(self, *, include_gone: bool = False) -> list[Node]:
        found = await self._query(self._sql.list_nodes, {"all": include_gone})
        return [rows.node_from_row(r) for r in found]

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
        values = {
            "owner": owner,
            "lease_until": to_us(lease_until),
            "now": to_us(now),
            "hand_offs_by": to_us(now if hand_offs_by is None else hand_offs_by),
            "limit": limit,
            "after": EARLIEST_US if after is None else to_us(after),
        }
        caps = await self._run_caps.current()
        if caps:  # max_concurrent_runs (ADR 0024): in time order, within each tenant's room
            found = await self._capped(self._sql.lease_runs_capped, values, caps, "leasing")
        elif fresh_from is None:
            found = await self._fetch(self._sql.lease_runs, values, "leasing")
        else:
            fresh = to_us(fresh_from)
            values["fresh_from"] = fresh
            # Without due_by the first range is empty: the fresh runs soonest first.
            values["due_by"] = fresh - 1 if due_by is None else to_us(min(due_by, now))
            values["ahead_first"] = min(max(ahead_first, 0), limit)
            found = await self._fetch(self._sql.lease_runs_fresh_first, values, "leasing")
        return [rows.fire_from_row(r, lease_until, self._columns) for r in found]

    async def _capped(
        self, statement: Statement, values: Mapping[str, Any], caps: Mapping[str, int], doing: str
    ) -> list[asyncpg.Record]:
        """A capped lease (ADR 0024): under the cluster-wide lock, so that its count of the
        running runs sees every capped lease that committed before it."""
        capped = {"capped": list(caps), "caps": list(caps.values()), "key": RUN_CAPS_LOCK}
        with translated(doing):
            async with self.pool.acquire() as conn, conn.transaction():
                await _run(conn, self._sql.lock_run_caps, capped)
                return await _fetch(conn, statement, {**values, **capped})

    async def lease_run(
        self, run_id: int, fence_token: int, *, owner: str, lease_until: datetime, now: datetime
    ) -> Fire | None:
        # The batch statement with one pair: one definition of a lease by fence.
        found = await self.lease_fenced_runs(
            [(run_id, fence_token)], owner=owner, lease_until=lease_until, now=now
        )
        return found[0] if found else None

    async def lease_fenced_runs(
        self,
        leases: Sequence[tuple[int, int]],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[Fire]:
        if not leases:
            return []
        # A pair repeated in the batch would join its row twice; one lease is all it may get.
        unique = distinct_leases(leases)
        values = {
            "ids": [run_id for run_id, _ in unique],
            "fences": [fence for _, fence in unique],
            "owner": owner,
            "lease_until": to_us(lease_until),
            "now": to_us(now),
        }
        caps = await self._run_caps.current()
        if caps:
            statement = self._sql.lease_fenced_runs_capped
            found = await self._capped(statement, values, caps, "leasing by fence")
        else:
            found = await self._fetch(self._sql.lease_fenced_runs, values, "leasing by fence")
        return [rows.fire_from_row(r, lease_until, self._columns) for r in found]

    async def release_leases(self, owners: Collection[str], *, now: datetime) -> int:
        if not owners:
            return 0
        values = {"owners": sorted(owners), "now": to_us(now)}
        return await self._execute_notify(self._sql.release_leases, values, "runs")

    async def take_back_own_leases(
        self,
        *,
        owner: str,
        holding: Collection[int],
        now: datetime,
        lease_until: datetime,
        limit: int,
    ) -> list[Fire]:
        values = {
            "owner": owner,
            "now": to_us(now),
            "holding": [int(i) for i in holding],
            "lease_until": to_us(lease_until),
            "limit": limit,
        }
        found = await self._fetch(self._sql.take_back_own_leases, values, "taking back leases")
        return [rows.fire_from_row(r, lease_until, self._columns) for r in found]

    async def extend_leases(
        self, leases: Sequence[tuple[int, int]], *, lease_until: datetime
    ) -> Extended:
        if not leases:
            return Extended(())
        unique = distinct_leases(leases)
        values = {
            "ids": [run_id for run_id, _ in unique],
            "fences": [fence for _, fence in unique],
            "lease_until": to_us(lease_until),
        }
        found = await self._fetch(self._sql.extend_leases, values, "extending leases")
        return Extended((r["id"], r["fence_token"]) for r in found)

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        if not outcomes:
            return Applied(())
        # One outcome per (run, fence): a repeat would also join the applied row twice.
        params = [rows.outcome_params(o) for o in last_outcome_per_lease(outcomes)]
        values: dict[str, Any] = {
            column: [p[name] for p in params] for column, name in _OUTCOME_ARRAYS.items()
        }
        values["held"] = HELD_LEASE_US
        applied = await self._fetch(self._sql.finish_runs, values, "recording runs")
        if any(r["run_id"] is None for r in applied):  # buffer_one released held runs
            with translated("recording runs"):
                await self._notify(self.pool, "runs")
            self._watchers.notify("runs")
        return Applied(r["run_id"] for r in applied if r["run_id"] is not None)

    async def get_tenant(self, tenant: str) -> Tenant | None:
        found = await self._query(self._sql.get_tenant, {"tenant": tenant})
        return rows.tenant_from_row(found[0], self._columns) if found else None

    async def set_tenant_secrets(
        self, tenant: str, secrets: Sequence[str], *, now: datetime
    ) -> Tenant:
        values = {
            "tenant": tenant,
            "webhook_secrets": self._columns.write_secrets(tuple(secrets), purpose=TENANT_SECRETS),
            "now": to_us(now),
        }
        found = await self._query(self._sql.set_tenant_secrets, values)
        return rows.tenant_from_row(found[0], self._columns)

    # -- API keys and tenants (AccessStore; the reads are SqlReads') --------------------------
    async def create_key(self, key: ApiKey) -> None:
        inserted = await self._fetch(self._sql.insert_key, rows.key_params(key), "storing a key")
        if not inserted:
            raise Conflict(f"a key with id {key.id!r} or with the same secret exists already")

    async def revoke_key(self, key_id: str, *, now: datetime) -> ApiKey:
        values = {"id": key_id, "now": to_us(now)}
        found = await self._fetch(self._sql.revoke_key, values, "revoking a key")
        if not found:
            raise NotFound("key", key_id)
        return rows.key_from_row(found[0])

    async def touch_keys(self, used: Mapping[str, datetime]) -> None:
        if not used:
            return
        values = {"ids": list(used), "used_us": [to_us(when) for when in used.values()]}
        await self._execute(self._sql.touch_keys, values, "recording when keys were used")

    async def reseal_secrets(self) -> ResealReport:
        async def write(statement: Statement, values: Mapping[str, Any]) -> list[asyncpg.Record]:
            return await self._fetch(statement, values, "re-sealing secrets")

        return await reseal_all(RESEAL, self._columns, self._query, write)

    async def create_tenant(
        self,
        tenant: str,
        *,
        now: datetime,
        webhook_secrets: Sequence[str] = (),
        limits: TenantLimits = NO_LIMITS,
    ) -> Tenant:
        values = {
            "tenant": tenant,
            "now": to_us(now),
            "webhook_secrets": self._columns.write_secrets(
                tuple(webhook_secrets), purpose=TENANT_SECRETS
            ),
            "limits": rows.limits_text(limits),
        }
        found = await self._fetch(self._sql.insert_tenant, values, "creating a tenant")
        self._run_caps.invalidate()  # its limits count from the next lease on
        if not found:
            raise TenantExists(tenant)
        return rows.tenant_from_row(found[0], self._columns)

    async def set_tenant_egress(self, tenant: str, egress: EgressRules, *, now: datetime) -> Tenant:
        values = {"tenant": tenant, "egress": rows.egress_text(egress), "now": to_us(now)}
        found = await self._fetch(self._sql.set_tenant_egress, values, "setting a tenant's lists")
        if not found:
            raise NotFound("tenant", tenant)
        return rows.tenant_from_row(found[0], self._columns)

    async def set_tenant_limits(
        self,
        tenant: str,
        limits: TenantLimits,
        *,
        now: datetime,
        expected_updated_at: datetime | None = None,
    ) -> Tenant:
        values = rows.tenant_limits_params(tenant, limits, now, expected_updated_at)
        found = await self._fetch(self._sql.set_tenant_limits, values, "setting a tenant's limits")
        self._run_caps.invalidate()
        if not found:
            raise await missing_or_stale(self, tenant)
        return rows.tenant_from_row(found[0], self._columns)

    async def delete_tenant(self, tenant: str, *, now: datetime) -> None:
        values = {"tenant": tenant, "now": to_us(now)}
        [result] = await self._fetch(self._sql.delete_tenant, values, "deleting a tenant")
        if not result["found"]:
            raise NotFound("tenant", tenant)
        if result["jobs"]:
            raise TenantHasJobs(tenant, int(result["jobs"]))

    # -- the audit log (AuditStore; list_audit is SqlReads') -----------------------------------
    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        if not entries:
            return
        params = [rows.audit_params(e) for e in entries]
        # One array per column (record_audit unnests them): one statement for the batch.
        values = {column: [p[column] for p in params] for column in params[0]}
        await self._execute(self._sql.record_audit, values, "recording the audit log")

    async def prune_audit(self, *, before: datetime, limit: int) -> int:
        values = {"before": to_us(before), "limit": limit}
        return await self._execute(self._sql.prune_audit, values, "pruning the audit log")

    async def redrive(self, run_ids: Sequence[int] | None, *, now: datetime) -> int:
        values = {"ids": None if run_ids is None else list(run_ids), "now": to_us(now)}
        return await self._execute_notify(self._sql.redrive, values, "runs")

    async def queue_mismatches(self) -> list[int]:
        """The runs whose row in tw_queue is missing, extra or disagrees with them: empty while
        ADR 0030's invariant holds (a check for tests and operators, not on any path)."""
        found = await self._query(self._sql.queue_mismatches, {})
        return [row["run_id"] for row in found]

    async def purge_dead_letters(self, run_ids: Sequence[int] | None) -> int:
        values = {"ids": None if run_ids is None else list(run_ids)}
        return await self._execute(self._sql.purge_dead_letters, values, "purging")

    async def prune_history(self, *, finished_before: datetime, limit: int) -> int:
        cutoff = to_us(finished_before)
        gone = 0
        # Attempts only from DEFAULT: daily partitions go whole, in maintain_history (ADR 0007).
        for statement in (
            self._sql.prune_default_attempts,
            self._sql.prune_runs,
            self._sql.prune_ledger,
        ):
            values = {"cutoff": cutoff, "limit": max(limit - gone, 0)}
            gone += await self._execute(statement, values, "pruning history")
        return gone

    async def maintain_history(self, *, now: datetime, retention: timedelta) -> HistoryMaintenance:
        with translated("maintaining history partitions"):
            async with self.pool.acquire() as conn:
                return await history.maintain(conn, now=now, retention=retention)


# finish_runs' array parameters, by the outcome_params name each is built from.
_OUTCOME_ARRAYS = {
    "ids": "id",
    "fences": "fence",
    "statuses": "status",
    "started_us": "started_us",
    "finished_us": "finished_us",
    "http_statuses": "http_status",
    "errors": "error",
    "dead_us": "dead_us",
    "retry_us": "retry_us",
    "job_ids": "job_id",
    "attempts": "attempt",
    "workers": "worker",
}


def _claim_values(
    plans: Sequence[ClaimPlan], owner: str, now: datetime, takeover_grace_ms: int
) -> dict[str, Any]:
    overdue_before = now - timedelta(milliseconds=takeover_grace_ms)
    return _plan_columns(plans) | {
        "owner": owner,
        "now": to_us(now),
        "overdue_before": to_us(overdue_before),
        "held": HELD_LEASE_US,
        "cancel_error": CANCELLED_BY_OVERLAP,
        "catchup_rate": DEFAULT_BACKFILL_RATE,
    }


def _refused(found: Sequence[asyncpg.Record]) -> int:
    """The claims' extra row: the plans refused for their partition epoch (ADR 0015)."""
    return sum(r["refused"] for r in found if r["id"] is None)


def _lease_view(found: Sequence[asyncpg.Record]) -> LeaseView:
    now = from_us(found[0]["now_us"]) if found else datetime.now(UTC)
    return LeaseView(now=now, leases=tuple(rows.lease_from_row(r) for r in found))


async def _run(conn: Any, statement: Statement, values: Mapping[str, Any]) -> str:
    return str(await conn.execute(statement.text, *statement.args(values)))


async def _fetch(conn: Any, statement: Statement, values: Mapping[str, Any]) -> list[Any]:
    return list(await conn.fetch(statement.text, *statement.args(values)))


# The statements that read the due index partition by partition (ADR 0015): each is a UNION
# ALL of one branch per partition inside an outer statement, by the kind of read.
_PER_PARTITION = {
    "due_jobs": (SQL.due_jobs_of_partition, SQL.due_jobs_in_partitions),
    "count_due": (SQL.count_due_of_partition, SQL.count_due_in_partitions),
    "next_due": (SQL.next_due_of_partition, SQL.next_due_in_partitions),
}


@functools.lru_cache(maxsize=192)
def _over_partitions(kind: str, parts: tuple[int, ...]) -> Statement:
    """The `kind` read of these partitions: one branch per partition (the numbers are ours)."""
    branch, outer = _PER_PARTITION[kind]
    union = " UNION ALL ".join(f"({branch.fill(partition=str(p))})" for p in parts)
    return outer.format(branches=union)


def _plan_columns(plans: Sequence[ClaimPlan]) -> dict[str, list[Any]]:
    """The plans as parallel arrays for unnest(): one round trip for the whole batch."""
    ids, fences, expected, new_next, states, fired, coalesced, keys, epochs, overlaps = (
        [] for _ in range(10)
    )
    skip_next: list[int | None] = []
    missed_first: list[int | None] = []
    missed_last: list[int | None] = []
    missed_counts: list[int | None] = []
    catchup_first: list[int | None] = []
    catchup_last: list[int | None] = []
    catchup_totals: list[int | None] = []
    throttled: list[int | None] = []
    for plan in plans:
        completed = plan.new_next_run_at is None
        ids.append(plan.job_id)
        fences.append(plan.expected_fence)
        expected.append(to_us(plan.expected_next_run_at))
        # A completed job keeps its last next_run_us so the API can still show it.
        new_next.append(to_us(plan.new_next_run_at or plan.expected_next_run_at))
        states.append((JobState.COMPLETED if completed else JobState.SCHEDULED).value)
        fired.append(rows.us_or_none(plan.scheduled_for))
        coalesced.append(plan.coalesced)
        keys.append(occurrence_key(plan.job_id, plan.scheduled_for) if plan.scheduled_for else None)
        epochs.append(plan.epoch)
        missed_first.append(rows.us_or_none(plan.missed_first))
        missed_last.append(rows.us_or_none(plan.missed_last))
        # NULL for allow (and for a plan that fires nothing): the claim probes nothing then.
        probe = plan.overlap is not OverlapPolicy.ALLOW and plan.scheduled_for is not None
        overlaps.append(plan.overlap.value if probe else None)
        skip_next.append(rows.us_or_none(plan.next_if_skipped))
        missed_counts.append(plan.missed_count)
        catchup_first.append(rows.us_or_none(plan.catchup_first))
        catchup_last.append(rows.us_or_none(plan.catchup_last))
        catchup_totals.append(plan.catchup_total if plan.catchup_first is not None else None)
        throttled.append(plan.throttled_ms)
    return {
        # The optional columns travel empty when no plan of the batch uses them (an on-time
        # batch): nothing to encode, send or unnest (unnest pads them with NULLs).
        "missed_first_us": _or_empty(missed_first),
        "missed_last_us": _or_empty(missed_last),
        "overlaps": _or_empty(overlaps),
        "skip_next_us": _or_empty(skip_next),
        "missed_counts": _or_empty(missed_counts),
        "catchup_first_us": _or_empty(catchup_first),
        "catchup_last_us": _or_empty(catchup_last),
        "catchup_totals": _or_empty(catchup_totals),
        "throttled_ms": _or_empty(throttled),
        "epochs": epochs,
        "ids": ids,
        "fences": fences,
        "expected_us": expected,
        "new_next_us": new_next,
        "new_states": states,
        "fired_us": fired,
        "coalesced": coalesced,
        "keys": keys,
    }


def _or_empty(column: list[Any]) -> list[Any]:
    """The column as given, or empty when every value is NULL (unnest pads it back)."""
    return column if any(v is not None for v in column) else []
