"""PostgreSQL store: many schedulers and API processes on one database.

The claim is ONE statement per batch: a compare-and-set on (fence_token, next_run_at) over rows
taken with `FOR UPDATE SKIP LOCKED` (a row another scheduler is claiming is skipped, not
waited for), which advances each job and inserts its pending run in the same transaction.
Writes that should wake other processes send `NOTIFY tickwork, '<topic>'`; a dedicated
connection LISTENs and sets this process's watch events.

Hot statements run with `plan_cache_mode = force_custom_plan`: a generic plan cached while a
table was small or empty can stay slow after it fills (measured in shared/bench-anchors).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from tickwork.clock import to_us
from tickwork.domain.jobs import Job, JobState
from tickwork.domain.runs import Envelope, Fire, Run, RunOrigin, RunOutcome, occurrence_key
from tickwork.domain.tenants import Tenant
from tickwork.errors import NotFound, StaleJob, StoreError
from tickwork.store import pg_history
from tickwork.store.base import Applied, ClaimPlan, HistoryMaintenance, Topic, Watchers
from tickwork.store.pg_listen import NotifyListener
from tickwork.store.sql import rows
from tickwork.store.sql import statements as sql
from tickwork.store.sql.reads import SqlReads

log = logging.getLogger("tickwork.store.postgres")

CHANNEL = "tickwork"

# Both claims share the compare-and-set and advance of the jobs ($1-$8: the plans as arrays,
# $9: owner, recorded as the job's last claimer, $10: now); they differ in the run they insert
# and in what they return.
_CLAIM_JOBS = """
WITH plan AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[],
                         $6::bigint[], $7::int[], $8::text[])
        AS p(id, fence, expected_us, new_next_us, new_state, fired_us, coalesced, key)
),
locked AS (
    SELECT p.* FROM tw_jobs j JOIN plan p ON j.id = p.id
    WHERE j.id = ANY($1::text[])
      AND j.state = 'scheduled' AND j.fence_token = p.fence AND j.next_run_us = p.expected_us
    FOR UPDATE OF j SKIP LOCKED
),
claimed AS (
    UPDATE tw_jobs j
    SET fence_token = j.fence_token + 1, next_run_us = l.new_next_us, state = l.new_state,
        last_fired_us = coalesce(l.fired_us, j.last_fired_us), claimed_by = $9, claimed_us = $10
    FROM locked l
    WHERE j.id = l.id
    RETURNING j.id, j.fence_token, l.fired_us, l.coalesced, l.key
)"""
# In process: the run is leased to the claimer ($11: lease_until) at attempt 1, and the fire
# carries its job's and tenant's columns.
CLAIM = (
    _CLAIM_JOBS
    + """,
inserted AS (
    INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                         coalesced, lease_owner, lease_until_us, created_us)
    SELECT id, key, 'schedule', fired_us, 'pending', 1, fence_token, coalesced, $9, $11, $10
    FROM claimed WHERE fired_us IS NOT NULL
    ON CONFLICT (key) DO NOTHING
    RETURNING id, job_id, key, scheduled_us, fence_token, attempt
)
SELECT i.id, i.job_id, i.key, i.scheduled_us, i.fence_token, i.attempt, j.target, j.retry_policy,
       j.webhook_secrets, j.on_failure, t.webhook_secrets AS tenant_secrets
FROM inserted i JOIN tw_jobs j ON j.id = i.job_id LEFT JOIN tw_tenants t ON t.tenant = j.tenant
"""
)
# The last join reads `target` from the statement's snapshot of tw_jobs by primary key (the claim
# does not change it). Joining `inserted` to `claimed` instead made PostgreSQL, which estimates
# both CTEs at one row, run a nested loop of batch x batch comparisons (200 ms of 250 ms per
# 1,000-row claim, measured by bench/).
#
# Hand-off: the run is left unowned at attempt 0, leasable from its own instant; the statement
# returns only the envelope's columns, straight from the insert (no join, no job text to send
# or decode).
CLAIM_HAND_OFF = (
    _CLAIM_JOBS
    + """
INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                     coalesced, lease_owner, lease_until_us, created_us)
SELECT id, key, 'schedule', fired_us, 'pending', 0, fence_token, coalesced, NULL, fired_us, $10
FROM claimed WHERE fired_us IS NOT NULL
ON CONFLICT (key) DO NOTHING
RETURNING id, job_id, key, scheduled_us, fence_token, attempt
"""
)
LEASE_RUNS = """
UPDATE tw_runs r SET fence_token = r.fence_token + 1, attempt = r.attempt + 1,
    lease_owner = $1, lease_until_us = $2
