"""The `ScheduleStore` seam: where jobs, their next fire and their runs live.

Every backend (memory, SQLite, PostgreSQL) passes one contract suite
(`tests/contract/test_store_contract.py`). The contract, written once here:

* Instants go in and come out as aware UTC datetimes, kept to the microsecond.
* `due_jobs` is a read: it locks nothing and may return jobs another scheduler is claiming.
* `claim` (and `claim_hand_off`, its form for workers elsewhere) is the only way a job fires.
  For each plan it performs, in ONE transaction, a compare-and-set on
  `(fence_token, next_run_at)` that increments the fence, advances `next_run_at` (or completes
  the job) and inserts the occurrence's run. A plan whose job
  changed since it was read (another claimer won, the job was paused, edited or deleted) is
  dropped silently and yields no fire. A run whose occurrence key already exists is not inserted
  again. So however many schedulers race, each occurrence fires at most once per claim winner,
  and a crash leaves either nothing or a complete claim + advance + pending run.
* `lease_runs` leases pending runs whose lease is free (expired: a crashed executor; released: a
  manual trigger, a retry whose backoff has passed, a redriven dead letter), incrementing the
  run's fence token and attempt. It is the table queue's dequeue.
* `lease_fenced_runs` leases runs named by (run_id, fence_token) pairs, the envelopes a worker
  fetched from an external queue, in one statement or transaction: a compare-and-set on the
  fence, so a duplicate or superseded envelope (or a run already finished) leases nothing.
* `relet_own_runs` takes back, without a new fence, runs leased to this owner at the fences
  a lease call would have produced: a lease whose commit went through while its reply was lost.
* `take_back_own_leases` is the same repair for `lease_runs`, whose caller cannot know the
  fences: every pending run leased to this owner, still live and not among the runs the caller
  already holds, gets a fresh lease and is returned at its fence (unchanged). It trusts `owner`
  to name one live process, as node ids do (host:pid by default).
* `extend_leases` is the executor's heartbeat for long runs, fence-guarded like every write.
* `finish_runs` applies an outcome only if the run is still pending with the same fence token;
  a zombie executor's late outcome is rejected (it returns how many were applied). An applied
  outcome also appends the attempt to the history. SUCCEEDED finishes the run; FAILED finishes
  and dead-letters it; PENDING releases it until `retry_at` (the next `lease_runs` after that
  instant runs it again).
  It returns an `Applied`: the count, which also names the runs whose outcome applied (the
  executor sends a dead-letter alert only for a FAILED outcome whose write committed).
* Tenants: `get_tenant` (None when the tenant has no settings) and `set_tenant_secrets` (an
  upsert; empty secrets clear them and keep the row). Every fire returned by `claim`,
  `lease_runs` and `lease_run` carries its tenant's secrets as of that statement.
* Dead letters: `list_dead_letters`, `redrive` (back to pending, leasable at once; the next
  attempt is one more than the last) and `purge` (out of the DLQ; the run stays failed).
* History: `prune_history` deletes old attempts (not those of dead letters) and finished runs
  (not dead letters) in batches. `maintain_history` is the backend's own upkeep before that:
  on PostgreSQL it creates the coming days' partitions of tw_attempts and drops the expired ones,
  keeping dead letters' attempts (ADR 0007); elsewhere it does nothing. Safe to call from many
  processes at once.
* `watch(topic)` returns an event set whenever jobs (topic "jobs") or runs (topic "runs")
  change, by this process or, where the backend can tell (PostgreSQL LISTEN/NOTIFY), another.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, Protocol

from tickwork.domain.jobs import Job, JobState, Schedule
from tickwork.domain.runs import AttemptRecord, Envelope, Fire, Run, RunOutcome
from tickwork.domain.tenants import Tenant

Topic = Literal["jobs", "runs"]


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


@dataclass(frozen=True, kw_only=True, slots=True)
class DueJob:
    """A job whose next_run_at has come, as read by the due-scan (not yet claimed)."""

    job_id: str
    fence_token: int
    next_run_at: datetime
    schedule: Schedule


@dataclass(frozen=True, kw_only=True, slots=True)
class ClaimPlan:
    """What one claim does to one job; computed by pure code (`scheduler.planning`)."""

    job_id: str
    expected_fence: int
    expected_next_run_at: datetime
    scheduled_for: datetime | None  # the occurrence to fire; None fires nothing (misfire skip)
    coalesced: int  # missed occurrences folded into this fire (or skipped, if nothing fires)
    new_next_run_at: datetime | None  # None: the job is completed


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
class HistoryMaintenance:
    """What one `maintain_history` call changed."""

    created: tuple[str, ...] = ()  # partitions created
    dropped: tuple[str, ...] = ()  # partitions dropped
    kept_attempts: int = 0  # dead letters' attempts copied out of dropped partitions
    skipped: bool = False  # another process was maintaining (or held a lock too long)


class ScheduleStore(Protocol):
    async def open(self) -> None:
        """Connect (and, where the backend is embedded, create and migrate the schema)."""
        ...

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """The cheapest round trip that proves the store answers (health checks)."""
        ...

    # -- jobs -------------------------------------------------------------------------------
    async def create_job(self, job: Job) -> Job: ...

    async def get_job(self, job_id: str) -> Job:
        """Raises NotFound."""
        ...

    async def list_jobs(self, query: JobQuery) -> list[Job]: ...

    async def update_job(self, job: Job) -> Job:
        """Overwrite the job's editable fields, state and next_run_at, if its fence token is
        still `job.fence_token` (compare-and-set: an edit never undoes a claim it did not see).

        Raises NotFound, or StaleJob when the job was claimed since it was read.
        """
        ...

    async def delete_job(self, job_id: str) -> None:
        """Delete the job and its runs. Raises NotFound."""
        ...

    # -- fire path --------------------------------------------------------------------------
    async def due_jobs(
        self, until: datetime, limit: int, *, not_before: datetime | None = None
    ) -> list[DueJob]:
        """Scheduled jobs with next_run_at <= until (and >= not_before), earliest first.

        The lower bound is how the scheduler skips what its earlier ticks settled: on
        PostgreSQL every claim leaves a dead version of the job at its old next_run_at until
        vacuum, and an unbounded scan walks them all, from the oldest (ADR 0008)."""
        ...

    async def next_due_at(self, not_before: datetime | None = None) -> datetime | None:
        """The earliest next_run_at of any scheduled job (of those at or after `not_before`,
        for the same reason as in `due_jobs`)."""
        ...

    async def claim(
        self,
        plans: Sequence[ClaimPlan],
        *,
        owner: str,
        lease_until: datetime,
        now: datetime,
    ) -> list[Fire]:
        """Claim, advance and record each plan's occurrence (see the module docstring).

        The new runs are leased to `owner` until `lease_until` (attempt 1), for an executor in
        the same process, and come back as complete fires.
        """
        ...

    async def claim_hand_off(
        self, plans: Sequence[ClaimPlan], *, owner: str, now: datetime
    ) -> list[Envelope]:
        """The same claim, for workers in other processes (the table queue).

        The new runs are left unowned at attempt 0, their lease ending at their scheduled
        instant, so any worker leases them (`lease_runs`, or `lease_fenced_runs` with the
        envelope's fence) from that instant on; the lease makes it attempt 1. `owner` is only
        recorded on the job as its last claimer. Envelopes, not fires: the scheduler publishes
        or counts them and never runs them, so the job's target, retry policy, secrets and alert
        are not read (building them was a fifth of a hand-off scheduler's CPU). Wakes the
        watchers of topic "runs", in other processes too where the backend can tell.
        """
        ...

    async def add_manual_run(self, job_id: str, *, now: datetime) -> Run:
        """Record an out-of-schedule occurrence at `now`, leasable at once. Raises NotFound."""
        ...

    async def lease_runs(
        self, *, now: datetime, owner: str, lease_until: datetime, limit: int
    ) -> list[Fire]: ...

    async def lease_run(
        self, run_id: int, fence_token: int, *, owner: str, lease_until: datetime
    ) -> Fire | None:
        """Lease one pending run whose fence is still `fence_token` (fence + 1, attempt + 1);
        None when it finished, or another lease superseded that fence (a duplicate message)."""
        ...

    async def lease_fenced_runs(
        self, leases: Sequence[tuple[int, int]], *, owner: str, lease_until: datetime
    ) -> list[Fire]:
        """`lease_run` for a whole batch at once: lease each pending (run_id, fence_token) whose
        fence is still that token (fence + 1, attempt + 1). Pairs that lease nothing (finished,
        superseded, unknown, or repeated within the batch) are left out; order is not kept."""
        ...

    async def relet_own_runs(
        self, leases: Sequence[tuple[int, int]], *, owner: str, lease_until: datetime
    ) -> list[Fire]:
        """Take back leases this `owner` may hold without knowing it: each pending
        (run_id, fence_token) still leased to `owner` at exactly that fence gets `lease_until`
        and is returned, the fence unchanged. For a lease call that failed after its commit
        (the reply was lost): the caller asks for the fences that call would have produced."""
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
        """Take back the leases a `lease_runs` call whose reply was lost may have left behind.

        Every pending run leased to `owner` whose lease is still live (lease_until > `now`) and
        whose id is not in `holding` (the runs the caller holds and runs already) gets
        `lease_until` and is returned, at most `limit` of them, soonest-expiring first. The
        fence and the attempt are left as they are: they are the ones the lost reply carried,
        so an outcome written at that fence applies. A run whose lease expired (any worker may
        lease it anew, at a new fence), went to another owner or finished is never returned.
        """
        ...

    async def leasable_runs(self, now: datetime) -> int:
        """How many pending runs a worker could lease at `now` (the table queue's depth)."""
        ...

    async def next_lease_at(self) -> datetime | None:
        """The earliest instant at which some pending run's lease is (or becomes) free."""
        ...

    async def extend_leases(
        self, leases: Sequence[tuple[int, int]], *, lease_until: datetime
    ) -> int:
        """Heartbeat: move the lease of each pending (run_id, fence_token) to `lease_until`.

        Returns how many were extended; a run whose fence moved on is not touched.
        """
        ...

    async def finish_runs(self, outcomes: Sequence[RunOutcome]) -> Applied: ...

    # -- tenants ----------------------------------------------------------------------------
    async def get_tenant(self, tenant: str) -> Tenant | None:
        """The tenant's settings; None when it has none (no row)."""
        ...

    async def set_tenant_secrets(
        self, tenant: str, secrets: Sequence[str], *, now: datetime
    ) -> Tenant:
        """Replace the tenant's signing secrets (empty: clear them); creates the row if needed."""
        ...

    # -- history ----------------------------------------------------------------------------
    async def list_runs(
        self, job_id: str, *, limit: int = 50, before_id: int | None = None
    ) -> list[Run]:
        """Newest first. Raises NotFound if the job does not exist."""
        ...

    async def get_run(self, run_id: int) -> Run:
        """Raises NotFound."""
        ...

    async def list_attempts(self, run_id: int) -> list[AttemptRecord]:
        """Oldest first. Raises NotFound if the run does not exist."""
        ...

    # -- dead letters -----------------------------------------------------------------------
    async def list_dead_letters(
        self, *, limit: int = 50, before_id: int | None = None, job_id: str | None = None
    ) -> list[Run]:
        """Newest run id first."""
        ...

    async def redrive(self, run_ids: Sequence[int] | None, *, now: datetime) -> int:
        """Re-enqueue these dead letters (None: all of them); returns how many."""
        ...

    async def purge_dead_letters(self, run_ids: Sequence[int] | None) -> int:
        """Drop these dead letters from the DLQ (None: all); they stay failed in the history."""
        ...

    async def prune_history(self, *, finished_before: datetime, limit: int) -> int:
        """Delete up to `limit` attempts and finished runs (not dead letters) that finished
        before the cutoff; returns how many rows went. Call until it returns 0.

        Dead letters and their attempts stay (until redriven or purged). On PostgreSQL only the
        DEFAULT partition's attempts are deleted here: daily partitions go whole, by
        `maintain_history`."""
        ...

    async def maintain_history(self, *, now: datetime, retention: timedelta) -> HistoryMaintenance:
        """Backend upkeep of the history ahead of `prune_history` (see the module docstring)."""
        ...

    async def stats(self) -> StoreStats: ...

    # -- change notification ----------------------------------------------------------------
    def watch(self, topic: Topic) -> asyncio.Event: ...


class Watchers:
    """Per-subscriber events, so one waiter clearing its event never hides a change from another."""

    def __init__(self) -> None:
        self._events: dict[Topic, list[asyncio.Event]] = {"jobs": [], "runs": []}

    def watch(self, topic: Topic) -> asyncio.Event:
        event = asyncio.Event()
        self._events[topic].append(event)
        return event

    def notify(self, topic: Topic) -> None:
        for event in self._events[topic]:
            event.set()
