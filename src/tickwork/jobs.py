"""The job service: the rules for creating, editing, pausing and triggering jobs.

It sits between the edges (HTTP API, CLI via the API) and the `ScheduleStore`: every write goes
through a store method and every instant comes from the injected `Clock`, read once per call so
one request sees one "now".

Rules worth knowing (the API reference repeats them for users):

* A new job's id is time-sortable (`new_job_id`), so keyset pagination by id lists jobs in
  creation order.
* `next_run_at` is the schedule's first occurrence at or after the moment the job is accepted.
  A schedule with no occurrence left (an `end_at` in the past, a cron that can never match
  before its end) is rejected. A one-shot `at` in the past is accepted and fires at once.
* Pausing keeps `next_run_at` for display. Resuming recomputes it from now: occurrences that
  fell while the job was paused are skipped, not replayed (a one-shot that has not fired yet
  still fires once).
* An edit that changes the schedule recomputes `next_run_at` from now and re-arms a completed job.
* Every job has a retry policy (`RetryPolicy()` unless one is given); an edit that gives one
  replaces it whole. Its bounds (`MAX_ATTEMPTS`, `MAX_MULTIPLIER`) are checked here, its
  internal consistency (max delay >= base delay) by `RetryPolicy` itself.
* Signing secrets are write-only: a webhook target may carry 1-2 `whsec_...` secrets
  (`check_secrets`), which no answer ever contains. An edit that gives a target without
  secrets keeps the job's secrets (`JobPatch.secrets` is KEEP); giving them, even empty,
  replaces them. `on_failure` (the dead-letter alert webhook) is kept or replaced the same way.
* Dead letters (`DeadLetterService`): runs that failed for good. Redriving one puts it back to
  pending, leasable at once, for one more attempt; purging takes it out of the queue and leaves
  it failed in the history. Acting on "one job's" dead letters walks that job's queue in pages,
  because the store acts on run ids or on the whole queue.
"""

from __future__ import annotations

import builtins
import secrets
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import Enum
from typing import Final, Literal
from urllib.parse import urlsplit

from tickwork.clock import Clock
from tickwork.domain.jobs import (
    AlertTarget,
    EveryTrigger,
    Job,
    JobState,
    Schedule,
    Target,
    TaskTarget,
    WebhookTarget,
)
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import AttemptRecord, Run
from tickwork.errors import Conflict, InvalidInput, NotFound, StaleJob
from tickwork.store.base import JobQuery, ScheduleStore
from tickwork.timing.durations import format_duration_ms
from tickwork.timing.triggers import first_occurrence, validate_schedule
from tickwork.webhooks import MAX_SIGNING_SECRETS, parse_secret

__all__ = [
    "ANCHOR_AT_ACCEPT",
    "KEEP",
    "MAX_ATTEMPTS",
    "MAX_MULTIPLIER",
    "MAX_NAME_CHARS",
    "MAX_TIMEOUT_S",
    "RETRY_API_NAMES",
    "WEBHOOK_METHODS",
    "DeadLetterService",
    "JobPatch",
    "JobService",
    "JobSpec",
    "NotDeadLettered",
    "RunDetail",
    "check_secrets",
    "check_webhook_url",
    "new_job_id",
    "retry_policy",
]

# An `EveryTrigger` anchored here is anchored at the instant the service accepts the job, read
# from the same clock reading as next_run_at (two reads could disagree about the first fire).
ANCHOR_AT_ACCEPT: Final = datetime(1, 1, 1, tzinfo=UTC)