FROM tw_jobs j LEFT JOIN tw_tenants t ON t.tenant = j.tenant
WHERE r.id = ANY(ARRAY(
        SELECT id FROM tw_runs WHERE status = 'pending' AND lease_until_us <= $3
        ORDER BY lease_until_us LIMIT $4 FOR UPDATE SKIP LOCKED))
  AND j.id = r.job_id
RETURNING r.id, r.job_id, r.key, r.scheduled_us, r.fence_token, r.attempt, j.target,
    j.retry_policy, j.webhook_secrets, j.on_failure, t.webhook_secrets AS tenant_secrets
"""
# `locked`: the runs of a batch of (id, fence) pairs that are still pending at that fence,
# locked. Each is reached through the primary key, one lookup per pair (LATERAL ... LIMIT 1
# cannot be flattened into a join), never through `tw_runs_pending`: in a burst the planner's
# statistics still say that pending runs are rare (in a table of history they are) while
# 100,000 are pending, and the join it planned on that belief read every pending run for each
# batch: 40-80 µs per fire with 30,000 pending, more as the burst grows (ADR 0012). Pairs are
# walked in id order, so two workers locking overlapping batches (a redelivered message) queue
# behind each other instead of deadlocking; a waiter re-checks the fence on the row's new
# version and finds it moved. The statement that uses it updates `id = ANY(ARRAY(SELECT id
# FROM locked))` with no second check: the rows are locked.
_LOCKED_BY_FENCE = """
locked AS (
    SELECT r.id FROM ({pairs} ORDER BY id) w CROSS JOIN LATERAL (
        SELECT id FROM tw_runs
        WHERE id = w.id AND fence_token = w.fence AND status = 'pending'
        LIMIT 1 FOR UPDATE
    ) r
)"""
# The runs a worker fetched from an external queue, leased in one statement: the same
# compare-and-set on the fence as LEASE_RUN, over (id, fence) pairs.
LEASE_FENCED = (
    "WITH"
    + _LOCKED_BY_FENCE.format(
        pairs="SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS p(id, fence)"
    )
    + """
UPDATE tw_runs r SET fence_token = r.fence_token + 1, attempt = r.attempt + 1,
    lease_owner = $3, lease_until_us = $4
FROM tw_jobs j LEFT JOIN tw_tenants t ON t.tenant = j.tenant
WHERE r.id = ANY(ARRAY(SELECT id FROM locked)) AND j.id = r.job_id
RETURNING r.id, r.job_id, r.key, r.scheduled_us, r.fence_token, r.attempt, j.target,
    j.retry_policy, j.webhook_secrets, j.on_failure, t.webhook_secrets AS tenant_secrets
"""
)
# The job's and tenant's columns come from one join, not from FIRE_RETURNING's five lookups by
# primary key: every claim leaves a dead version of the job row (and a dead entry in its
# primary key) until vacuum, and each lookup walked them; with five per run the lease cost
# ~100 µs per fire at 3,000/s (bench.pg_statements).
RELET_OWN = f"""
UPDATE tw_runs SET lease_until_us = $4
FROM unnest($1::bigint[], $2::bigint[]) AS w(run_id, fence)
WHERE tw_runs.id = w.run_id AND tw_runs.fence_token = w.fence AND tw_runs.status = 'pending'
    AND tw_runs.lease_owner = $3
RETURNING {sql.FIRE_RETURNING}
"""
# Leases of ours that a lost LEASE_RUNS reply may have left live, taken back in one statement:
# the fence stays, the lease is renewed. The inner select finds them through the pending-lease
# index (tw_runs_pending) and locks them, waiting rather than skipping, so a run is not missed
# for a lease TTL because a moment's lock hid it; a lock that waits re-checks the row, so a run
# finished or leased elsewhere meanwhile drops out, and the outer WHERE says so once more.
TAKE_BACK_OWN = f"""
UPDATE tw_runs SET lease_until_us = $4
WHERE id = ANY(ARRAY(
        SELECT id FROM tw_runs
        WHERE status = 'pending' AND lease_owner = $1 AND lease_until_us > $2
          AND id <> ALL($3::bigint[])
        ORDER BY lease_until_us, id LIMIT $5 FOR UPDATE))
  AND status = 'pending' AND lease_owner = $1 AND lease_until_us > $2
RETURNING {sql.FIRE_RETURNING}
"""
# Outcomes and their attempt rows in one statement: only applied outcomes reach the history.
FINISH_RUNS = (
    """
