"""The job service: creating, editing, pausing, resuming, triggering and deleting jobs.

The request and answer records it takes and gives (`JobSpec`, `JobPatch`, `RunDetail`) live
here; the rules it applies are in `rules`. What the service adds to them:

* Every job has a retry policy (`RetryPolicy()` unless one is given); an edit that gives one
  replaces it whole, as it does a schedule or a target.
* Signing secrets are write-only: no answer ever contains them. An edit that gives a target
  without secrets keeps the job's secrets (`JobPatch.secrets` is KEEP); giving them, even
  empty, replaces them. `on_failure` (the dead-letter alert webhook) is kept or replaced the
  same way.
* An edit is a read, a change and a compare-and-set write on the job's fence token, retried on
  a fresh read when a scheduler claimed the job in between, so an edit never undoes a claim.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import Enum
from typing import Final, Literal

from tickwork.clock import Clock
from tickwork.domain.jobs import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    MIN_PRIORITY,
    AlertTarget,
    Job,
    JobState,
    Schedule,
    Target,
    WebhookTarget,
)
from tickwork.domain.masking import restore_headers, restore_url
from tickwork.domain.occurrences import LedgerRange
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import AttemptRecord, Run, unrecorded_lost_attempt
from tickwork.domain.tenant_limits import check_job_quota
from tickwork.domain.tenants import Tenant
from tickwork.errors import Conflict, InvalidInput, StaleJob
from tickwork.scheduler.window_load import WindowLoad
from tickwork.services.rules import (
    anchored,
    check_alert,
    check_fields,
    first_fire,
    new_job_id,
    paused,
    rescheduled,
    resumed,
)
from tickwork.services.tenants import check_job_egress
from tickwork.store.base import JobQuery, ScheduleStore
from tickwork.timing.ledger import paused_range
from tickwork.timing.shift import is_shifted, planned_of, window_seconds

__all__ = [
    "KEEP",
    "JobPatch",
    "JobService",
    "JobSpec",
    "Keep",
    "RunDetail",
    "ScheduleChange",
    "unknown_tenant",
]

EDIT_ATTEMPTS: Final = 5  # a job claimed every millisecond still gets edited within a few


class Keep(Enum):
    """In a JobPatch: leave this field as it is (where None means "clear it")."""

    KEEP = "keep"


KEEP: Final = Keep.KEEP


@dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    """Everything a caller chooses about a new job."""

    name: str
    schedule: Schedule
    target: Target
    tenant: str = "default"
    retry: RetryPolicy | None = None  # None: the default RetryPolicy()
    on_failure: AlertTarget | None = None
    priority: int = DEFAULT_PRIORITY


# What a partial schedule edit does to the job's schedule; it raises InvalidInput when it cannot
# apply (a time zone for a schedule that is not cron).
ScheduleChange = Callable[[Schedule], Schedule]


@dataclass(frozen=True, kw_only=True, slots=True)
class JobPatch:
    """A partial edit: None keeps a field; a given schedule, target or retry policy replaces the
    old one whole. `secrets` (the webhook target's) and `on_failure` are kept unless given;
    given as () or None they are cleared."""

    name: str | None = None
    tenant: str | None = None
    # A new schedule, whole, or a change to apply to the job's (a PATCH naming a few fields).
    schedule: Schedule | ScheduleChange | None = None
    target: Target | None = None
    retry: RetryPolicy | None = None
    secrets: tuple[str, ...] | Literal[Keep.KEEP] = field(default=KEEP, repr=False)
    on_failure: AlertTarget | Literal[Keep.KEEP] | None = KEEP
    priority: int | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RunDetail:
    """A run with its attempt history, oldest attempt first, as of one instant (its state and
    a lost attempt not recorded yet depend on whether its lease is live)."""

    run: Run
    attempts: list[AttemptRecord]
    as_of: datetime


class JobService:
    """Jobs and their runs, as the API offers them."""

    def __init__(self, store: ScheduleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        # Windowed first occurrences are placed against the due index's counts, read once a
        # second per range and counted here in between: a herd of creates costs one read per
        # second, not one (growing) count per create (ADR 0022).
        self._windows = WindowLoad(store, refresh_s=1.0, monotonic=clock.monotonic_s)

    async def create(self, spec: JobSpec) -> Job:
        now = self._clock.now()
        schedule = anchored(spec.schedule, now)
        retry = RetryPolicy() if spec.retry is None else spec.retry
        check_fields(name=spec.name, tenant=spec.tenant, target=spec.target, retry=retry)
        check_alert(spec.on_failure)
        tenant = await self.require_tenant(spec.tenant)
        check_job_egress(tenant, _job_urls(spec.target, spec.on_failure))
        job = Job(
            id=new_job_id(now),
            name=spec.name,
            tenant=spec.tenant,
            schedule=schedule,
            target=spec.target,
            state=JobState.SCHEDULED,
            next_run_at=first_fire(schedule, now),
            created_at=now,
            updated_at=now,
            retry=retry,
            on_failure=spec.on_failure,
            priority=check_priority(spec.priority),
        )
        job = await self._planned(None, job)
        # The store checks the quota under a lock; a tenant without one pays nothing for it.
        return await self._store.create_job(job, check_quota=tenant.limits.max_jobs is not None)

    async def require_tenant(self, tenant: str) -> Tenant:
        """The tenant; raises InvalidInput (code "unknown_tenant") unless it exists."""
        found = await self._store.get_tenant(tenant)
        if found is None:
            raise unknown_tenant(tenant)
        return found

    async def get(self, job_id: str) -> Job:
        return await self._store.get_job(job_id)

    async def list(self, query: JobQuery) -> list[Job]:
        return await self._store.list_jobs(query)

    async def _planned(self, before: Job | None, edited: Job) -> Job:
        """`edited` with its next occurrence moved to its planned instant by the schedule's
        jitter or window (ADR 0022), when the rules gave it a new one (always at its nominal
        instant): a new job, a new schedule, a resume. A job whose next occurrence and
        schedule are unchanged (a rename, a pause) keeps its planned instant: a windowed
        occurrence is never placed twice."""
        nominal = edited.next_run_at
        if nominal is None or not is_shifted(edited.schedule):
            return edited
        if (
            before is not None
            and before.next_run_at == nominal
            and before.schedule == edited.schedule
        ):
            return edited
        span = window_seconds(edited.schedule, nominal)
        load = None if span is None else await self._windows.load_for([span])
        planned = planned_of(edited.id, edited.schedule, nominal, load=load)
        return replace(edited, next_run_at=planned)

    async def _edit(
        self,
        job_id: str,
        change: Callable[[Job, datetime], Job],
        ledger: Callable[[Job, Job, datetime], LedgerRange | None] | None = None,
    ) -> Job:
        """Read, change and write back with the store's compare-and-set on the fence token,
        with what `ledger` says the change passed over (before, after, now) recorded with it.

        A scheduler claiming the job in between makes the write stale; the change is then
        re-applied to the fresh job, so an edit never undoes a claim (no lost advance, no
        re-armed one-shot).
        """
        for _ in range(EDIT_ATTEMPTS):
            job = await self._store.get_job(job_id)
            now = self._clock.now()
            edited = change(job, now)
            if edited is job:
                return job
            passed = None if ledger is None else ledger(job, edited, now)
            edited = await self._planned(job, edited)
            try:
                if passed is not None:
                    return await self._store.update_job(edited, ledger=[passed])
                return await self._store.update_job(edited)
            except StaleJob:
                continue
        raise Conflict(f"job {job_id!r} kept changing while it was edited; try again")

    async def update(self, job_id: str, patch: JobPatch) -> Job:
        tenant = None if patch.tenant is None else await self.require_tenant(patch.tenant)
        if tenant is not None:
            await self._check_move_quota(job_id, tenant)
        if tenant is None and _moves_urls(patch):
            tenant = await self._store.get_tenant((await self._store.get_job(job_id)).tenant)

        def change(job: Job, now: datetime) -> Job:
            edited = _patched(job, patch, now)
            # Only an edit of a URL or of the tenant is checked: the lists may have narrowed
            # since the job was made, and renaming it should not fail for that.
            if tenant is not None and tenant.tenant == edited.tenant:
                check_job_egress(tenant, _job_urls(edited.target, edited.on_failure))
            return edited

        return await self._edit(job_id, change)

    async def _check_move_quota(self, job_id: str, tenant: Tenant) -> None:
        """A job moved to another tenant counts against that tenant's `max_jobs`. Checked
        before the move without a lock: concurrent moves (unlike creates) may pass the quota
        together; creates after them are refused until the tenant is under it again."""
        if tenant.limits.max_jobs is None:
            return
        if (await self._store.get_job(job_id)).tenant == tenant.tenant:
            return
        counts = await self._store.count_tenant_jobs(tenant.tenant)
        check_job_quota(tenant.tenant, tenant.limits, counts.get(tenant.tenant, 0))

    async def pause(self, job_id: str, note: str | None = None) -> Job:
        return await self._edit(job_id, lambda job, now: paused(job, now, note))

    async def resume(self, job_id: str, *, catch_up: bool = False) -> Job:
        """Resume; the occurrences that fell while paused are recorded in the ledger as
        `paused`, in the same write, unless `catch_up` hands them to the misfire policy."""
        return await self._edit(
            job_id,
            lambda job, now: resumed(job, now, catch_up=catch_up),
            None if catch_up else paused_range,
        )

    async def trigger(self, job_id: str) -> Run:
        """Fire the job once now, outside its schedule, whatever its state."""
        return await self._store.add_manual_run(job_id, now=self._clock.now())

    async def delete(self, job_id: str) -> None:
        await self._store.delete_job(job_id)

    async def runs(
        self, job_id: str, limit: int = 50, before_id: int | None = None
    ) -> builtins.list[Run]:
        return await self._store.list_runs(job_id, limit=limit, before_id=before_id)

    async def run(self, run_id: int) -> RunDetail:
        """One run and its attempts, as of now: when a lease holding it has expired and no
        worker has leased it again yet, its lost attempt (which that lease will record) is
        shown last. Raises NotFound."""
        run = await self._store.get_run(run_id)
        attempts = await self._store.list_attempts(run_id)
        now = self._clock.now()
        lost = unrecorded_lost_attempt(run, now)
        return RunDetail(
            run=run, attempts=attempts if lost is None else [*attempts, lost], as_of=now
        )


def check_priority(priority: int) -> int:
    """The priority, if it is one (1..9); InvalidInput naming the field otherwise."""
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidInput(
            "priority",
            f"give a whole number from {MIN_PRIORITY} to {MAX_PRIORITY} (higher first when"
            f" more is due than can be claimed at once; default {DEFAULT_PRIORITY})",
        )
    return priority


def _job_urls(target: Target, alert: AlertTarget | None) -> list[tuple[str, str]]:
    """The (field, URL) pairs of a job that its tenant's destination lists judge."""
    urls = [("target.url", target.url)] if isinstance(target, WebhookTarget) else []
    if alert is not None:
        urls.append(("on_failure.url", alert.url))
    return urls


def _moves_urls(patch: JobPatch) -> bool:
    return isinstance(patch.target, WebhookTarget) or patch.on_failure not in (KEEP, None)


def unknown_tenant(tenant: str) -> InvalidInput:
    """The error for a job naming a tenant that does not exist (or that the caller's key may
    not see: the same words, so a tenant key learns nothing about other tenants)."""
    return InvalidInput(
        "tenant",
        f"no tenant {tenant!r}: use an existing one, or have an admin create it "
        "(POST /v1/tenants, tickwork tenants create)",
        code="unknown_tenant",
    )


# -- applying a patch -------------------------------------------------------------------------
# Pure like the rules, but here: they read a JobPatch (KEEP), which is this module's record.


def _patched(job: Job, patch: JobPatch, now: datetime) -> Job:
    edited = replace(
        job,
        name=job.name if patch.name is None else patch.name,
        tenant=job.tenant if patch.tenant is None else patch.tenant,
        target=_patched_target(job, patch),
        retry=job.retry if patch.retry is None else patch.retry,
        on_failure=_patched_alert(job, patch),
        updated_at=now,
        priority=job.priority if patch.priority is None else check_priority(patch.priority),
    )
    check_fields(name=edited.name, tenant=edited.tenant, target=edited.target, retry=edited.retry)
    check_alert(edited.on_failure)
    if patch.schedule is not None:
        given = patch.schedule
        schedule = anchored(given if isinstance(given, Schedule) else given(job.schedule), now)
        if schedule != job.schedule:
            edited = rescheduled(edited, schedule, now)
    return edited


def _patched_alert(job: Job, patch: JobPatch) -> AlertTarget | None:
    """The edited alert; masks in a given one keep the stored values they hide."""
    if patch.on_failure is KEEP:
        return job.on_failure
    if patch.on_failure is None or job.on_failure is None:
        return patch.on_failure
    stored = job.on_failure
    return replace(
        patch.on_failure,
        url=restore_url(patch.on_failure.url, stored.url),
        headers=restore_headers(patch.on_failure.headers, stored.headers, all_secret=True),
    )


def _patched_target(job: Job, patch: JobPatch) -> Target:
    """The edited target, with the job's secrets kept unless the patch gives new ones."""
    target = job.target if patch.target is None else patch.target
    if patch.secrets is KEEP:
        kept = job.target.secrets if isinstance(job.target, WebhookTarget) else ()
        secrets = kept if isinstance(target, WebhookTarget) else ()
    else:
        secrets = patch.secrets
    if isinstance(target, WebhookTarget):
        stored = job.target if isinstance(job.target, WebhookTarget) else None
        if patch.target is not None and stored is not None:
            # A target read from the API and sent back carries masks: keep what they hide.
            target = replace(
                target,
                url=restore_url(target.url, stored.url),
                headers=restore_headers(target.headers, stored.headers),
            )
        return replace(target, secrets=secrets)
    if secrets:
        raise InvalidInput("target.secrets", 'only a "webhook" target takes secrets')
    return target