MAX_NAME_CHARS: Final = 200
MAX_TENANT_CHARS: Final = 100
MAX_TIMEOUT_S: Final = 300.0
MAX_URL_CHARS: Final = 2048
MAX_TASK_TIMEOUT_S: Final = 3600.0
EDIT_ATTEMPTS: Final = 5  # a job claimed every millisecond still gets edited within a few
WEBHOOK_METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
MAX_ATTEMPTS: Final = 100
MAX_MULTIPLIER: Final = 10.0
DLQ_PAGE: Final = 500  # run ids per store call when acting on one job's dead letters
# RetryPolicy's field names as the API (and its error messages' `field`) spells them.
RETRY_API_NAMES: Final = {
    "max_attempts": "max_attempts",
    "base_delay_ms": "backoff",
    "max_delay_ms": "max_backoff",
    "multiplier": "multiplier",
}
_ATTEMPTS_HINT: Final = f"give 1 to {MAX_ATTEMPTS} attempts (the first one included)"
_MULTIPLIER_HINT: Final = f"give a multiplier from 1 to {MAX_MULTIPLIER:g}"


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


@dataclass(frozen=True, kw_only=True, slots=True)
class JobPatch:
    """A partial edit: None keeps a field; a given schedule, target or retry policy replaces the
    old one whole. `secrets` (the webhook target's) and `on_failure` are kept unless given;
    given as () or None they are cleared."""

    name: str | None = None
    tenant: str | None = None
    schedule: Schedule | None = None
    target: Target | None = None
    retry: RetryPolicy | None = None
    secrets: tuple[str, ...] | Literal[Keep.KEEP] = field(default=KEEP, repr=False)
    on_failure: AlertTarget | Literal[Keep.KEEP] | None = KEEP


@dataclass(frozen=True, kw_only=True, slots=True)
class RunDetail:
    """A run with its attempt history, oldest attempt first."""

    run: Run
    attempts: list[AttemptRecord]


class NotDeadLettered(NotFound):
    """The run does not exist or is not in the dead-letter queue (HTTP 404)."""

    code = "not_dead_lettered"

    def __init__(self, run_id: int) -> None:
        super().__init__("run", str(run_id))
        self.args = (
            f"run {run_id} is not a dead letter: it does not exist, or it is not in the "
            "dead-letter queue (never failed for good, or already redriven or purged)",
        )