WITH o AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::bigint[],
                         $6::int[], $7::text[], $8::bigint[], $9::bigint[], $10::text[],
                         $11::int[], $12::text[])
        AS o(id, fence, status, started_us, finished_us, http_status, error, dead_us,
             retry_us, job_id, attempt, worker)
),"""
    + _LOCKED_BY_FENCE.format(pairs="SELECT id, fence FROM o")
    + """,
applied AS (
    UPDATE tw_runs r SET status = o.status, started_us = o.started_us,
        finished_us = o.finished_us, http_status = o.http_status, error = o.error,
        last_error = o.error, dead_lettered_us = o.dead_us, lease_owner = NULL,
        lease_until_us = o.retry_us
    FROM o
    WHERE r.id = ANY(ARRAY(SELECT id FROM locked)) AND r.id = o.id AND r.fence_token = o.fence
    RETURNING r.id, r.fence_token
)
INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us, finished_us,
                         status, http_status, error)
SELECT o.id, o.job_id, o.attempt, o.fence, o.worker, o.started_us, o.finished_us, o.status,
       o.http_status, o.error
-- On the fence too: a stale outcome of the same run in this batch must not ride along on the
-- current one's update (the chaos harness found two successes recorded that way).
FROM o JOIN applied a ON a.id = o.id AND a.fence_token = o.fence
RETURNING run_id
"""
)
REDRIVE = """
UPDATE tw_runs SET status = 'pending', dead_lettered_us = NULL, lease_owner = NULL,
    lease_until_us = $2
