"""In-memory reference store: the contract in its plainest form, for unit tests.

Not durable and single-process; every method runs without awaiting, so each is atomic under
asyncio. Its "database clock" for partition leases and node heartbeats is the `clock` it is
given (the system clock by default).
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tickwork.clock import Clock, SystemClock, from_us, to_us
from tickwork.domain.audit import AuditEntry
from tickwork.domain.backfills import (
    Backfill,
    BackfillSlice,
    BackfillState,
    RunningBackfill,
    catchup_backfill,
)
from tickwork.domain.concurrency import caps_of, pick_within_caps, room_left
from tickwork.domain.egress import EgressRules
from tickwork.domain.jobs import Job, JobState, OverlapPolicy
from tickwork.domain.keys import ApiKey
from tickwork.domain.occurrences import LedgerRange, LedgerReason
from tickwork.domain.overlap import FIRE, Decision, Verdict, decide
from tickwork.domain.partitions import (
    DEFAULT_PARTITIONS,
    DueHead,
    Node,
    PartitionLease,
    partition_of,
)
from tickwork.domain.runs import (
    RELEASED_ERROR,
    AttemptRecord,
    AttemptStatus,
    Envelope,
    Fire,
    Run,
    RunOrigin,
    RunOutcome,
    RunStatus,
    ended_attempt,
    lost_attempt,
    manual_key,
    occurrence_key,
    success_attempt,
)
from tickwork.domain.tenant_limits import NO_LIMITS, TenantLimits, check_job_quota
from tickwork.domain.tenants import Tenant
from tickwork.errors import (
    Conflict,
    NotFound,
    StaleJob,
    StaleTenant,
    TenantExists,
    TenantHasJobs,
)
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
    JobQuery,
    LeaseView,
    Level,
    NodeAnnouncement,
    ResealReport,
    StoreStats,
    Topic,
    Watchers,
    distinct_leases,
    last_outcome_per_lease,
)

DEFAULT_TENANT = "default"  # the tenant every database starts with (migration 0006)
_HELD = from_us(HELD_LEASE_US)  # the lease end of a run buffer_one holds back


class MemoryStore:
    def __init__(self, *, clock: Clock | None = None, partitions: int = DEFAULT_PARTITIONS) -> None:
        self._clock = clock or SystemClock()
        self._partitions = partitions
        self._partition_leases = {
            p: PartitionLease(partition=p, owner=None, epoch=0, expires_at=_EPOCH)
            for p in range(partitions)
        }
        self._nodes: dict[tuple[str, str], Node] = {}  # by (id, role)
        self._jobs: dict[str, Job] = {}
        self._runs: dict[int, Run] = {}
        self._leases: dict[int, tuple[str | None, datetime]] = {}
        self._keys: set[str] = set()
        self._attempts: list[AttemptRecord] = []
        self._next_attempt_id = 1
        # A success is kept on its run, as the SQL stores keep it (ADR 0033): only the worker
        # that ran it is not a field of Run.
        self._finished_by: dict[int, str | None] = {}
        self._next_run_id = 1
        self._ledger: list[LedgerRange] = []  # in id order
        self._next_ledger_id = 1
        # A run still going when buffer_one held a newer one back -> the held run's key
        # (tw_runs.releases_key): finishing the first releases the second.
        self._releases: dict[int, str] = {}
        # The runs created while their job had an overlap policy (tw_runs.guarded): the only
        # runs the policies look for (tw_runs_active holds no others).
        self._guarded: set[int] = set()
        # Like a migrated database (0006), it starts with the `default` tenant.
        started = self._clock.now()
        self._tenants: dict[str, Tenant] = {
            DEFAULT_TENANT: Tenant(tenant=DEFAULT_TENANT, created_at=started, updated_at=started)
        }
        self._api_keys: dict[str, ApiKey] = {}
        self._audit: dict[int, AuditEntry] = {}  # by id, in id order
        self._next_audit_id = 1
        self._backfills: dict[int, Backfill] = {}  # by id, in id order
        self._next_backfill_id = 1  # never reused, like the SQL stores' identity columns
        self._watchers = Watchers()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    def watch(self, topic: Topic) -> asyncio.Event:
        return self._watchers.watch(topic)

    # -- jobs -------------------------------------------------------------------------------
    async def create_job(self, job: Job, *, check_quota: bool = False) -> Job:
        tenant = self._tenants.get(job.tenant)
        if check_quota and tenant is not None:
            jobs = sum(1 for j in self._jobs.values() if j.tenant == job.tenant)
            check_job_quota(job.tenant, tenant.limits, jobs)
        self._jobs[job.id] = job
        self._watchers.notify("jobs")
        return job

    async def get_job(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise NotFound("job", job_id) from None

    async def list_jobs(self, query: JobQuery) -> list[Job]:
        jobs = sorted(self._jobs.values(), key=lambda j: j.id)
        out = [j for j in jobs if _matches(j, query)]
        return out[: query.limit]

    async def update_job(self, job: Job, *, ledger: Sequence[LedgerRange] = ()) -> Job:
        current = await self.get_job(job.id)
        if current.fence_token != job.fence_token:
            raise StaleJob(f"job {job.id!r} was claimed since it was read")
        # Only the editable fields, state and next_run_at change (the SQL stores' UPDATE_JOB).
        stored = replace(
            job,
            created_at=current.created_at,
            last_fired_at=current.last_fired_at,
            fired_count=current.fired_count,
        )
        self._jobs[job.id] = stored
        for entry in ledger:
            self._record(entry)
        self._watchers.notify("jobs")
        return stored

    def _record(self, entry: LedgerRange) -> None:
        self._ledger.append(replace(entry, id=self._next_ledger_id))
        self._next_ledger_id += 1

    async def delete_job(self, job_id: str) -> None:
        await self.get_job(job_id)
        del self._jobs[job_id]
        for run_id in [r.id for r in self._runs.values() if r.job_id == job_id]:
            run = self._runs.pop(run_id)
            self._keys.discard(run.key)
            self._leases.pop(run_id, None)
            self._finished_by.pop(run_id, None)
        self._attempts = [a for a in self._attempts if a.job_id != job_id]
        for backfill_id in [b.id for b in self._backfills.values() if b.job_id == job_id]:
            del self._backfills[backfill_id]
        self._ledger = [e for e in self._ledger if e.job_id != job_id]
        self._watchers.notify("jobs")

    # -- fire path --------------------------------------------------------------------------
    async def due_jobs(
        self,
        until: datetime,
        limit: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        due = [
            j
            for j in self._due_from(not_before, partitions)
            if j.next_run_at <= until  # type: ignore[operator]
        ]
        due.sort(key=lambda j: j.next_run_at)  # type: ignore[arg-type, return-value]
        return [
            DueJob(
                job_id=j.id,
                fence_token=j.fence_token,
                next_run_at=j.next_run_at,  # type: ignore[arg-type]
                schedule=j.schedule,
                partition=self._partition(j.id),
                fired_count=j.fired_count,
                tenant=j.tenant,
                priority=j.priority,
            )
            for j in due[:limit]
        ]

    async def next_due_at(
        self, not_before: datetime | None = None, *, partitions: Collection[int] | None = None
    ) -> datetime | None:
        times = [j.next_run_at for j in self._due_from(not_before, partitions)]
        return min(times) if times else None  # type: ignore[type-var]

    async def due_counts(
        self,
        until: datetime,
        tenants: Sequence[str],
        cap: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> dict[Level, int]:
        wanted = set(tenants)
        counts: dict[Level, int] = {}
        for job in self._due_from(not_before, partitions):
            if job.tenant in wanted and job.next_run_at <= until:  # type: ignore[operator]
                level = (job.tenant, job.priority)
                counts[level] = min(cap, counts.get(level, 0) + 1)
        return counts

    async def count_due(
        self,
        until: datetime,
        cap: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> int:
        due = self._due_from(not_before, partitions)
        return min(sum(j.next_run_at <= until for j in due), cap)  # type: ignore[operator]

    async def due_jobs_by_level(
        self,
        until: datetime,
        wanted: Mapping[Level, int],
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        found: dict[Level, list[DueJob]] = {}
        due = await self.due_jobs(
            until, len(self._jobs), not_before=not_before, partitions=partitions
        )
        for job in due:
            level = (job.tenant, job.priority)
            if len(found.setdefault(level, [])) < wanted.get(level, 0):
                found[level].append(job)
        return [job for jobs in found.values() for job in jobs]

    async def tenant_limits(self) -> dict[str, TenantLimits]:
        return {name: tenant.limits for name, tenant in sorted(self._tenants.items())}

    async def planned_counts(self, first_s: int, last_s: int) -> dict[int, int]:
        counts: dict[int, int] = {}
        for job in self._jobs.values():
            if job.state is JobState.SCHEDULED and job.next_run_at is not None:
                second = to_us(job.next_run_at) // 1_000_000
                if first_s <= second <= last_s:
                    counts[second] = counts.get(second, 0) + 1
        return counts

    def _due_from(
        self, not_before: datetime | None, partitions: Collection[int] | None
    ) -> list[Job]:
        """Schedulable jobs whose next run is at or after `not_before` (all, if None), of the
        given partitions (all, if None)."""
        low = datetime.min.replace(tzinfo=UTC) if not_before is None else not_before
        wanted = None if partitions is None else set(partitions)
        return [
            j
            for j in self._jobs.values()
            if _schedulable(j)
            and j.next_run_at >= low  # type: ignore[operator]
            and (wanted is None or self._partition(j.id) in wanted)
        ]

    def _partition(self, job_id: str) -> int:
        return partition_of(job_id, self._partitions)

    async def claim(
        self,
        plans: Sequence[ClaimPlan],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
        takeover_grace_ms: int = DEFAULT_TAKEOVER_GRACE_MS,
    ) -> Claimed[Fire]:
        claimed, refused = self._claim_runs(plans, owner, now, takeover_grace_ms, attempt=1)
        fires = []
        for run, job in claimed:
            self._leases[run.id] = (owner, lease_until)
            fires.append(self._fire(run, job, lease_until))
        return Claimed(fires, refused=refused)

    async def claim_hand_off(
        self,
        plans: Sequence[ClaimPlan],
        *,
        owner: str,
        now: datetime,
        takeover_grace_ms: int = DEFAULT_TAKEOVER_GRACE_MS,
    ) -> Claimed[Envelope]:
        envelopes = []
        # attempt 0: a hand-off counts from its first lease
        claimed, refused = self._claim_runs(plans, owner, now, takeover_grace_ms, attempt=0)
        for run, _job in claimed:
            # free from its instant on (from its planned instant, if jittered or windowed)
            self._leases[run.id] = (None, run.planned_for or run.scheduled_for)
            envelopes.append(
                Envelope(
                    run_id=run.id,
                    job_id=run.job_id,
                    key=run.key,
                    scheduled_for=run.scheduled_for,
                    fence_token=run.fence_token,
                    attempt=run.attempt,
                )
            )
        if envelopes:
            self._watchers.notify("runs")
        return Claimed(envelopes, refused=refused)

    def _claim_runs(
        self,
        plans: Sequence[ClaimPlan],
        owner: str,
        now: datetime,
        takeover_grace_ms: int,
        *,
        attempt: int,
    ) -> tuple[list[tuple[Run, Job]], int]:
        """Both claims' compare-and-set and advance; the runs inserted, with their jobs, and
        how many plans were refused for their partition epoch."""
        claimed = []
        refused = 0
        overdue_before = now - timedelta(milliseconds=takeover_grace_ms)
        for plan in plans:
            job = self._jobs.get(plan.job_id)
            if job is None or not _claimable(job, plan):
                continue
            lease = self._partition_leases[self._partition(job.id)]
            if not self._may_claim(plan, lease, owner, overdue_before):
                refused += 1
                continue
            decision = self._overlap(plan)
            # A skipped occurrence advances the job without counting as a fire.
            fired = None if decision.verdict is Verdict.SKIP else plan.scheduled_for
            fence = job.fence_token + 1
            new_next = plan.new_next_run_at
            if decision.verdict is Verdict.SKIP and plan.next_if_skipped is not None:
                new_next = plan.next_if_skipped  # not the max_runs-th fire after all
            self._jobs[job.id] = replace(
                job,
                fence_token=fence,
                next_run_at=new_next if new_next else job.next_run_at,
                state=JobState.SCHEDULED if new_next else JobState.COMPLETED,
                last_fired_at=fired or job.last_fired_at,
                fired_count=job.fired_count + (fired is not None),
            )
            if plan.catchup_first is not None:
                self._create_catchup(job, plan, now)
            if plan.scheduled_for is None:
                self._record_missed(plan, None, now)
                continue
            if decision.verdict is Verdict.SKIP:
                self._record_skip(job.id, plan.scheduled_for, decision.blocker, now)
                self._record_missed(plan, None, now)  # what it folded is skipped with it
                continue
            if decision.verdict is Verdict.CANCEL:
                self._cancel_runs_of(job.id, now)
            run = self._insert_run(
                job, plan.scheduled_for, RunOrigin.SCHEDULE, fence, plan.coalesced, now, attempt
            )
            key = occurrence_key(job.id, plan.scheduled_for)
            self._record_missed(
                plan,
                next(r.id for r in self._runs.values() if r.key == key) if run is None else run.id,
                now,
            )
            if run is not None:
                run = replace(
                    run,
                    claim_epoch=lease.epoch,
                    planned_for=plan.planned_for,
                    throttled_ms=plan.throttled_ms,
                )
                self._runs[run.id] = run
                if plan.overlap is not OverlapPolicy.ALLOW:
                    self._guarded.add(run.id)
                if decision.verdict is Verdict.HOLD:
                    run = replace(run, attempt=0)  # leased later, by whoever leases from here
                    self._runs[run.id] = run
                    self._leases[run.id] = (None, _HELD)
                    self._releases[decision.blocker] = run.key  # type: ignore[index]
                    continue
                claimed.append((run, job))
        return claimed, refused

    def _record_missed(self, plan: ClaimPlan, run_id: int | None, now: datetime) -> None:
        """The ledger's range of a plan that folded (run_id: the run fired instead) or skipped
        (None, or a fire_all plan's `missed_count`) occurrences; nothing for an on-time plan."""
        count = plan.coalesced if plan.missed_count is None else plan.missed_count
        if plan.missed_first is None or plan.missed_last is None or count <= 0:
            return
        skipped = run_id is None or plan.missed_count is not None
        self._record(
            LedgerRange(
                job_id=plan.job_id,
                first=plan.missed_first,
                last=plan.missed_last,
                count=count,
                reason=LedgerReason.SKIPPED_MISFIRE if skipped else LedgerReason.COALESCED_INTO,
                run_id=None if skipped else run_id,
                recorded_at=now,
            )
        )

    def _create_catchup(self, job: Job, plan: ClaimPlan, now: datetime) -> None:
        """The plan's catch-up backfill, created with the claim (docs/policies.md)."""
        assert plan.catchup_first is not None
        assert plan.catchup_last is not None
        backfill = catchup_backfill(
            job.id,
            job.tenant,
            first=plan.catchup_first,
            last=plan.catchup_last,
            total=plan.catchup_total,
            now=now,
        )
        self._backfills[self._next_backfill_id] = replace(backfill, id=self._next_backfill_id)
        self._next_backfill_id += 1

    def _overlap(self, plan: ClaimPlan) -> Decision:
        """The overlap decision for a plan (nothing looked up for ALLOW)."""
        if plan.overlap is OverlapPolicy.ALLOW or plan.scheduled_for is None:
            return FIRE
        pending = [self._runs[i] for i in self._pending_guarded(plan.job_id)]
        held = [r.id for r in pending if self._leases[r.id][1] == _HELD]
        active = [r.id for r in pending if self._leases[r.id][1] != _HELD]
        return decide(plan.overlap, active, held)

    def _record_skip(self, job_id: str, at: datetime, blocker: int | None, now: datetime) -> None:
        """A ledger row for a skipped occurrence; a skip right after a skip for the same
        blocking run extends the job's latest row instead (as the SQL stores do)."""
        mine = [(n, e) for n, e in enumerate(self._ledger) if e.job_id == job_id]
        latest = max(mine, key=lambda found: found[1].first, default=None)
        if latest is not None and (latest[1].reason, latest[1].run_id) == (
            LedgerReason.SKIPPED_OVERLAP,
            blocker,
        ):
            n, entry = latest
            self._ledger[n] = replace(entry, last=at, count=entry.count + 1, recorded_at=now)
            return
        self._record(
            LedgerRange(
                job_id=job_id,
                first=at,
                last=at,
                count=1,
                reason=LedgerReason.SKIPPED_OVERLAP,
                run_id=blocker,
                recorded_at=now,
            )
        )

    def _cancel_runs_of(self, job_id: str, now: datetime) -> None:
        """overlap cancel_previous: every pending run of the job ends cancelled, its fence
        moved on (its holder's heartbeat and outcome are refused); a leased one gets an
        attempt row saying why."""
        for run_id in self._pending_guarded(job_id):
            holder, _ = self._leases.pop(run_id)
            self._releases.pop(run_id, None)
            run = self._runs[run_id]
            self._runs[run_id] = replace(
                run,
                status=RunStatus.CANCELLED,
                fence_token=run.fence_token + 1,
                finished_at=now,
                error=CANCELLED_BY_OVERLAP,
                last_error=CANCELLED_BY_OVERLAP,
            )
            if holder is not None:
                cancelled = ended_attempt(
                    run,
                    worker=holder,
                    started_at=now,
                    finished_at=now,
                    status=AttemptStatus.CANCELLED,
                    error=CANCELLED_BY_OVERLAP,
                )
                self._store_attempt(cancelled)

    def _may_claim(
        self, plan: ClaimPlan, lease: PartitionLease, owner: str, overdue_before: datetime
    ) -> bool:
        return (
            plan.epoch is None
            or plan.expected_next_run_at < overdue_before
            or (
                lease.owner == owner
                and lease.epoch == plan.epoch
                and lease.expires_at > self._clock.now()
            )
        )

    # -- partitions and nodes (ADR 0015) ------------------------------------------------------
    def partition_count(self) -> int:
        return self._partitions

    async def partition_leases(self) -> LeaseView:
        return LeaseView(now=self._clock.now(), leases=tuple(self._partition_leases.values()))

    async def update_partition_leases(
        self,
        owner: str,
        *,
        renew: Mapping[int, int],
        release: Collection[int],
        acquire: Collection[int],
        ttl_ms: int,
    ) -> LeaseView:
        now = self._clock.now()
        until = now + timedelta(milliseconds=ttl_ms)
        changed = False
        for partition, epoch in renew.items():
            lease = self._partition_leases.get(partition)
            if lease is not None and lease.owner == owner and lease.epoch == epoch:
                self._partition_leases[partition] = replace(lease, expires_at=until, renewed_at=now)
        for partition in release:
            lease = self._partition_leases.get(partition)
            if lease is not None and lease.owner == owner:
                self._partition_leases[partition] = replace(lease, owner=None, expires_at=_EPOCH)
                changed = True
        for partition in acquire:
            lease = self._partition_leases.get(partition)
            if lease is not None and (lease.owner is None or lease.expires_at <= now):
                self._partition_leases[partition] = replace(
                    lease, owner=owner, epoch=lease.epoch + 1, expires_at=until, renewed_at=now
                )
                changed = True
        if changed:
            self._watchers.notify("cluster")
        return await self.partition_leases()

    async def heartbeat_node(self, node: NodeAnnouncement, *, ttl_ms: int) -> list[Node]:
        now = self._clock.now()
        new = (node.id, node.role) not in self._nodes
        self._nodes[(node.id, node.role)] = Node(
            id=node.id,
            role=node.role,
            host=node.host,
            pid=node.pid,
            version=node.version,
            started_at=node.started_at,
            heartbeat_at=now,
            expires_at=now + timedelta(milliseconds=ttl_ms),
            info=dict(node.info),
        )
        if new:
            self._watchers.notify("cluster")
        return await self.list_nodes()

    async def leave(self, node_id: str) -> None:
        for key in [k for k in self._nodes if k[0] == node_id]:
            del self._nodes[key]
        for partition, lease in self._partition_leases.items():
            if lease.owner == node_id:
                self._partition_leases[partition] = replace(lease, owner=None, expires_at=_EPOCH)
        self._watchers.notify("cluster")

    async def forget_node(self, node_id: str, role: str) -> None:
        self._nodes.pop((node_id, role), None)

    async def list_nodes(self, *, include_gone: bool = False) -> list[Node]:
        now = self._clock.now()
        nodes = sorted(self._nodes.values(), key=lambda n: (n.id, n.role))
        return [n for n in nodes if include_gone or n.expires_at > now]

    async def add_manual_run(self, job_id: str, *, now: datetime) -> Run:
        job = await self.get_job(job_id)
        run = self._insert_run(
            job,
            now,
            RunOrigin.MANUAL,
            job.fence_token,
            0,
            now,
            attempt=0,
            key=manual_key(job_id, now),
        )
        assert run is not None  # a manual key is unique
        self._leases[run.id] = (None, now)
        if job.schedule.overlap is not OverlapPolicy.ALLOW:
            self._guarded.add(run.id)
        self._watchers.notify("runs")
        return self._view(run)

    # -- backfills ---------------------------------------------------------------------------
    async def create_backfill(self, backfill: Backfill) -> Backfill:
        stored = replace(backfill, id=self._next_backfill_id)
        self._next_backfill_id += 1
        self._backfills[stored.id] = stored
        return stored

    async def get_backfill(self, backfill_id: int) -> Backfill:
        try:
            return self._backfills[backfill_id]
        except KeyError:
            raise NotFound("backfill", str(backfill_id)) from None

    async def list_backfills(self, job_id: str, *, limit: int = 100) -> list[Backfill]:
        found = [b for b in reversed(self._backfills.values()) if b.job_id == job_id]
        return found[:limit]

    async def running_backfills(self, *, limit: int) -> list[RunningBackfill]:
        running = [
            RunningBackfill(backfill=b, schedule=self._jobs[b.job_id].schedule)
            for b in self._backfills.values()
            if b.state is BackfillState.RUNNING and b.job_id in self._jobs
        ]
        return running[:limit]

    async def advance_backfill(self, advance: BackfillSlice, *, now: datetime) -> int | None:
        backfill = self._backfills.get(advance.backfill_id)
        if (
            backfill is None
            or backfill.state is not BackfillState.RUNNING
            or backfill.cursor_at != advance.expected_cursor
            or (advance.one_at_a_time and self._has_pending_run(backfill.job_id))
        ):
            return None
        self._backfills[backfill.id] = replace(
            backfill,
            cursor_at=advance.new_cursor,
            done=backfill.done + len(advance.occurrences),
            state=BackfillState.COMPLETED if advance.completes else BackfillState.RUNNING,
            paced_at=advance.paced_at,
            updated_at=now,
        )
        job = self._jobs.get(backfill.job_id)
        if job is None:
            return 0
        inserted = 0
        for at in advance.occurrences:
            run = self._insert_run(job, at, advance.origin, job.fence_token, 0, now, attempt=0)
            if run is not None:
                self._leases[run.id] = (None, now)
                if advance.one_at_a_time:  # its job has an overlap policy
                    self._guarded.add(run.id)
                inserted += 1
        if inserted:
            self._watchers.notify("runs")
        return inserted

    async def cancel_backfill(self, backfill_id: int, *, now: datetime) -> Backfill:
        backfill = await self.get_backfill(backfill_id)
        if backfill.state is BackfillState.RUNNING:
            backfill = replace(backfill, state=BackfillState.CANCELLED, updated_at=now)
            self._backfills[backfill_id] = backfill
        return backfill

    async def prune_backfills(self, *, before: datetime, limit: int) -> int:
        old = sorted(
            (b.updated_at, b.id)
            for b in self._backfills.values()
            if b.state is not BackfillState.RUNNING and b.updated_at < before
        )[: max(limit, 0)]
        for _, backfill_id in old:
            del self._backfills[backfill_id]
        return len(old)

    def _has_pending_run(self, job_id: str) -> bool:
        return bool(self._pending_guarded(job_id))

    def _pending_guarded(self, job_id: str) -> list[int]:
        """The job's pending runs that were created under an overlap policy (what the SQL
        stores find through tw_runs_active), by id."""
        return sorted(
            i for i in self._leases if i in self._guarded and self._runs[i].job_id == job_id
        )

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
        hand_offs_by = now if hand_offs_by is None else hand_offs_by
        free = [
            (run_id, until)
            for run_id, (_, until) in sorted(self._leases.items(), key=lambda kv: kv[1][1])
            if until <= now
            and (after is None or until > after)
            and (until <= hand_offs_by or not _never_leased(self._runs[run_id], until))
        ]
        if fresh_from is not None:  # three ranges (ADR 0026; postgres.sql says why)
            due = fresh_from - timedelta(microseconds=1) if due_by is None else min(due_by, now)
            ahead = [p for p in free if p[1] > due]
            early = max(ahead_first, 0)
            free = (
                ahead[:early]
                + sorted((p for p in free if fresh_from <= p[1] <= due), key=lambda p: p[1],
                         reverse=True)
                + ahead[early:]
                + [p for p in free if p[1] < fresh_from]
            )  # fmt: skip
        free_ids = [run_id for run_id, _ in free]
        caps = self._run_caps()
        if caps:  # max_concurrent_runs: a capped tenant's runs only up to its room
            room = room_left(caps, self._running_by_tenant(now))
            pairs = [(i, self._tenant_of_run(i)) for i in free_ids]
            expired = pick_within_caps(pairs, room, limit)
        else:
            expired = free_ids[:limit]
        return [self._lease(run_id, owner, lease_until, now) for run_id in expired]

    async def concurrency_caps(self) -> Mapping[str, int]:
        return self._run_caps()

    def _run_caps(self) -> dict[str, int]:
        return caps_of((t.tenant, t.limits) for t in self._tenants.values())

    def _tenant_of_run(self, run_id: int) -> str:
        return self._jobs[self._runs[run_id].job_id].tenant

    def _running_by_tenant(self, now: datetime) -> dict[str, int]:
        """Runs going at `now` (pending, leased to a worker, the lease live), by tenant."""
        running: dict[str, int] = {}
        for run_id, (holder, until) in self._leases.items():
            if holder is not None and until > now:
                tenant = self._tenant_of_run(run_id)
                running[tenant] = running.get(tenant, 0) + 1
        return running

    async def lease_run(
        self, run_id: int, fence_token: int, *, owner: str, lease_until: datetime, now: datetime
    ) -> Fire | None:
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
        caps = self._run_caps()
        room = room_left(caps, self._running_by_tenant(now)) if caps else {}
        fires = []
        for run_id, fence in leases:  # a repeated pair finds the fence already moved
            run = self._runs.get(run_id)
            if run is None or run.status is not RunStatus.PENDING or run.fence_token != fence:
                continue
            tenant = self._tenant_of_run(run_id)
            if tenant in room:
                if room[tenant] <= 0:
                    self._refuse_for_cap(run_id)
                    continue
                room[tenant] -= 1
            fires.append(self._lease(run_id, owner, lease_until, now))
        return fires

    def _refuse_for_cap(self, run_id: int) -> None:
        """A run a lease by fence left for its tenant's cap: no longer in flight, so the store
        leaser takes it as soon as it is free and the cap has room (lease end + 1 us)."""
        holder, until = self._leases[run_id]
        if holder is None and _never_leased(self._runs[run_id], until):
            self._leases[run_id] = (holder, until + timedelta(microseconds=1))

    def _store_attempt(self, record: AttemptRecord) -> None:
        """Append an attempt to the history with the next id (ascending, never reused)."""
        self._attempts.append(replace(record, id=self._next_attempt_id))
        self._next_attempt_id += 1

    def _lease(self, run_id: int, owner: str, lease_until: datetime, now: datetime) -> Fire:
        """Lease the pending run `run_id` (the SQL stores' lease statements): its previous
        lease, if one is still recorded, expired unfinished and goes to the history as lost."""
        run = self._runs[run_id]
        # The lost attempt ran from its lease (a claim's lease: the claim's instant), as the
        # SQL stores record it, not from the instant _view shows a run claimed ahead starting.
        lost = lost_attempt(replace(self._view(run), started_at=run.started_at))
        if lost is not None:
            self._store_attempt(lost)
        run = self._runs[run_id]
        run = replace(
            run,
            fence_token=run.fence_token + 1,
            attempt=run.attempt + 1,
            started_at=now,
            finished_at=None,
            http_status=None,
            error=None,
        )
        self._runs[run_id] = run
        self._leases[run_id] = (owner, lease_until)
        return self._fire(run, self._jobs[run.job_id], lease_until)

    async def release_leases(self, owners: Collection[str], *, now: datetime) -> int:
        released = 0
        for run_id, (owner, until) in list(self._leases.items()):
            live = owner is not None and owner in owners and until > now
            if live and self._runs[run_id].status is RunStatus.PENDING:
                self._leases[run_id] = (owner, now)
                self._runs[run_id] = replace(self._runs[run_id], error=RELEASED_ERROR)
                released += 1
        if released:
            self._watchers.notify("runs")
        return released

    async def take_back_own_leases(
        self,
        *,
        owner: str,
        holding: Collection[int],
        now: datetime,
        lease_until: datetime,
        limit: int,
    ) -> list[Fire]:
        held = set(holding)
        ours = sorted(
            (until, run_id)
            for run_id, (holder, until) in self._leases.items()
            if holder == owner
            and until > now
            and run_id not in held
            and self._runs[run_id].status is RunStatus.PENDING
        )
        fires = []
        for _, run_id in ours[:limit]:
            run = self._runs[run_id]
            self._leases[run_id] = (owner, lease_until)  # same fence: no new attempt
            fires.append(self._fire(run, self._jobs[run.job_id], lease_until))
        return fires

    async def oldest_leasable_at(self, now: datetime) -> datetime | None:
        # Only pending runs have a lease entry (leasable_runs counts the same ones).
        return min((until for _, until in self._leases.values() if until <= now), default=None)

    async def gone_nodes(self, node_ids: Collection[str]) -> frozenset[str]:
        return frozenset()  # no sessions to announce: takeovers watch for a stall instead

    async def partition_heads(
        self, now: datetime, partitions: Collection[int] | None = None
    ) -> dict[int, DueHead]:
        wanted = None if partitions is None else set(partitions)
        heads: dict[int, DueHead] = {}
        for job in self._jobs.values():
            due = job.next_run_at
            p = self._partition(job.id)
            if not _schedulable(job) or due is None or due > now:
                continue
            if wanted is not None and p not in wanted:
                continue
            head = heads.get(p)
            if head is None or (due, job.id) < (head.due_at, head.job_id):
                heads[p] = DueHead(job_id=job.id, due_at=due)
        return dict(sorted(heads.items()))

    async def leasable_runs(self, now: datetime) -> int:
        return sum(1 for _, until in self._leases.values() if until <= now)

    async def next_lease_at(self, after: datetime | None = None) -> datetime | None:
        return min(
            (
                until
                for _, until in self._leases.values()
                if (after is None or until > after) and until != _HELD
            ),
            default=None,
        )

    async def extend_leases(
        self, leases: Sequence[tuple[int, int]], *, lease_until: datetime
    ) -> Extended:
        extended = []
        for run_id, fence in distinct_leases(leases):
            run = self._runs.get(run_id)
            if run is None or run.fence_token != fence or run_id not in self._leases:
                continue
            self._leases[run_id] = (self._leases[run_id][0], lease_until)
            extended.append((run_id, fence))
        return Extended(extended)

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        applied: list[int] = []
        for outcome in last_outcome_per_lease(outcomes):
            run = self._runs.get(outcome.run_id)
            if run is None or run.status is not RunStatus.PENDING:
                continue
            if run.fence_token != outcome.fence_token:
                continue
            self._runs[run.id] = _after(run, outcome)
            if outcome.retry_at is None:
                self._leases.pop(run.id, None)
                self._release_held(self._releases.pop(run.id, None), outcome.finished_at)
            else:
                self._leases[run.id] = (None, outcome.retry_at)
            if outcome.status is RunStatus.SUCCEEDED:
                self._finished_by[run.id] = outcome.worker
            else:
                self._store_attempt(_attempt_record(outcome))
            applied.append(run.id)
        return Applied(applied)

    def _release_held(self, key: str | None, at: datetime) -> None:
        """buffer_one: the run held back behind one that just ended becomes leasable."""
        if key is None:
            return
        for run_id, (holder, until) in self._leases.items():
            if until == _HELD and self._runs[run_id].key == key:
                self._leases[run_id] = (holder, at)
                self._watchers.notify("runs")
                return

    # -- tenants ----------------------------------------------------------------------------
    async def get_tenant(self, tenant: str) -> Tenant | None:
        return self._tenants.get(tenant)

    async def set_tenant_secrets(
        self, tenant: str, secrets: Sequence[str], *, now: datetime
    ) -> Tenant:
        current = self._tenants.get(tenant)
        if current is None:
            current = Tenant(tenant=tenant, created_at=now, updated_at=now)
        stored = replace(current, webhook_secrets=tuple(secrets), updated_at=now)
        self._tenants[tenant] = stored
        return stored

    async def reseal_secrets(self) -> ResealReport:
        return ResealReport(  # nothing is at rest here
            jobs_checked=len(self._jobs),
            jobs_resealed=0,
            tenants_checked=len(self._tenants),
            tenants_resealed=0,
            skipped=0,
        )

    async def create_tenant(
        self,
        tenant: str,
        *,
        now: datetime,
        webhook_secrets: Sequence[str] = (),
        limits: TenantLimits = NO_LIMITS,
    ) -> Tenant:
        if tenant in self._tenants:
            raise TenantExists(tenant)
        created = Tenant(
            tenant=tenant,
            webhook_secrets=tuple(webhook_secrets),
            created_at=now,
            updated_at=now,
            limits=limits,
        )
        self._tenants[tenant] = created
        return created

    async def list_tenants(self) -> list[Tenant]:
        return [self._tenants[name] for name in sorted(self._tenants)]

    async def set_tenant_egress(self, tenant: str, egress: EgressRules, *, now: datetime) -> Tenant:
        current = self._tenants.get(tenant)
        if current is None:
            raise NotFound("tenant", tenant)
        stored = replace(current, egress=egress, updated_at=now)
        self._tenants[tenant] = stored
        return stored

    async def set_tenant_limits(
        self,
        tenant: str,
        limits: TenantLimits,
        *,
        now: datetime,
        expected_updated_at: datetime | None = None,
    ) -> Tenant:
        current = self._tenants.get(tenant)
        if current is None:
            raise NotFound("tenant", tenant)
        if expected_updated_at is not None and current.updated_at != expected_updated_at:
            raise StaleTenant(f"tenant {tenant!r} changed since it was read")
        stored = replace(current, limits=limits, updated_at=now)
        self._tenants[tenant] = stored
        return stored

    async def count_tenant_jobs(self, tenant: str | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for job in self._jobs.values():
            if tenant is None or job.tenant == tenant:
                counts[job.tenant] = counts.get(job.tenant, 0) + 1
        return counts

    async def delete_tenant(self, tenant: str, *, now: datetime) -> None:
        if tenant not in self._tenants:
            raise NotFound("tenant", tenant)
        jobs = sum(1 for j in self._jobs.values() if j.tenant == tenant)
        if jobs:
            raise TenantHasJobs(tenant, jobs)
        del self._tenants[tenant]
        for key in list(self._api_keys.values()):
            if key.tenant == tenant and key.revoked_at is None:
                self._api_keys[key.id] = replace(key, revoked_at=now)

    # -- API keys ---------------------------------------------------------------------------
    async def create_key(self, key: ApiKey) -> None:
        if key.id in self._api_keys or any(
            k.secret_hash == key.secret_hash for k in self._api_keys.values()
        ):
            raise Conflict(f"a key with id {key.id!r} or with the same secret exists already")
        self._api_keys[key.id] = key

    async def get_key(self, key_id: str) -> ApiKey:
        try:
            return self._api_keys[key_id]
        except KeyError:
            raise NotFound("key", key_id) from None

    async def key_by_hash(self, secret_hash: str) -> ApiKey | None:
        return next((k for k in self._api_keys.values() if k.secret_hash == secret_hash), None)

    async def list_keys(self, *, tenant: str | None = None) -> list[ApiKey]:
        return [
            self._api_keys[key_id]
            for key_id in sorted(self._api_keys)
            if tenant is None or self._api_keys[key_id].tenant == tenant
        ]

    async def revoke_key(self, key_id: str, *, now: datetime) -> ApiKey:
        key = await self.get_key(key_id)
        if key.revoked_at is None:
            key = replace(key, revoked_at=now)
            self._api_keys[key_id] = key
        return key

    async def touch_keys(self, used: Mapping[str, datetime]) -> None:
        for key_id, when in used.items():
            key = self._api_keys.get(key_id)
            if key is not None and (key.last_used_at is None or when > key.last_used_at):
                self._api_keys[key_id] = replace(key, last_used_at=when)

    # -- audit log --------------------------------------------------------------------------
    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        for entry in entries:
            self._audit[self._next_audit_id] = replace(entry, id=self._next_audit_id)
            self._next_audit_id += 1

    async def list_audit(
        self,
        *,
        limit: int = 100,
        before_id: int | None = None,
        tenant: str | None = None,
        key_id: str | None = None,
    ) -> list[AuditEntry]:
        found = [
            e
            for ident, e in reversed(self._audit.items())
            if (before_id is None or ident < before_id)
            and (tenant is None or e.tenant == tenant)
            and (key_id is None or e.key_id == key_id)
        ]
        return found[: max(limit, 0)]

    async def prune_audit(self, *, before: datetime, limit: int) -> int:
        old = sorted((e.at, ident) for ident, e in self._audit.items() if e.at < before)
        for _, ident in old[: max(limit, 0)]:
            del self._audit[ident]
        return min(len(old), max(limit, 0))

    # -- history ----------------------------------------------------------------------------
    async def list_runs(
        self, job_id: str, *, limit: int = 50, before_id: int | None = None
    ) -> list[Run]:
        await self.get_job(job_id)
        runs = [
            r
            for r in self._runs.values()
            if r.job_id == job_id and (before_id is None or r.id < before_id)
        ]
        runs.sort(key=lambda r: r.id, reverse=True)
        return [self._view(r) for r in runs[:limit]]

    async def get_run(self, run_id: int) -> Run:
        try:
            return self._view(self._runs[run_id])
        except KeyError:
            raise NotFound("run", str(run_id)) from None

    async def runs_scheduled_between(
        self, job_id: str, start: datetime, end: datetime, *, limit: int
    ) -> list[Run]:
        runs = [
            r for r in self._runs.values() if r.job_id == job_id and start <= r.scheduled_for <= end
        ]
        runs.sort(key=lambda r: (r.scheduled_for, r.id))
        return [self._view(r) for r in runs[:limit]]

    async def list_occurrences(
        self, job_id: str, start: datetime, end: datetime, *, limit: int
    ) -> list[LedgerRange]:
        found = [
            e for e in self._ledger if e.job_id == job_id and e.first <= end and e.last >= start
        ]
        found.sort(key=lambda e: (e.first, e.id or 0))
        return found[:limit]

    async def list_attempts(self, run_id: int) -> list[AttemptRecord]:
        run = await self.get_run(run_id)
        stored = [a for a in self._attempts if a.run_id == run_id]
        success = success_attempt(run, self._finished_by.get(run_id))
        return stored if success is None else [*stored, success]

    async def list_dead_letters(
        self,
        *,
        limit: int = 50,
        before_id: int | None = None,
        job_id: str | None = None,
        tenant: str | None = None,
    ) -> list[Run]:
        dead = [
            r
            for r in self._runs.values()
            if r.dead_lettered_at is not None
            and (before_id is None or r.id < before_id)
            and (job_id is None or r.job_id == job_id)
            and (tenant is None or self._jobs[r.job_id].tenant == tenant)
        ]
        return [self._view(r) for r in sorted(dead, key=lambda r: r.id, reverse=True)[:limit]]

    async def redrive(self, run_ids: Sequence[int] | None, *, now: datetime) -> int:
        chosen = self._dead(run_ids)
        for run in chosen:
            self._runs[run.id] = replace(run, status=RunStatus.PENDING, dead_lettered_at=None)
            self._leases[run.id] = (None, now)
        if chosen:
            self._watchers.notify("runs")
        return len(chosen)

    async def purge_dead_letters(self, run_ids: Sequence[int] | None) -> int:
        chosen = self._dead(run_ids)
        for run in chosen:
            self._runs[run.id] = replace(run, dead_lettered_at=None)
        return len(chosen)

    def _dead(self, run_ids: Sequence[int] | None) -> list[Run]:
        wanted = None if run_ids is None else set(run_ids)
        return [
            r
            for r in self._runs.values()
            if r.dead_lettered_at is not None and (wanted is None or r.id in wanted)
        ]

    async def prune_history(self, *, finished_before: datetime, limit: int) -> int:
        dead = {r.id for r in self._runs.values() if r.dead_lettered_at is not None}
        old_attempts = [
            a for a in self._attempts if a.finished_at < finished_before and a.run_id not in dead
        ][:limit]
        gone = {id(a) for a in old_attempts}
        self._attempts = [a for a in self._attempts if id(a) not in gone]
        budget = limit - len(old_attempts)
        old_runs = [
            r
            for r in self._runs.values()
            if r.status is not RunStatus.PENDING
            and r.dead_lettered_at is None
            and r.finished_at is not None
            and r.finished_at < finished_before
        ][: max(budget, 0)]
        for run in old_runs:
            del self._runs[run.id]
            self._finished_by.pop(run.id, None)
            self._keys.discard(run.key)
        budget = max(budget - len(old_runs), 0)
        by_age = sorted(self._ledger, key=lambda e: e.recorded_at)
        old_ledger = {e.id for e in by_age if e.recorded_at < finished_before}
        old_ledger = set([i for i in (e.id for e in by_age) if i in old_ledger][:budget])
        self._ledger = [e for e in self._ledger if e.id not in old_ledger]
        return len(old_attempts) + len(old_runs) + len(old_ledger)

    async def maintain_history(self, *, now: datetime, retention: timedelta) -> HistoryMaintenance:
        return HistoryMaintenance()  # nothing to keep up: prune_history does it all

    async def stats(self) -> StoreStats:
        by_state: dict[str, int] = {}
        for job in self._jobs.values():
            by_state[job.state.value] = by_state.get(job.state.value, 0) + 1
        return StoreStats(jobs_by_state=by_state, runs_pending=len(self._leases))

    # -- helpers ----------------------------------------------------------------------------
    def _view(self, run: Run) -> Run:
        """`run` with its lease, as the SQL stores read it (kept apart in `_leases` here)."""
        owner, until = self._leases.get(run.id, (None, None))
        started = run.started_at
        if started is None and owner is not None:
            # Leased at its claim, which inserted it at that instant; claimed ahead of its
            # instant, its attempt starts at that instant.
            started = max(run.created_at, run.planned_for or run.scheduled_for)
        return replace(run, lease_owner=owner, lease_until=until, started_at=started)

    def _fire(self, run: Run, job: Job, lease_until: datetime) -> Fire:
        tenant = self._tenants.get(job.tenant)
        return Fire(
            run_id=run.id,
            job_id=run.job_id,
            key=run.key,
            scheduled_for=run.scheduled_for,
            fence_token=run.fence_token,
            attempt=run.attempt,
            target=job.target,
            lease_until=lease_until,
            retry=job.retry,
            tenant_secrets=() if tenant is None else tenant.webhook_secrets,
            on_failure=job.on_failure,
            tenant=job.tenant,
            planned_for=run.planned_for,
        )

    def _insert_run(
        self,
        job: Job,
        scheduled_for: datetime,
        origin: RunOrigin,
        fence: int,
        coalesced: int,
        now: datetime,
        attempt: int = 1,
        key: str | None = None,
    ) -> Run | None:
        key = key or occurrence_key(job.id, scheduled_for, origin)
        if key in self._keys:
            return None
        self._keys.add(key)
        run = Run(
            id=self._next_run_id,
            job_id=job.id,
            key=key,
            origin=origin,
            scheduled_for=scheduled_for,
            status=RunStatus.PENDING,
            attempt=attempt,
            fence_token=fence,
            coalesced=coalesced,
            created_at=now,
            started_at=None,
            finished_at=None,
            http_status=None,
            error=None,
        )
        self._next_run_id += 1
        self._runs[run.id] = run
        return run


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _never_leased(run: Run, lease_until: datetime) -> bool:
    """A hand-off no worker has leased yet (lease_runs' `hand_offs_by` applies to it); a run
    that buffer_one held back and released was never published, and its lease end says so."""
    return (
        run.attempt == 0
        and run.origin is RunOrigin.SCHEDULE
        and lease_until == (run.planned_for or run.scheduled_for)
    )


def _after(run: Run, outcome: RunOutcome) -> Run:
    """The run once `outcome` is applied (the same rules as the SQL stores' FINISH)."""
    failed = outcome.status is RunStatus.FAILED
    return replace(
        run,
        status=outcome.status,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        http_status=outcome.http_status,
        error=outcome.error,
        last_error=outcome.error,
        dead_lettered_at=outcome.finished_at if failed else None,
    )


def _attempt_record(outcome: RunOutcome) -> AttemptRecord:
    return AttemptRecord(
        id=0,
        run_id=outcome.run_id,
        job_id=outcome.job_id,
        attempt=outcome.attempt,
        fence_token=outcome.fence_token,
        worker=outcome.worker,
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        status=AttemptStatus(outcome.status.value),
        http_status=outcome.http_status,
        error=outcome.error,
    )


def _schedulable(job: Job) -> bool:
    return job.state is JobState.SCHEDULED and job.next_run_at is not None


def _claimable(job: Job, plan: ClaimPlan) -> bool:
    return (
        _schedulable(job)
        and job.fence_token == plan.expected_fence
        and job.next_run_at == plan.expected_next_run_at
    )


def _matches(job: Job, query: JobQuery) -> bool:
    return (
        (query.state is None or job.state is query.state)
        and (query.tenant is None or job.tenant == query.tenant)
        and (query.name_prefix is None or job.name.startswith(query.name_prefix))
        and (query.after_id is None or job.id > query.after_id)
    )