class JobService:
    def __init__(self, store: ScheduleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def create(self, spec: JobSpec) -> Job:
        now = self._clock.now()
        schedule = _anchor(spec.schedule, now)
        retry = RetryPolicy() if spec.retry is None else spec.retry
        _check_fields(name=spec.name, tenant=spec.tenant, target=spec.target, retry=retry)
        _check_alert(spec.on_failure)
        next_run_at = _first_fire(schedule, now)
        job = Job(
            id=new_job_id(now),
            name=spec.name,
            tenant=spec.tenant,
            schedule=schedule,
            target=spec.target,
            state=JobState.SCHEDULED,
            next_run_at=next_run_at,
            created_at=now,
            updated_at=now,
            retry=retry,
            on_failure=spec.on_failure,
        )
        return await self._store.create_job(job)

    async def get(self, job_id: str) -> Job:
        return await self._store.get_job(job_id)

    async def list(self, query: JobQuery) -> list[Job]:
        return await self._store.list_jobs(query)

    async def _edit(self, job_id: str, change: Callable[[Job, datetime], Job]) -> Job:
        """Read, change and write back with the store's compare-and-set on the fence token.

        A scheduler claiming the job in between makes the write stale; the change is then
        re-applied to the fresh job, so an edit never undoes a claim (no lost advance, no
        re-armed one-shot).
        """
        for _ in range(EDIT_ATTEMPTS):
            job = await self._store.get_job(job_id)
            edited = change(job, self._clock.now())
            if edited is job:
                return job
            try:
                return await self._store.update_job(edited)
            except StaleJob:
                continue
        raise Conflict(f"job {job_id!r} kept changing while it was edited; try again")

    async def update(self, job_id: str, patch: JobPatch) -> Job:
        return await self._edit(job_id, lambda job, now: _patched(job, patch, now))

    async def pause(self, job_id: str) -> Job:
        return await self._edit(job_id, _paused)

    async def resume(self, job_id: str) -> Job:
        return await self._edit(job_id, _resumed)

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
        """One run and its attempts. Raises NotFound."""
        run = await self._store.get_run(run_id)
        return RunDetail(run=run, attempts=await self._store.list_attempts(run_id))


class DeadLetterService:
    """List, redrive and purge dead letters; `job_id` None means every job's."""

    def __init__(self, store: ScheduleStore, clock: Clock, *, page: int = DLQ_PAGE) -> None:
        self._store = store
        self._clock = clock
        self._page = page

    async def list(
        self, *, limit: int = 50, before_id: int | None = None, job_id: str | None = None
    ) -> builtins.list[Run]:
        """Newest first. Raises NotFound for an unknown `job_id`."""
        if job_id is not None:
            await self._store.get_job(job_id)
        return await self._store.list_dead_letters(limit=limit, before_id=before_id, job_id=job_id)

    async def redrive_one(self, run_id: int) -> None:
        """Give one dead letter another attempt. Raises NotDeadLettered."""
        if not await self._store.redrive([run_id], now=self._clock.now()):
            raise NotDeadLettered(run_id)

    async def redrive(self, job_id: str | None = None) -> int:
        """Give every dead letter (of `job_id`) another attempt; returns how many."""
        now = self._clock.now()
        return await self._each_page(job_id, lambda ids: self._store.redrive(ids, now=now))

    async def purge_one(self, run_id: int) -> None:
        """Drop one dead letter from the queue. Raises NotDeadLettered."""
        if not await self._store.purge_dead_letters([run_id]):
            raise NotDeadLettered(run_id)

    async def purge(self, job_id: str | None = None) -> int:
        """Drop every dead letter (of `job_id`) from the queue; returns how many."""
        return await self._each_page(job_id, self._store.purge_dead_letters)

    async def _each_page(
        self, job_id: str | None, act: Callable[[builtins.list[int] | None], Awaitable[int]]
    ) -> int:
        if job_id is None:
            return await act(None)
        await self._store.get_job(job_id)
        done, before = 0, None
        while True:
            page = await self._store.list_dead_letters(
                limit=self._page, before_id=before, job_id=job_id
            )
            if page:
                done += await act([run.id for run in page])
            if len(page) < self._page:
                return done
            before = page[-1].id


# -- ids --------------------------------------------------------------------------------------

_ID_LOCK = threading.Lock()
_last_id: tuple[int, int] = (0, 0)  # (ms, random part) of the latest id from this process
_RANDOM_BITS: Final = 80


def new_job_id(now: datetime) -> str:
    """A 32-hex-char id: 48-bit epoch milliseconds, then 80 random bits.

    Within one process ids strictly increase even when the clock stands still or steps back
    (the random part of the previous id is incremented), so sorting by id is creation order.
    """
    global _last_id
    ms = max(0, int(now.timestamp() * 1000)) & ((1 << 48) - 1)
    with _ID_LOCK:
        last_ms, last_rand = _last_id
        if ms > last_ms:
            rand = secrets.randbits(_RANDOM_BITS)
        else:
            ms, rand = last_ms, last_rand + 1
            if rand >> _RANDOM_BITS:  # 2**80 ids in one millisecond: borrow the next one
                ms, rand = ms + 1, secrets.randbits(_RANDOM_BITS - 1)
        _last_id = (ms, rand)
    return f"{(ms << _RANDOM_BITS) | rand:032x}"


# -- rules ------------------------------------------------------------------------------------


def check_webhook_url(url: str) -> None:
    """Raise ValueError unless `url` is an absolute http(s) URL with a host."""
    hint = "use an absolute http:// or https:// URL, e.g. https://example.com/hook"
    if len(url) > MAX_URL_CHARS:
        raise ValueError(f"URL is longer than {MAX_URL_CHARS} characters")
    if any(ch.isspace() for ch in url):
        raise ValueError(f"URL contains whitespace; {hint}")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise ValueError(f"malformed URL ({exc}); {hint}") from None
    if parts.scheme.lower() not in ("http", "https"):
        scheme = f"{parts.scheme}:" if parts.scheme else "no scheme"
        raise ValueError(f"{scheme} URLs are not allowed; {hint}")
    if not host:
        raise ValueError(f"URL has no host; {hint}")


def check_secrets(field: str, secrets: Sequence[str]) -> tuple[str, ...]:
    """The secrets, checked: at most two (current and next, during a rotation), each a valid
    `whsec_...` secret. The error never repeats a secret: it may be a real one mistyped."""
    if len(secrets) > MAX_SIGNING_SECRETS:
        raise InvalidInput(
            field,
            f"give at most {MAX_SIGNING_SECRETS} secrets (the current one and, during a"
            f" rotation, the next one); got {len(secrets)}",
        )
    for n, secret in enumerate(secrets, 1):
        try:
            parse_secret(secret)
        except ValueError as exc:
            problem = str(exc).removeprefix("secret: ")
            raise InvalidInput(field, f"secret {n} of {len(secrets)}: {problem}") from None
    return tuple(secret.strip() for secret in secrets)


def retry_policy(
    *, max_attempts: int, base_delay_ms: int, max_delay_ms: int, multiplier: float
) -> RetryPolicy:
    """A RetryPolicy, or InvalidInput naming the field as the API spells it (`retry.backoff`).

    RetryPolicy decides what is valid; this only says it in the API's words and units.
    """
    try:
        policy = RetryPolicy(
            max_attempts=max_attempts,
            base_delay_ms=base_delay_ms,
            max_delay_ms=max_delay_ms,
            multiplier=multiplier,
        )
    except ValueError as exc:
        name, _, detail = str(exc).partition(": ")
        hints = {
            "max_attempts": _ATTEMPTS_HINT,
            "base_delay_ms": "give a backoff of PT0S or more",
            "max_delay_ms": (
                f"max_backoff ({format_duration_ms(max(max_delay_ms, 0))}) must be at least "
                f"backoff ({format_duration_ms(max(base_delay_ms, 0))})"
            ),
            "multiplier": _MULTIPLIER_HINT,
        }
        field = f"retry.{RETRY_API_NAMES.get(name, name)}"
        raise InvalidInput(field, hints.get(name, detail)) from None
    _check_retry(policy)
    return policy


def _check_retry(policy: RetryPolicy) -> None:
    if policy.max_attempts > MAX_ATTEMPTS:
        raise InvalidInput("retry.max_attempts", _ATTEMPTS_HINT)
    if policy.multiplier > MAX_MULTIPLIER:
        raise InvalidInput("retry.multiplier", _MULTIPLIER_HINT)


def _check_fields(*, name: str, tenant: str, target: Target, retry: RetryPolicy) -> None:
    if not name.strip() or len(name) > MAX_NAME_CHARS:
        raise InvalidInput("name", f"give a name of 1 to {MAX_NAME_CHARS} characters")
    if not tenant or len(tenant) > MAX_TENANT_CHARS:
        raise InvalidInput("tenant", f"give a tenant of 1 to {MAX_TENANT_CHARS} characters")
    if isinstance(target, TaskTarget):
        _check_task(target)
    else:
        _check_webhook(target)
    _check_retry(retry)


def _check_task(target: TaskTarget) -> None:
    if not target.name.strip() or len(target.name) > MAX_NAME_CHARS:
        raise InvalidInput("target.name", f"give a task name of 1 to {MAX_NAME_CHARS} characters")
    if not 0 < target.timeout_s <= MAX_TASK_TIMEOUT_S:
        raise InvalidInput("target.timeout", "give a timeout above zero and at most PT1H")


def _check_webhook(target: WebhookTarget) -> None:
    try:
        check_webhook_url(target.url)
    except ValueError as exc:
        raise InvalidInput("target.url", str(exc)) from None
    if target.method not in WEBHOOK_METHODS:
        allowed = ", ".join(sorted(WEBHOOK_METHODS))
        raise InvalidInput("target.method", f"{target.method!r} is not one of {allowed}")
    if not 0 < target.timeout_s <= MAX_TIMEOUT_S:
        raise InvalidInput("target.timeout", "give a timeout above zero and at most PT5M")
    check_secrets("target.secrets", target.secrets)


def _check_alert(alert: AlertTarget | None) -> None:
    if alert is None:
        return
    try:
        check_webhook_url(alert.url)
    except ValueError as exc:
        raise InvalidInput("on_failure.url", str(exc)) from None


def _patched_target(job: Job, patch: JobPatch) -> Target:
    """The edited target, with the job's secrets kept unless the patch gives new ones."""
    target = job.target if patch.target is None else patch.target
    if patch.secrets is KEEP:
        kept = job.target.secrets if isinstance(job.target, WebhookTarget) else ()
        secrets = kept if isinstance(target, WebhookTarget) else ()
    else:
        secrets = patch.secrets
    if isinstance(target, WebhookTarget):
        return replace(target, secrets=secrets)
    if secrets:
        raise InvalidInput("target.secrets", 'only a "webhook" target takes secrets')
    return target


def _patched(job: Job, patch: JobPatch, now: datetime) -> Job:
    edited = replace(
        job,
        name=job.name if patch.name is None else patch.name,
        tenant=job.tenant if patch.tenant is None else patch.tenant,
        target=_patched_target(job, patch),
        retry=job.retry if patch.retry is None else patch.retry,
        on_failure=job.on_failure if patch.on_failure is KEEP else patch.on_failure,
        updated_at=now,
    )
    _check_fields(name=edited.name, tenant=edited.tenant, target=edited.target, retry=edited.retry)
    _check_alert(edited.on_failure)
    if patch.schedule is not None:
        schedule = _anchor(patch.schedule, now)
        if schedule != job.schedule:
            edited = _reschedule(edited, schedule, now)
    return edited


def _paused(job: Job, now: datetime) -> Job:
    if job.state is JobState.COMPLETED:
        raise Conflict(f"job {job.id!r} is completed and has nothing left to pause")
    if job.state is JobState.PAUSED:
        return job
    return replace(job, state=JobState.PAUSED, updated_at=now)


def _resumed(job: Job, now: datetime) -> Job:
    if job.state is JobState.COMPLETED:
        raise Conflict(f"job {job.id!r} is completed; give it a new schedule (PATCH) to re-arm it")
    if job.state is JobState.SCHEDULED:
        return job
    next_run_at = first_occurrence(job.schedule, now)
    state = JobState.SCHEDULED if next_run_at is not None else JobState.COMPLETED
    return replace(job, state=state, next_run_at=next_run_at, updated_at=now)


def _anchor(schedule: Schedule, now: datetime) -> Schedule:
    trigger = schedule.trigger
    if isinstance(trigger, EveryTrigger) and trigger.anchor == ANCHOR_AT_ACCEPT:
        return replace(schedule, trigger=replace(trigger, anchor=now))
    return schedule


def _reschedule(job: Job, schedule: Schedule, now: datetime) -> Job:
    next_run_at = _first_fire(schedule, now)
    state = JobState.SCHEDULED if job.state is JobState.COMPLETED else job.state
    return replace(job, schedule=schedule, next_run_at=next_run_at, state=state)


def _first_fire(schedule: Schedule, now: datetime) -> datetime:
    """Validate the schedule and return its first occurrence; reject one that never fires."""
    validate_schedule(schedule)
    first = first_occurrence(schedule, now)
    if first is not None:
        return first
    if schedule.end_at is not None and first_occurrence(replace(schedule, end_at=None), now):
        raise InvalidInput(
            "schedule.end_at",
            "the schedule never fires after now before end_at; move end_at later or drop it",
            code="never_fires",
        )
    raise InvalidInput(
        "schedule",
        "the schedule never fires after now; check the cron expression, start_at and end_at",
        code="never_fires",
    )