WHERE dead_lettered_us IS NOT NULL AND ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
"""
PURGE = """
UPDATE tw_runs SET dead_lettered_us = NULL
WHERE dead_lettered_us IS NOT NULL AND ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
"""
EXTEND_LEASES = """
UPDATE tw_runs r SET lease_until_us = $3
FROM unnest($1::bigint[], $2::bigint[]) AS l(id, fence)
WHERE r.id = l.id AND r.fence_token = l.fence AND r.status = 'pending'
"""
NOTIFY = "SELECT pg_notify($1, $2)"


def asyncpg_dsn(url: str) -> str:
    for prefix in ("postgresql+asyncpg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


# Set per connection at startup: asyncpg's pool runs RESET ALL when a connection is released,
# which would silently undo a plain SET (measured by bench/: claims fell back to generic plans).
SERVER_SETTINGS = {"plan_cache_mode": "force_custom_plan"}


async def _keep_session(_conn: asyncpg.Connection) -> None:
    """Pool reset that sends nothing. The default (RESET ALL, UNLISTEN *, ...) costs a round
    trip per statement; pooled connections here never change session state, LISTEN (the
    listener has its own connection) or take session-level advisory locks."""


class PostgresStore(SqlReads):
    def __init__(self, url: str, *, migrate: bool = True, pool_size: int = 10) -> None:
        self.url = url
        self._dsn = asyncpg_dsn(url)
        self._migrate = migrate
        self._pool_size = pool_size
        self._pool: asyncpg.Pool | None = None
        self._watchers = Watchers()
        self.listener = NotifyListener(self._dsn, CHANNEL, self._on_notify, self._after_relisten)

    # -- lifecycle --------------------------------------------------------------------------
    async def open(self) -> None:
        if self._migrate:
            from tickwork.store.migrate import upgrade

            await upgrade(self.url)
        try:
            self._pool = await asyncpg.create_pool(
                self._dsn,
                min_size=1,
                max_size=self._pool_size,
                server_settings=SERVER_SETTINGS,
                reset=_keep_session,
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        await self.listener.start()

    async def close(self) -> None:
        await self.listener.close()
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def watch(self, topic: Topic) -> asyncio.Event:
        return self._watchers.watch(topic)

    def _on_notify(self, payload: str) -> None:
        if payload == "jobs":
            self._watchers.notify("jobs")
        elif payload == "runs":
            self._watchers.notify("runs")

    def _after_relisten(self) -> None:
        """Wake every loop: what was notified while nobody listened must be found by a scan."""
        self._watchers.notify("jobs")
        self._watchers.notify("runs")

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("PostgresStore used before open()")
        return self._pool

    async def _query(self, statement: str, params: dict[str, Any]) -> list[asyncpg.Record]:
        text, names = sql.to_numbered(statement)
        try:
            return list(await self.pool.fetch(text, *(params[n] for n in names)))
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc

    async def _write_notify(
        self, statement: str, params: dict[str, Any], topic: Topic
    ) -> list[asyncpg.Record]:
        """Run one write and its NOTIFY in one transaction (the NOTIFY is sent at commit)."""
        text, names = sql.to_numbered(statement)
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                found = await conn.fetch(text, *(params[n] for n in names))
                await conn.execute(NOTIFY, CHANNEL, topic)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc
        self._watchers.notify(topic)
        return list(found)

    # -- jobs -------------------------------------------------------------------------------
    async def create_job(self, job: Job) -> Job:
        await self._write_notify(sql.INSERT_JOB, rows.job_params(job), "jobs")
        return job

    async def update_job(self, job: Job) -> Job:
        found = await self._write_notify(
            sql.UPDATE_JOB + f" RETURNING {rows.JOB_COLUMNS}", rows.job_params(job), "jobs"
        )
        if not found:
            await self.get_job(job.id)  # NotFound if it is gone
            raise StaleJob(f"job {job.id!r} was claimed since it was read")
        return rows.job_from_row(found[0])

    async def delete_job(self, job_id: str) -> None:
        found = await self._write_notify(sql.DELETE_JOB_AND_RUNS, {"id": job_id}, "jobs")
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
    ) -> list[Fire]:
        if not plans:
            return []
        args = (*_plan_columns(plans), owner, to_us(now), to_us(lease_until))
        try:
            found = await self.pool.fetch(CLAIM, *args)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error during claim: {exc}") from exc
        return [rows.fire_from_row(r, lease_until) for r in found]

    async def claim_hand_off(
        self, plans: Sequence[ClaimPlan], *, owner: str, now: datetime
    ) -> list[Envelope]:
        if not plans:
            return []
        args = (*_plan_columns(plans), owner, to_us(now))
        try:
            found = await self.pool.fetch(CLAIM_HAND_OFF, *args)
            if found:  # wake the workers of other processes
                await self.pool.execute(NOTIFY, CHANNEL, "runs")
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error during claim: {exc}") from exc
        if found:
            self._watchers.notify("runs")
        return [rows.envelope_from_row(r) for r in found]

    async def add_manual_run(self, job_id: str, *, now: datetime) -> Run:
        key = occurrence_key(job_id, now, RunOrigin.MANUAL)
        params = {"job_id": job_id, "key": key, "now": to_us(now)}
        await self._write_notify(sql.INSERT_MANUAL_RUN, params, "runs")
        found = await self._query(sql.GET_RUN_BY_KEY, params)
        if not found:
            raise NotFound("job", job_id)
        return rows.run_from_row(found[0])

    async def lease_runs(
        self, *, now: datetime, owner: str, lease_until: datetime, limit: int
    ) -> list[Fire]:
        try:
            found = await self.pool.fetch(LEASE_RUNS, owner, to_us(lease_until), to_us(now), limit)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error while leasing: {exc}") from exc
        return [rows.fire_from_row(r, lease_until) for r in found]

    async def lease_run(
        self, run_id: int, fence_token: int, *, owner: str, lease_until: datetime
    ) -> Fire | None:
        params = {"id": run_id, "fence": fence_token, "owner": owner}
        params["lease_until"] = to_us(lease_until)
        found = await self._query(sql.LEASE_RUN, params)
        return None if not found else rows.fire_from_row(found[0], lease_until)

    async def lease_fenced_runs(
        self, leases: Sequence[tuple[int, int]], *, owner: str, lease_until: datetime
    ) -> list[Fire]:
        return await self._by_fence(LEASE_FENCED, leases, owner, lease_until, "leasing")

    async def relet_own_runs(
        self, leases: Sequence[tuple[int, int]], *, owner: str, lease_until: datetime
    ) -> list[Fire]:
        return await self._by_fence(RELET_OWN, leases, owner, lease_until, "re-leasing")

    async def take_back_own_leases(
        self,
        *,
        owner: str,
        holding: Collection[int],
        now: datetime,
        lease_until: datetime,
        limit: int,
    ) -> list[Fire]:
        held = [int(i) for i in holding]
        try:
            found = await self.pool.fetch(
                TAKE_BACK_OWN, owner, to_us(now), held, to_us(lease_until), limit
            )
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error while taking back leases: {exc}") from exc
        return [rows.fire_from_row(r, lease_until) for r in found]

    async def _by_fence(
        self,
        statement: str,
        leases: Sequence[tuple[int, int]],
        owner: str,
        lease_until: datetime,
        doing: str,
    ) -> list[Fire]:
        """Run a ($1 ids, $2 fences, $3 owner, $4 lease_until) statement returning fires."""
        if not leases:
            return []
        # A pair repeated in the batch would join its row twice; one lease is all it may get.
        unique = list(dict.fromkeys(leases))
        ids = [run_id for run_id, _ in unique]
        fences = [fence for _, fence in unique]
        try:
            found = await self.pool.fetch(statement, ids, fences, owner, to_us(lease_until))
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error while {doing}: {exc}") from exc
        return [rows.fire_from_row(r, lease_until) for r in found]

    async def extend_leases(
        self, leases: Sequence[tuple[int, int]], *, lease_until: datetime
    ) -> int:
        if not leases:
            return 0
        ids = [run_id for run_id, _ in leases]
        fences = [fence for _, fence in leases]
        try:
            status = await self.pool.execute(EXTEND_LEASES, ids, fences, to_us(lease_until))
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error while extending leases: {exc}") from exc
        return int(status.split()[-1])

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        if not outcomes:
            return Applied(())
        # One outcome per (run, fence): a repeat would join the applied row twice.
        unique = {(o.run_id, o.fence_token): o for o in outcomes}
        params = [rows.outcome_params(o) for o in unique.values()]
        names = ("id", "fence", "status", "started_us", "finished_us", "http_status", "error",
                 "dead_us", "retry_us", "job_id", "attempt", "worker")  # fmt: skip
        columns = [[p[name] for p in params] for name in names]
        try:
            applied = await self.pool.fetch(FINISH_RUNS, *columns)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error while recording runs: {exc}") from exc
        return Applied(r["run_id"] for r in applied)

    async def get_tenant(self, tenant: str) -> Tenant | None:
        found = await self._query(sql.GET_TENANT, {"tenant": tenant})
        return rows.tenant_from_row(found[0]) if found else None

    async def set_tenant_secrets(
        self, tenant: str, secrets: Sequence[str], *, now: datetime
    ) -> Tenant:
        params = {
            "tenant": tenant,
            "webhook_secrets": rows.secrets_json(tuple(secrets)),
            "now": to_us(now),
        }
        found = await self._query(sql.SET_TENANT_SECRETS, params)
        return rows.tenant_from_row(found[0])

    async def redrive(self, run_ids: Sequence[int] | None, *, now: datetime) -> int:
        ids = None if run_ids is None else list(run_ids)
        redriven = await self._execute_notify(REDRIVE, (ids, to_us(now)), "runs")
        return redriven

    async def purge_dead_letters(self, run_ids: Sequence[int] | None) -> int:
        ids = None if run_ids is None else list(run_ids)
        try:
            status = await self.pool.execute(PURGE, ids)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error while purging: {exc}") from exc
        return int(status.split()[-1])

    async def prune_history(self, *, finished_before: datetime, limit: int) -> int:
        cutoff = to_us(finished_before)
        gone = 0
        # Attempts only from DEFAULT: daily partitions go whole, in maintain_history (ADR 0007).
        for statement in (pg_history.PRUNE_DEFAULT, sql.PRUNE_RUNS):
            text, _ = sql.to_numbered(statement)  # parameters: cutoff, limit
            try:
                status = await self.pool.execute(text, cutoff, max(limit - gone, 0))
            except (OSError, asyncpg.PostgresError) as exc:
                raise StoreError(f"PostgreSQL error while pruning history: {exc}") from exc
            gone += int(status.split()[-1])
        return gone

    async def maintain_history(self, *, now: datetime, retention: timedelta) -> HistoryMaintenance:
        try:
            async with self.pool.acquire() as conn:
                return await pg_history.maintain(conn, now=now, retention=retention)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(
                f"PostgreSQL error while maintaining history partitions: {exc}"
            ) from exc

    async def _execute_notify(self, statement: str, args: tuple[Any, ...], topic: Topic) -> int:
        """Run one write and NOTIFY `topic` at its commit if it changed anything."""
        try:
            async with self.pool.acquire() as conn, conn.transaction():
                changed = int((await conn.execute(statement, *args)).split()[-1])
                if changed:
                    await conn.execute(NOTIFY, CHANNEL, topic)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc
        if changed:
            self._watchers.notify(topic)
        return changed


def _plan_columns(plans: Sequence[ClaimPlan]) -> tuple[list[Any], ...]:
    """The plans as parallel arrays for unnest(): one round trip for the whole batch."""
    ids, fences, expected, new_next, states, fired, coalesced, keys = ([] for _ in range(8))
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
    return ids, fences, expected, new_next, states, fired, coalesced, keys
