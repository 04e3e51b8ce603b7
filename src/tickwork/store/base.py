"""The `ScheduleStore` seam: where jobs, their next fire and their runs live.

One backend class implements all of it (MemoryStore, SqliteStore, PostgresStore), and one
conformance suite runs against each (`tests/contract/test_store_*.py`, one file per part). The
seam is split by concern, each part its own Protocol with its contract on its methods:

    StoreLifecycle   open, close, ping, watch: connecting and change notification
    JobStore         jobs and tenants: what the API creates, reads, edits and deletes
    ClaimStore       the scheduler's half of the fire path: the due-scan, the claims, manual runs,
                     and the partition leases and node heartbeats that gate who may claim
    LeaseStore       the worker's half: leases (the table queue), heartbeats, outcomes
    HistoryStore     run history, attempts, dead letters, retention, stats
    AccessStore      API keys (stored by their hash) and the tenants as a resource: created,
                     listed, deleted
    AuditStore       the audit log of changes made through the API: appended, listed, pruned
    BackfillStore    backfills and catch-ups: created, read, advanced a slice at a time by the
                     paced lane (a compare-and-set on their cursor), cancelled
    ScheduleStore    all of them: what a backend implements and what services are given

Rules for every method of every part:

* Instants go in and come out as aware UTC datetimes, kept to the microsecond.
* A failure of the store itself (connection, server, driver) raises `StoreError`, or its
  subclass `StoreUnavailable` when trying again later may help; never a driver's exception.
  Each method's docstring names only the other errors it raises.
* Every write that a fire depends on is a compare-and-set on a fence token: a job's fence moves
  on every claim, a run's on every lease. A write that names a fence that moved on (a stale plan,
  a zombie worker's heartbeat or outcome) changes nothing, raises nothing, and is left out of
  what the method returns or counts. That is how a crashed, paused or partitioned process
  that wakes up late can never double-apply an occurrence.
* Batch methods take and return sequences and do their work in one statement or one
  transaction: callers batch, and a backend never loops over round trips on the fire path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol, TypeVar

from tickwork.domain.audit import AuditEntry
from tickwork.domain.backfills import Backfill, BackfillSlice, RunningBackfill
from tickwork.domain.egress import EgressRules
from tickwork.domain.jobs import DEFAULT_PRIORITY, Job, JobState, OverlapPolicy, Schedule
from tickwork.domain.keys import ApiKey
from tickwork.domain.occurrences import LedgerRange
from tickwork.domain.partitions import DueHead, Node, PartitionLease
from tickwork.domain.runs import AttemptRecord, Envelope, Fire, Run, RunOutcome
from tickwork.domain.tenant_limits import NO_LIMITS, TenantLimits
from tickwork.domain.tenants import Tenant
from tickwork.errors import NotFound, StaleTenant

Topic = Literal["jobs", "runs", "cluster"]
Level = tuple[str, int]  # (tenant, priority): a share of an overloaded tick is per level
T = TypeVar("T")
# How long past its instant a job may wait before any scheduler may claim it, whoever holds its
# partition: a dead owner's work is taken over after this, not after its lease TTL (ADR 0015).
# Half the default misfire grace (1 s): a takeover (scanned for every quarter of this) lands
# while the occurrence is still on time, so a failover never turns it into a misfire that the
# job's policy would coalesce or skip.
DEFAULT_TAKEOVER_GRACE_MS = 500


class Applied(int):
    """How many outcomes `finish_runs` applied, and which runs they were (`run_ids`).

    An int, because most callers only count; the executor also needs the ids, to alert only
    on dead letters whose fenced write committed (a zombie's rejected write must not alert).
    """

    run_ids: frozenset[int]

    def __new__(cls, run_ids: Iterable[int]) -> Applied:
        ids = list(run_ids)  # one per applied outcome
        applied = super().__new__(cls, len(ids))
        applied.run_ids = frozenset(ids)
        return applied


def last_outcome_per_lease(outcomes: Sequence[RunOutcome]) -> list[RunOutcome]:
    """One outcome per (run, fence), the last one given: what every backend's `finish_runs`
    applies, so that a batch holding two outcomes of one lease records one, the same way on
    every backend (the executor never sends two; a re-sent batch could)."""
    return list({(o.run_id, o.fence_token): o for o in outcomes}.values())


def distinct_leases(leases: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (run_id, fence) pairs without repeats, in their first order: a pair named twice in
    one call is one lease, leased, extended or counted once on every backend."""
    return list(dict.fromkeys(leases))


@dataclass(frozen=True, kw_only=True, slots=True)
class DueJob:
    """A job whose next_run_at has come, as read by the due-scan (not yet claimed)."""

    job_id: str
    fence_token: int
    next_run_at: datetime
    schedule: Schedule
    partition: int = 0
    fired_count: int = 0  # scheduled fires so far, for the schedule's max_runs
    tenant: str = "default"  # whose share of an overloaded tick it takes (scheduler/fairness)
    priority: int = DEFAULT_PRIORITY


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimPlan:
    """What one claim does to one job; computed by pure code (`scheduler.planning`)."""

    job_id: str
    expected_fence: int
    expected_next_run_at: datetime
    scheduled_for: datetime | None  # the occurrence to fire; None fires nothing (misfire skip)
    coalesced: int  # missed occurrences folded into this fire (or skipped, if nothing fires)
    new_next_run_at: datetime | None  # None: the job is completed
    # The occurrences `coalesced` counts, as the ledger's range (first and last nominal
    # instants): the claim records them, coalesced into its run or skipped for misfire.
    missed_first: datetime | None = None
    missed_last: datetime | None = None
    # The epoch of the job's partition lease the claimer holds; None claims without that check
    # (a tool, a test, a single process that holds every partition by construction).
    epoch: int | None = None
    # What the claim does if the job still has a run going (docs/policies.md). ALLOW, the
    # default, makes the claim probe nothing: only other policies pay for the look-up.
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    # Where the job goes instead of `new_next_run_at` if the overlap policy skips this fire:
    # set when this fire would complete the job at its max_runs, which a skipped occurrence
    # does not count towards (None: the same place either way).
    next_if_skipped: datetime | None = None
    # Misfire fire_all past its grace (docs/policies.md "Catch-up"): the plan fires the latest
    # occurrence, folding nothing (`coalesced` 0). `missed_count` then counts the missed range
    # (missed_first..missed_last, older than the schedule's catchup_window), recorded as
    # skipped_misfire although the plan fires; None: the range is `coalesced`'s, as above.
    missed_count: int | None = None
    # The missed occurrences within the window, first..last inclusive and how many: the claim
    # creates ONE catch-up backfill for them (kind catchup, [first, last + 1 us)) in the same
    # transaction as the advance, so a crash never loses them. None: no catch-up.
    catchup_first: datetime | None = None
    catchup_last: datetime | None = None
    catchup_total: int = 0
    # How much later than its instant the occurrence is claimed because of the global fire
    # ceiling (ADR 0025), in ms, recorded on its run (`Run.throttled_ms`); None: not throttled.
    throttled_ms: int | None = None

    @property
    def planned_for(self) -> datetime | None:
        """The instant a jittered or windowed occurrence fires at (ADR 0022): the job's
        next_run_at it was due at, when that is after the occurrence's own instant. None:
        at its own instant (no shift, or a late claim that fires at once anyway)."""
        fired = self.scheduled_for
        if fired is None or self.expected_next_run_at <= fired:
            return None
        return self.expected_next_run_at

    @property
    def plain(self) -> bool:
        """No policy work for the claim beyond its compare-and-set and advance: no ledger
        range, no catch-up, no overlap look-up (allow, or nothing fired), no skip target, no
        throttling to record. A
        burst's plans are all plain, and the PostgreSQL store claims such batches with a
        leaner statement (ADR 0021): a field added here that needs claim-time work must make
        a plan not plain."""
        return (
            self.missed_first is None
            and self.catchup_first is None
            and self.throttled_ms is None
            and self.next_if_skipped is None
            and (self.overlap is OverlapPolicy.ALLOW or self.scheduled_for is None)
        )


def all_plain(plans: Iterable[ClaimPlan]) -> bool:
    """Every plan of a batch is `plain` (ClaimPlan.plain)."""
    return all(plan.plain for plan in plans)


# The lease end of a run held back by overlap buffer_one until the job's running run ends: far
# beyond any clock, so no lease, queue depth or next-lease read ever counts it as leasable.
# 9999-01-01T00:00:00Z in epoch microseconds; finish_runs sets the real instant.
HELD_LEASE_US = 253_370_764_800_000_000
# The error a run cancelled by overlap cancel_previous records (run and attempt).
CANCELLED_BY_OVERLAP = "cancelled: a newer occurrence was due (overlap cancel_previous)"


class Extended(int):
    """How many leases `extend_leases` extended, and which (run_id, fence) pairs (`leases`):
    the executor stops the fires whose lease the store refused (a cancelled run)."""

    leases: frozenset[tuple[int, int]]

    def __new__(cls, leases: Iterable[tuple[int, int]]) -> Extended:
        pairs = frozenset(leases)
        extended = super().__new__(cls, len(pairs))
        extended.leases = pairs
        return extended


class Claimed(list[T]):
    """What a claim returns: the new fires (or envelopes), and `refused`, how many plans the
    store refused because the claimer did not hold their partition at the plan's epoch."""

    refused: int

    def __init__(self, items: Iterable[T] = (), *, refused: int = 0) -> None:
        super().__init__(items)
        self.refused = refused


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaseView:
    """Every partition's lease, and the database's clock when they were read."""

    now: datetime
    leases: tuple[PartitionLease, ...]


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeAnnouncement:
    """What a process says of itself in its heartbeat (tw_nodes)."""

    id: str
    role: str  # "scheduler" or "worker"
    host: str
    pid: int
    version: str
    started_at: datetime
    info: dict[str, object]


@dataclass(frozen=True, kw_only=True, slots=True)
class JobQuery:
    state: JobState | None = None
    name_prefix: str | None = None
    tenant: str | None = None
    after_id: str | None = None  # keyset pagination: ids sort in creation order
    limit: int = 100


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreStats:
    jobs_by_state: dict[str, int]
    runs_pending: int


@dataclass(frozen=True, kw_only=True, slots=True)
class ResealReport:
    jobs_checked: int
    jobs_resealed: int
    tenants_checked: int
    tenants_resealed: int
    skipped: int  # changed by someone else between the read and the rewrite


@dataclass(frozen=True, kw_only=True, slots=True)
class HistoryMaintenance:
    """What one `maintain_history` call changed."""

    created: tuple[str, ...] = ()  # partitions created
    dropped: tuple[str, ...] = ()  # partitions dropped
    kept_attempts: int = 0  # dead letters' attempts copied out of dropped partitions
    skipped: bool = False  # another process was maintaining (or held a lock too long)


class StoreLifecycle(Protocol):
    async def open(self) -> None:
        """Connect (and, unless the backend was built with `migrate=False`, bring the schema up
        to date: safe while other processes do the same). Call once, before anything else."""
        ...

    async def close(self) -> None:
        """Release connections and threads. The store may not be used afterwards."""
        ...

    async def ping(self) -> None:
        """The cheapest round trip that proves the store answers (health checks); returns
        nothing, raises StoreError when it does not answer."""
        ...

    def watch(self, topic: Topic) -> asyncio.Event:
        """A new event, set whenever jobs (topic "jobs"), runs (topic "runs") or the cluster's
        members and partition leases (topic "cluster") change: by this
        process, or by another where the backend can tell (PostgreSQL LISTEN/NOTIFY). Each
        caller gets its own event and clears it itself, so one waiter never hides a change from
        another. A set event is a hint to look, not a description of the change; after a lost
        notification connection the backend sets every event (the loops must rescan)."""
        ...


class JobStore(Protocol):
    async def create_job(self, job: Job, *, check_quota: bool = False) -> Job:
        """Store a new job, as given (the caller has set its id, next_run_at and state);
        returns it. Wakes the watchers of "jobs".

        `check_quota` (the caller saw a `limits.max_jobs` on the job's tenant): in the same
        transaction, read the tenant's limits as they are now and count its jobs (every
        state), and raise QuotaExceeded (nothing stored) if it has `max_jobs` already.
        Concurrent creates for one tenant, from any process, are counted one after the other
        (PostgreSQL locks the tenant's row; SQLite has one writer), so together they never
        pass the quota. A tenant that does not exist is not checked here."""
        ...

    async def get_job(self, job_id: str) -> Job:
        """The job as stored now. Raises NotFound."""
        ...

    async def list_jobs(self, query: JobQuery) -> list[Job]:
        """Jobs matching `query`, in id order (ids sort in creation order), at most
        `query.limit`, after `query.after_id` (keyset pagination)."""
        ...

    async def update_job(self, job: Job, *, ledger: Sequence[LedgerRange] = ()) -> Job:
        """Overwrite the job's editable fields, state and next_run_at, if its fence token is
        still `job.fence_token` (compare-and-set: an edit never undoes a claim it did not see),
        and record `ledger` (occurrence ranges a resume passed over) in the same transaction:
        both or neither. Returns the job as stored. Wakes the watchers of "jobs".

        Raises NotFound, or StaleJob when the job was claimed since it was read (re-read it
        and apply the edit again).
        """
        ...

    async def delete_job(self, job_id: str) -> None:
        """Delete the job, all its runs and their attempts, in one transaction. A worker holding
        one of its runs finds its later writes rejected (the run is gone). Raises NotFound."""
        ...

    async def get_tenant(self, tenant: str) -> Tenant | None:
        """The tenant's settings; None when it has none (no row)."""
        ...

    async def set_tenant_secrets(
        self, tenant: str, secrets: Sequence[str], *, now: datetime
    ) -> Tenant:
        """Replace the tenant's signing secrets (empty: clear them), creating its row if needed
        and keeping whatever else the row holds. Returns the tenant as stored. Fires leased
        after this commit carry the new secrets."""
        ...


class ClaimStore(Protocol):
    async def due_jobs(
        self,
        until: datetime,
        limit: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        """Scheduled jobs with next_run_at <= until (and >= not_before) of the given
        partitions (None: all), earliest first, at most `limit`. A read: it locks nothing, and
        may return jobs another scheduler is claiming at this moment (their claim then falls
        away). It reads only the partitions asked for (PostgreSQL: one index range each).

        The lower bound is how the scheduler skips what its earlier ticks settled: on
        PostgreSQL every claim leaves a dead version of the job at its old next_run_at until
        vacuum, and an unbounded scan walks them all, from the oldest (ADR 0008)."""
        ...

    async def count_due(
        self,
        until: datetime,
        cap: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> int:
        """How many jobs `due_jobs` would return with `limit` = `cap`, without reading them:
        the scheduler's look for a herd ahead (ADR 0036). Reads the due index only (on
        PostgreSQL, at most `cap` entries per partition)."""
        ...

    async def next_due_at(
        self, not_before: datetime | None = None, *, partitions: Collection[int] | None = None
    ) -> datetime | None:
        """The earliest next_run_at of any scheduled job of the given partitions (None: all),
        of those at or after `not_before` (as in `due_jobs`); None when there is none."""
        ...

    async def due_counts(
        self,
        until: datetime,
        tenants: Sequence[str],
        cap: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> dict[Level, int]:
        """How many jobs of each of `tenants` are due (as `due_jobs` reads them), per
        (tenant, priority) level, each counted no further than `cap`; levels with none are
        left out. What a scheduler that is behind shares its batch by (scheduler/fairness.py):
        one probe of the index tw_jobs_fair per tenant and priority level."""
        ...

    async def due_jobs_by_level(
        self,
        until: datetime,
        wanted: Mapping[Level, int],
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        """Up to `wanted[(tenant, priority)]` due jobs of each level, earliest first within
        it (as `due_jobs` reads them, locking nothing)."""
        ...

    async def tenant_limits(self) -> dict[str, TenantLimits]:
        """Every tenant's limits, by name; tenants without limits have empty ones. Reads no
        secrets (a scheduler may lack the key to them)."""
        ...

    async def planned_counts(self, first_s: int, last_s: int) -> dict[int, int]:
        """How many scheduled jobs of every partition are planned to fire in each epoch second
        of [first_s, last_s] (by their next_run_at), the seconds with none left out: the load
        a flexible window places its occurrences against (ADR 0022). One read of the due
        index, for the range only."""
        ...

    async def claim(
        self,
        plans: Sequence[ClaimPlan],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
        takeover_grace_ms: int = DEFAULT_TAKEOVER_GRACE_MS,
    ) -> Claimed[Fire]:
        """Claim, advance and record each plan's occurrence, for an executor in this process.

        The only way a job fires (with `claim_hand_off`). For each plan, in ONE transaction
        for the whole batch: a compare-and-set on the job's (fence_token, next_run_at) that
        increments the fence, advances next_run_at to `plan.new_next_run_at` (or completes the
        job when it is None), records `owner` as its last claimer and inserts the occurrence's
        run. A plan whose job changed since it was read (another claimer won, the job was
        paused, edited or deleted) is dropped silently and yields no fire; a run whose
        occurrence key already exists is not inserted again. So however many schedulers race,
        each occurrence fires at most once, and a crash leaves either nothing or a complete
        claim + advance + pending run. A plan with no `scheduled_for` (a misfire skip) advances
        the job and fires nothing.

        Overlap (docs/policies.md): for a plan whose `overlap` is not ALLOW, the same
        transaction looks for the job's runs still going (pending, any origin) and applies
        `domain.overlap.decide`: SKIP advances the job without a fire (fired_count and
        last_fired_at stay; `next_if_skipped` replaces a completion at max_runs) and records a
        `skipped_overlap` row in the occurrence ledger naming the blocking run; HOLD inserts the
        run held back (lease end HELD_LEASE_US, attempt 0, unowned: no fire, no envelope) and
        marks the run it waits for, whose finish releases it; CANCEL cancels every pending run
        of the job (status CANCELLED, finished at `now`, fence + 1, an attempt row for a leased
        one) and fires as usual. ALLOW plans look nothing up.

        Catch-up (misfire fire_all): a claimed plan with `catchup_first` also inserts, in the
        same transaction, one running backfill of kind catchup for its job ([catchup_first,
        catchup_last + 1 us), `catchup_total` occurrences, DEFAULT_BACKFILL_RATE, created and
        paced at `now`), whatever the overlap policy decided for the fired occurrence; a plan
        with `missed_count` records its missed range as skipped_misfire with that count.

        Partitions (ADR 0015): a plan with an `epoch` is claimed only if `owner` holds the
        job's partition at that epoch and the lease has not expired by the database's clock,
        or if the job is overdue by more than `takeover_grace_ms` at `now` (the takeover of a
        dead owner's work, still through the same compare-and-set). Any other plan is refused
        and counted in the result's `refused`: a former owner cannot claim under its old epoch.
        Each run records the epoch its partition had when it was claimed (`Run.claim_epoch`).

        Returns the new runs as complete fires, leased to `owner` until `lease_until` at
        attempt 1, in no particular order.
        """
        ...

    async def claim_hand_off(
        self,
        plans: Sequence[ClaimPlan],
        *,
        owner: str,
        now: datetime,
        takeover_grace_ms: int = DEFAULT_TAKEOVER_GRACE_MS,
    ) -> Claimed[Envelope]:
        """The same claim (partition check included), for workers in other processes.

        The new runs are left unowned at attempt 0, their lease ending at their scheduled
        instant, so any worker leases them (`lease_runs`, or `lease_fenced_runs` with the
        envelope's fence) from that instant on; the lease makes it attempt 1. `owner` is only
        recorded on the job as its last claimer. Returns envelopes, not fires: the scheduler
        publishes or counts them and never runs them, so the job's target, retry policy,
        secrets and alert are not read (building them was a fifth of a hand-off scheduler's
        CPU). Wakes the watchers of "runs", in other processes too where the backend can tell.
        """
        ...

    async def add_manual_run(self, job_id: str, *, now: datetime) -> Run:
        """Record an out-of-schedule occurrence at `now` (origin "manual", its own occurrence
        key), unowned and leasable at once; it does not move the job's schedule. Returns the
        run. Wakes the watchers of "runs". Raises NotFound."""
        ...

    # -- partitions (ADR 0015) --------------------------------------------------------------
    def partition_count(self) -> int:
        """P, the number of partitions of the job space (read from the database at `open`)."""
        ...

    async def partition_leases(self) -> LeaseView:
        """Every partition's lease, and the database's clock as it read them."""
        ...

    async def update_partition_leases(
        self,
        owner: str,
        *,
        renew: Mapping[int, int],
        release: Collection[int],
        acquire: Collection[int],
        ttl_ms: int,
    ) -> LeaseView:
        """One scheduler's lease round, in one transaction: renew the leases `owner` holds at
        the given {partition: epoch} (one that changed hands meanwhile is not renewed),
        release `release` (if it holds them), and take each partition of `acquire` that nobody
        holds (released, or expired by the database's clock; its epoch goes up by one).
        Renewed and taken leases expire `ttl_ms` after the database's clock. Returns the leases
        `owner` holds afterwards, with the database's clock. Wakes the watchers of "cluster"
        (other processes too, where the backend can tell) when it released or took any."""
        ...

    async def heartbeat_node(self, node: NodeAnnouncement, *, ttl_ms: int) -> list[Node]:
        """Announce `node` (insert or renew it; it is live until `ttl_ms` after the database's
        clock) and return every live node, itself included. Wakes the watchers of "cluster"
        when the node is new."""
        ...

    async def leave(self, node_id: str) -> None:
        """`node_id` leaves: forget it and release every partition it holds, at once, in one
        transaction (a scheduler's orderly shutdown). Wakes the watchers of "cluster"."""
        ...

    async def forget_node(self, node_id: str, role: str) -> None:
        """Remove one role's row of `node_id` (a worker that stops); nothing else changes."""
        ...

    async def list_nodes(self, *, include_gone: bool = False) -> list[Node]:
        """The nodes whose heartbeat is live (with `include_gone`, the others too)."""
        ...

    async def partition_heads(
        self, now: datetime, partitions: Collection[int] | None = None
    ) -> dict[int, DueHead]:
        """Each partition's (of `partitions`; default: all) oldest job due by `now` that nobody
        has claimed yet, partitions with nothing due left out: how far behind its owner is, and,
        watched over time, whether anyone is claiming there at all (a takeover's cue)."""
        ...

    async def gone_nodes(self, node_ids: Collection[str]) -> frozenset[str]:
        """Those of `node_ids` whose process is known to be gone: it announced (heartbeat_node)
        the name of its database sessions, and none of that name is open now. A node that
        announced none, or a store that cannot tell, is never named: the takeover then watches
        its partitions stall instead (ADR 0032)."""
        ...


class LeaseStore(Protocol):
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
        """The table queue's dequeue: lease up to `limit` pending runs whose lease is free at
        `now` (a hand-off whose instant came, a manual trigger, a retry whose backoff passed,
        a redriven dead letter, or an expired lease: its holder died), soonest-free first.

        With `fresh_from`, three ranges, each only as large as the ones before it left room
        for: the runs free since `fresh_from` and by `due_by` (the worker's now; without it
        this range is empty), the newest first; then those free after `due_by` (a look-ahead:
        `now` may be ahead of it), the soonest first; then the older ones, the soonest first.
        A backlog (a tenant's million one-shots, a dead worker's runs) then does not hold back
        the runs coming due now, not even in the first moments after its own instant (ADR
        0026). Up to `ahead_first` of the look-ahead's runs are leased before the first range:
        right after a herd's instant that range is the herd, and a run due a moment later
        would otherwise wait for a round with room left after it.

        With `after`, only runs free after that instant, in every range: a worker whose room
        is full of a herd it leased ahead of the herd's instant takes, beyond its room, a few
        runs due after everything it holds (ADR 0029).

        A hand-off that was never leased (attempt 0, origin "schedule") must also be free at
        `hand_offs_by` (default `now`): a worker behind an external queue passes an earlier
        instant, because such a run's message may still be on its way to another worker.
        Every other run (attempt 1 or more, or a manual trigger, or a run overlap buffer_one
        held back and released: it was never published, and its lease end is no longer its
        instant) needs only `now`. A run still held back is never leased.

        Each run leased gets fence + 1, attempt + 1, `owner` and `lease_until`, atomically: two
        workers leasing at once never get the same run. Returns them as fires (job target,
        retry policy, alert and the tenant's secrets as of this statement).

        Every lease (this one, `lease_run`, `lease_fenced_runs`) also starts the run's attempt:
        its started_at becomes `now` and its finished_at, http_status and error of a previous
        attempt are cleared (last_error stays). A run still owned by its previous lease (an
        outcome clears the owner: that lease expired unfinished, its worker died or froze)
        gets that attempt appended to the history in the same statement or transaction:
        status "lost", the old attempt number, fence and owner (as the worker), started at the
        old lease's start and finished at its end, error `LOST_ERROR`."""
        ...

    async def lease_run(
        self, run_id: int, fence_token: int, *, owner: str, lease_until: datetime, now: datetime
    ) -> Fire | None:
        """Lease one pending run whose fence is still `fence_token` (fence + 1, attempt + 1,
        its attempt starting at `now`, a lost attempt recorded as by `lease_runs`); None when
        it finished, is unknown, or another lease superseded that fence (a duplicate
        message)."""
        ...

    async def lease_fenced_runs(
        self,
        leases: Sequence[tuple[int, int]],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[Fire]:
        """`lease_run` for a whole batch of (run_id, fence_token) pairs, the envelopes a worker
        fetched from an external queue, in one statement or transaction: each pair whose run
        is still pending at that fence is leased (fence + 1, attempt + 1, started at `now`).
        Pairs that lease nothing (finished, superseded, unknown, or repeated within the batch)
        are left out; order is not kept."""
        ...

    async def release_leases(self, owners: Collection[str], *, now: datetime) -> int:
        """End at `now` the live leases of `owners`, processes known to be gone (gone_nodes):
        their pending runs are leasable at once instead of when the leases run out, and the
        next lease of each records its lost attempt and takes a new fence (ADR 0035). Returns
        how many leases ended; wakes the watchers of "runs" if any did."""
        ...

    async def take_back_own_leases(
        self,
        *,
        owner: str,
        holding: Collection[int],
        now: datetime,
        lease_until: datetime,
        limit: int,
    ) -> list[Fire]:
        """Take back the leases a lease call whose reply was lost may have left behind: the
        one way to repair a lost reply, for `lease_runs` and `lease_fenced_runs` alike.

        Every pending run leased to `owner` whose lease is still live (lease_until > `now`)
        and whose id is not in `holding` (the runs the caller holds and runs already) gets
        `lease_until` and is returned, at most `limit` of them, soonest-expiring first. The
        fence and the attempt are left as they are: they are the ones the lost reply carried,
        so an outcome written at that fence applies. A run whose lease expired (any worker may
        lease it anew, at a new fence), went to another owner or finished is never returned.
        It trusts `owner` to name one live process, as node ids do (host:pid by default).
        Nothing is added to the history and started_at stays: it is the same lease, renewed.
        """
        ...

    async def concurrency_caps(self) -> Mapping[str, int]:
        """{tenant: max_concurrent_runs} of the tenants that have that limit (empty: none has).
        The SQL stores read it at most once a second (store/run_caps.py) and drop it when a
        tenant's limits change through them; the lease statements take their capped forms
        only while it is not empty, and apply it in their own transaction (ADR 0024):

        `lease_runs` and `lease_fenced_runs` lease, of a capped tenant's runs, at most its
        room: its cap minus its runs going at `now` (pending, owner set, lease live), so that
        its running runs never pass the cap whoever leases. The others stay pending, unowned,
        at the same fence and attempt. A run `lease_fenced_runs` leaves for its tenant's cap
        is no longer in flight: `lease_runs` leases it once free at `now`, whatever
        `hand_offs_by` says (its lease end moves one microsecond past its instant)."""
        ...

    async def leasable_runs(self, now: datetime) -> int:
        """How many pending runs a worker could lease at `now` (the table queue's depth)."""
        ...

    async def oldest_leasable_at(self, now: datetime) -> datetime | None:
        """When the longest-waiting run that a worker could lease at `now` became leasable (the
        age of the queue's oldest waiting fire); None when none waits."""
        ...

    async def next_lease_at(self, after: datetime | None = None) -> datetime | None:
        """The earliest instant at which some pending run's lease is (or becomes) free; None
        when no run is pending. With `after`, only leases that end later than `after` count
        (None when none does). Workers sleep until then (worker/leaser.py)."""
        ...

    async def extend_leases(
        self, leases: Sequence[tuple[int, int]], *, lease_until: datetime
    ) -> Extended:
        """Heartbeat: move the lease of each pending (run_id, fence_token) to `lease_until`.

        Returns how many were extended (a pair named twice counts once), as an `Extended`
        naming the pairs; a run whose fence moved on (its lease expired and another worker took
        it, or overlap cancel_previous cancelled it) or that finished is not touched."""
        ...

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied:
        """Apply a batch of outcomes, in one statement or transaction.

        An outcome applies only if its run is still pending at the outcome's fence token; a
        zombie executor's late outcome is rejected. Of several outcomes for the same
        (run, fence) in one batch only the last is applied (`last_outcome_per_lease`). An
        applied outcome also appends the attempt to the history (the SQL stores keep a success
        on its run's row alone, where `list_attempts` finds it: ADR 0033). SUCCEEDED finishes
        the run; FAILED finishes and dead-letters it; PENDING releases it until `retry_at` (the
        next `lease_runs` after that instant runs it again, at a new fence).

        A SUCCEEDED or FAILED outcome of a run that overlap buffer_one made another wait for
        releases that run (leasable from the outcome's finished_at) in the same transaction,
        and wakes the watchers of "runs" (other processes too, where the backend can tell).

        Returns an `Applied`: the count, which also names the runs whose outcome applied (the
        executor sends a dead-letter alert only for a FAILED outcome whose write committed).
        """
        ...


class HistoryStore(Protocol):
    async def list_runs(
        self, job_id: str, *, limit: int = 50, before_id: int | None = None
    ) -> list[Run]:
        """One job's runs, newest first, at most `limit`, with ids below `before_id` (keyset
        pagination). Raises NotFound if the job does not exist."""
        ...

    async def get_run(self, run_id: int) -> Run:
        """One run as it is now, with its lease (owner and end). Raises NotFound."""
        ...

    async def runs_scheduled_between(
        self, job_id: str, start: datetime, end: datetime, *, limit: int
    ) -> list[Run]:
        """One job's runs whose nominal instant (`scheduled_for`) lies in [start, end], oldest
        first, at most `limit` (every origin: scheduled, manual, backfill, catch-up)."""
        ...

    async def list_occurrences(
        self, job_id: str, start: datetime, end: datetime, *, limit: int
    ) -> list[LedgerRange]:
        """One job's occurrence-ledger ranges that overlap [start, end], oldest first, at most
        `limit`. The claims write them (coalesced into a run, skipped for misfire) and
        `update_job` does (a resume passing over a pause)."""
        ...

    async def list_attempts(self, run_id: int) -> list[AttemptRecord]:
        """Every recorded attempt of a run (one per applied outcome, and one per lost lease),
        by attempt number, in the order recorded within one. Raises NotFound if the run does
        not exist."""
        ...

    async def list_dead_letters(
        self,
        *,
        limit: int = 50,
        before_id: int | None = None,
        job_id: str | None = None,
        tenant: str | None = None,
    ) -> list[Run]:
        """The dead-letter queue (of one job, if given; of the jobs of one tenant, if given:
        both filters apply together), newest run id first, at most `limit`, with ids below
        `before_id`."""
        ...

    async def redrive(self, run_ids: Sequence[int] | None, *, now: datetime) -> int:
        """Put these dead letters (None: all of them) back to pending, leasable at `now`, for
        one more attempt (its number one more than the last); ids that are not dead letters
        are ignored. Returns how many went back. Wakes the watchers of "runs"."""
        ...

    async def purge_dead_letters(self, run_ids: Sequence[int] | None) -> int:
        """Take these dead letters (None: all) out of the DLQ; they stay failed in the history,
        and their attempts become prunable. Returns how many."""
        ...

    async def prune_history(self, *, finished_before: datetime, limit: int) -> int:
        """Delete up to `limit` attempts, finished runs (not dead letters) that finished
        before the cutoff and occurrence-ledger ranges recorded before it; returns how many rows
        went. Call until it returns 0.

        Dead letters and their attempts stay (until redriven or purged). On PostgreSQL only the
        DEFAULT partition's attempts are deleted here: daily partitions go whole, by
        `maintain_history`."""
        ...

    async def maintain_history(self, *, now: datetime, retention: timedelta) -> HistoryMaintenance:
        """The backend's own upkeep of the history, before `prune_history`: on PostgreSQL it
        creates the coming days' partitions of tw_attempts and drops the expired ones, keeping
        dead letters' attempts (ADR 0007); elsewhere it does nothing. Safe to call from many
        processes at once (the others skip). Returns what it changed."""
        ...

    async def stats(self) -> StoreStats:
        """Jobs by state and the number of pending runs (metrics; may be approximate under
        concurrent writes)."""
        ...


class AccessStore(Protocol):
    """API keys and the tenants as a resource (ADR 0018). A key is stored by the SHA-256 of
    the whole key, never the key; its tenant is None for admin keys. A database starts with
    one tenant, `default` (migration 0006 adds it, and one for every tenant a job named
    before tenants had to exist; MemoryStore starts with it too). `JobStore.get_tenant` and
    `set_tenant_secrets` read and change a tenant's settings; `set_tenant_secrets` still
    creates the row when there is none."""

    async def create_key(self, key: ApiKey) -> None:
        """Store a new key, as given. Raises Conflict if a key with this id or this
        secret_hash exists (nothing is stored)."""
        ...

    async def get_key(self, key_id: str) -> ApiKey:
        """The key as stored now. Raises NotFound("key", key_id)."""
        ...

    async def key_by_hash(self, secret_hash: str) -> ApiKey | None:
        """The key whose secret_hash this is, revoked and expired ones included (the caller
        decides with `ApiKey.usable_at`); None when there is none."""
        ...

    async def list_keys(self, *, tenant: str | None = None) -> list[ApiKey]:
        """Every key (of one tenant, if given), revoked and expired ones included, by id
        ascending (code point order)."""
        ...

    async def revoke_key(self, key_id: str, *, now: datetime) -> ApiKey:
        """Revoke the key at `now`; a key revoked already keeps its first revoked_at (so this
        is idempotent). Returns the key as stored. Raises NotFound("key", key_id)."""
        ...

    async def touch_keys(self, used: Mapping[str, datetime]) -> None:
        """Record when keys were last used, {key id: instant}: each key's last_used_at becomes
        the later of the stored one and the given one (an older report never moves it back).
        Unknown ids are ignored. One statement (or transaction) for the whole batch."""
        ...

    async def create_tenant(
        self,
        tenant: str,
        *,
        now: datetime,
        webhook_secrets: Sequence[str] = (),
        limits: TenantLimits = NO_LIMITS,
    ) -> Tenant:
        """Create the tenant with these signing secrets and limits (created_at = updated_at =
        `now`); returns it. Raises TenantExists (a Conflict) if it exists."""
        ...

    async def list_tenants(self) -> list[Tenant]:
        """Every tenant, by name (code point order)."""
        ...

    async def set_tenant_egress(self, tenant: str, egress: EgressRules, *, now: datetime) -> Tenant:
        """Replace the tenant's destination lists (empty rules: none), keeping its other
        settings; updated_at becomes `now`. Returns the tenant as stored. Raises
        NotFound("tenant", tenant) if it does not exist (the row is not created)."""
        ...

    async def set_tenant_limits(
        self,
        tenant: str,
        limits: TenantLimits,
        *,
        now: datetime,
        expected_updated_at: datetime | None = None,
    ) -> Tenant:
        """Replace the tenant's limits whole (empty: none), keeping its other settings;
        updated_at becomes `now`. Returns the tenant as stored. Raises NotFound("tenant",
        tenant) if it does not exist (the row is not created), and StaleTenant if
        `expected_updated_at` is given and the tenant changed since (a read-merge-write lost
        no concurrent change: the caller reads again)."""
        ...

    async def count_tenant_jobs(self, tenant: str | None = None) -> dict[str, int]:
        """How many jobs each tenant has, in every state (its usage against
        `limits.max_jobs`); with `tenant`, that tenant only. A tenant without jobs is absent."""
        ...

    async def delete_tenant(self, tenant: str, *, now: datetime) -> None:
        """Delete the tenant and, in the same transaction, revoke every key of it at `now`
        (one revoked already keeps its revoked_at): its keys stay listed, unusable.

        Raises NotFound("tenant", tenant) if it does not exist, or TenantHasJobs (a Conflict,
        nothing changed) while any job names it. The store does not stop a job from naming
        the tenant after this check: jobs do not reference tenants in the schema."""
        ...


class SecretsStore(Protocol):
    """Secrets at rest (tickwork.sealing): the SQL stores seal them with the keyring they were
    given; MemoryStore keeps nothing at rest and reports nothing to do."""

    async def reseal_secrets(self) -> ResealReport:
        """Rewrite every stored secret sealed with the keyring's first key (after a rotation,
        or for rows written before encryption); an edit made meanwhile wins (counted as
        skipped)."""
        ...


class AuditStore(Protocol):
    """The audit log (`tw_audit`): who changed what through the API, and the answer it got.
    Append-only: entries are never changed, only pruned by age with the history retention."""

    async def record_audit(self, entries: Sequence[AuditEntry]) -> None:
        """Append the entries, in one statement or transaction (all or none). The store assigns
        each its id (any id given is ignored): ascending in the order given, and above every id
        assigned before, also after pruning."""
        ...

    async def list_audit(
        self,
        *,
        limit: int = 100,
        before_id: int | None = None,
        tenant: str | None = None,
        key_id: str | None = None,
    ) -> list[AuditEntry]:
        """Entries newest first (id descending), at most `limit`, with ids below `before_id`
        (keyset pagination); of one `tenant` (the tenant of the changed resource, not the
        key's) and of one `key_id`, if given: both filters apply together."""
        ...

    async def prune_audit(self, *, before: datetime, limit: int) -> int:
        """Delete up to `limit` entries made before `before` (at < before), oldest first;
        returns how many went. Call until it returns 0 (like `prune_history`)."""
        ...


class BackfillStore(Protocol):
    """Backfills (tw_backfills): ranges of past occurrences the paced lane replays."""

    async def create_backfill(self, backfill: Backfill) -> Backfill:
        """Store a new backfill as given (its id is ignored); returns it with the id the store
        assigned (ascending in creation order)."""
        ...

    async def get_backfill(self, backfill_id: int) -> Backfill:
        """The backfill as stored now. Raises NotFound("backfill", id)."""
        ...

    async def list_backfills(self, job_id: str, *, limit: int = 100) -> list[Backfill]:
        """One job's backfills, newest first, at most `limit` (none for an unknown job)."""
        ...

    async def running_backfills(self, *, limit: int) -> list[RunningBackfill]:
        """Running backfills, oldest first, at most `limit`, each with its job's schedule as
        it is now; a backfill whose job was deleted is left out."""
        ...

    async def advance_backfill(self, advance: BackfillSlice, *, now: datetime) -> int | None:
        """Apply one slice, in one statement or transaction: a compare-and-set that moves the
        backfill's cursor from `advance.expected_cursor` to `advance.new_cursor`, adds the
        slice's occurrences to `done`, sets its pacing clock and completes it if the slice
        `completes`; it moves only while the backfill is running at that cursor and, with
        `one_at_a_time`, while its job has no pending run. When it moves, each occurrence gets
        a run of `advance.origin` (its key `occurrence_key(job, t, origin)`), unowned and
        leasable at `now` like a manual run; an occurrence whose key has a run already is not
        inserted again. The job itself (next_run_at, fence, fired_count) is never touched.

        Returns how many runs were inserted, or None when the compare-and-set failed (another
        process advanced it, it was cancelled, or the job has a pending run): nothing changed.
        Wakes the watchers of "runs" when it inserted any."""
        ...

    async def cancel_backfill(self, backfill_id: int, *, now: datetime) -> Backfill:
        """Cancel the backfill if it is running (what it enqueued stays); a finished one is
        returned as it is. Raises NotFound("backfill", id)."""
        ...

    async def prune_backfills(self, *, before: datetime, limit: int) -> int:
        """Delete up to `limit` finished backfills (completed or cancelled) last changed
        before `before` (updated_at < before), oldest first; running ones always stay (the
        lane still needs them). Returns how many went. Call until it returns 0 (like
        `prune_history`)."""
        ...


class ScheduleStore(
    StoreLifecycle,
    JobStore,
    ClaimStore,
    LeaseStore,
    HistoryStore,
    AccessStore,
    AuditStore,
    SecretsStore,
    BackfillStore,
    Protocol,
):
    """Every part of the seam: what a backend implements, and what services are given."""


class Watchers:
    """Per-subscriber events, so one waiter clearing its event never hides a change from another."""

    def __init__(self) -> None:
        self._events: dict[Topic, list[asyncio.Event]] = {"jobs": [], "runs": [], "cluster": []}

    def watch(self, topic: Topic) -> asyncio.Event:
        event = asyncio.Event()
        self._events[topic].append(event)
        return event

    def notify(self, topic: Topic) -> None:
        for event in self._events[topic]:
            event.set()


async def missing_or_stale(store: ScheduleStore, tenant: str) -> NotFound | StaleTenant:
    """Why a compare-and-set on a tenant changed no row: it is gone, or it changed since read."""
    if await store.get_tenant(tenant) is None:
        return NotFound("tenant", tenant)
    return StaleTenant(f"tenant {tenant!r} changed since it was read")
