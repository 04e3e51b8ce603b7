"""The rules a job must follow, and how its state changes: pure functions of their arguments.

No store, no clock, no I/O: the services read the clock once and pass `now` in, so the same
instant decides a whole request, and the rules can be tested without either. The API's schemas
reuse the bounds (`MAX_*`) so that a request is refused with the same limits before it gets here.

Rules worth knowing (the API reference repeats them for users):

* A new job's id is time-sortable (`new_job_id`), so keyset pagination by id lists jobs in
  creation order.
* `next_run_at` is the schedule's first occurrence at or after the moment the job is accepted
  (`first_fire`). A schedule with no occurrence left (an `end_at` in the past, a cron that can
  never match before its end) is rejected. A one-shot `at` in the past is accepted and fires
  at once. An `EveryTrigger` given without an anchor is anchored at that same moment.
* Pausing keeps `next_run_at` for display, and the note saying why. Resuming recomputes it
  from now: occurrences that fell while the job was paused are skipped, not replayed (a
  one-shot that has not fired yet still fires once); or, asked to catch up, from where it was
  paused, for the misfire policy to handle what was missed.
* An `every` schedule given without an anchor is anchored at its `start_at`, if it has one.
* A job with `max_runs` completes with its max_runs-th scheduled fire; a new schedule does not
  re-arm a job that has fired that many.
* A new schedule recomputes `next_run_at` from now and re-arms a completed job
  (`rescheduled`).
* A retry policy's bounds (`MAX_ATTEMPTS`, `MAX_MULTIPLIER`) are checked here, its internal
  consistency (max delay >= base delay) by `RetryPolicy` itself.
* A webhook target may carry 1-2 `whsec_...` signing secrets (`check_secrets`): the current
  one and, during a rotation, the next one. No error message ever repeats a secret.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Final
from urllib.parse import urlsplit

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
from tickwork.domain.masking import MASK, unrestored_masks
from tickwork.domain.retry import RetryPolicy
from tickwork.errors import Conflict, InvalidInput
from tickwork.timing.durations import format_duration_ms
from tickwork.timing.shift import nominal_of
from tickwork.timing.triggers import first_occurrence, next_occurrence, validate_schedule
from tickwork.webhooks import MAX_SIGNING_SECRETS, parse_secret

__all__ = [
    "ANCHOR_AT_ACCEPT",
    "MAX_ATTEMPTS",
    "MAX_HEADERS",
    "MAX_HEADER_NAME_CHARS",
    "MAX_HEADER_VALUE_CHARS",
    "MAX_MULTIPLIER",
    "MAX_NAME_CHARS",
    "MAX_NOTE_CHARS",
    "MAX_RUNS",
    "MAX_TASK_TIMEOUT_S",
    "MAX_TENANT_CHARS",
    "MAX_TIMEOUT_S",
    "MAX_URL_CHARS",
    "RETRY_API_NAMES",
    "WEBHOOK_METHODS",
    "anchored",
    "check_alert",
    "check_fields",
    "check_secrets",
    "check_tenant",
    "check_webhook_url",
    "first_fire",
    "new_job_id",
    "paused",
    "rescheduled",
    "resumed",
    "retry_policy",
]

# An `EveryTrigger` anchored here is anchored at the instant the service accepts the job, read
# from the same clock reading as next_run_at (two reads could disagree about the first fire).
ANCHOR_AT_ACCEPT: Final = datetime(1, 1, 1, tzinfo=UTC)

MAX_NAME_CHARS: Final = 200
MAX_NOTE_CHARS: Final = 1000  # a pause note
MAX_RUNS: Final = 1_000_000_000
MAX_TENANT_CHARS: Final = 100
MAX_TIMEOUT_S: Final = 300.0
MAX_URL_CHARS: Final = 2048
MAX_HEADERS: Final = 100  # on a webhook target or an alert
MAX_HEADER_NAME_CHARS: Final = 256
MAX_HEADER_VALUE_CHARS: Final = 8192
MAX_TASK_TIMEOUT_S: Final = 3600.0
WEBHOOK_METHODS: Final = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
MAX_ATTEMPTS: Final = 100
MAX_MULTIPLIER: Final = 10.0
# RetryPolicy's field names as the API (and its error messages' `field`) spells them.
RETRY_API_NAMES: Final = {
    "max_attempts": "max_attempts",
    "base_delay_ms": "backoff",
    "max_delay_ms": "max_backoff",
    "multiplier": "multiplier",
}
_ATTEMPTS_HINT: Final = f"give 1 to {MAX_ATTEMPTS} attempts (the first one included)"
_MULTIPLIER_HINT: Final = f"give a multiplier from 1 to {MAX_MULTIPLIER:g}"


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


# -- checks -----------------------------------------------------------------------------------


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


def check_tenant(tenant: str) -> None:
    if not tenant or len(tenant) > MAX_TENANT_CHARS:
        raise InvalidInput("tenant", f"give a tenant of 1 to {MAX_TENANT_CHARS} characters")


def check_fields(*, name: str, tenant: str, target: Target, retry: RetryPolicy) -> None:
    """A job's own fields (its schedule is checked by `first_fire`, its alert by `check_alert`)."""
    if not name.strip() or len(name) > MAX_NAME_CHARS:
        raise InvalidInput("name", f"give a name of 1 to {MAX_NAME_CHARS} characters")
    check_tenant(tenant)
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
    _check_no_masks("target", target.headers, target.url)
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


def check_alert(alert: AlertTarget | None) -> None:
    if alert is None:
        return
    try:
        check_webhook_url(alert.url)
    except ValueError as exc:
        raise InvalidInput("on_failure.url", str(exc)) from None
    _check_no_masks("on_failure", alert.headers, alert.url)


def _check_no_masks(where: str, headers: Mapping[str, str], url: str) -> None:
    """A MASK left after restoring stored values (services/jobs.py) would store asterisks in
    place of a credential: refuse it, naming where it is."""
    found = unrestored_masks(headers, url)
    if not found:
        return
    part = "url" if found[0] == "url" else f"headers.{found[0]}"
    raise InvalidInput(
        f"{where}.{part}",
        f"{MASK} is how tickwork shows a stored secret, and nothing is stored there to keep;"
        " send the real value",
        code="masked_value",
    )


# -- schedules and states ---------------------------------------------------------------------


def anchored(schedule: Schedule, now: datetime) -> Schedule:
    """The schedule, its `EveryTrigger` anchored if it came with ANCHOR_AT_ACCEPT: at its
    `start_at` when it has one (every PT1H from start_at 09:00 fires 09:00, 10:00, ...), else at
    `now`."""
    trigger = schedule.trigger
    if isinstance(trigger, EveryTrigger) and trigger.anchor == ANCHOR_AT_ACCEPT:
        anchor = now if schedule.start_at is None else schedule.start_at
        return replace(schedule, trigger=replace(trigger, anchor=anchor))
    return schedule


def first_fire(schedule: Schedule, now: datetime) -> datetime:
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


def rescheduled(job: Job, schedule: Schedule, now: datetime) -> Job:
    """The job on a new schedule, from now; a completed job is re-armed, unless it has
    already fired the schedule's max_runs (then it is, or stays, completed)."""
    next_run_at = first_fire(schedule, now)
    if schedule.max_runs is not None and job.fired_count >= schedule.max_runs:
        return replace(job, schedule=schedule, next_run_at=None, state=JobState.COMPLETED)
    state = JobState.SCHEDULED if job.state is JobState.COMPLETED else job.state
    return replace(job, schedule=schedule, next_run_at=next_run_at, state=state)


def paused(job: Job, now: datetime, note: str | None = None) -> Job:
    """The job paused, with the note saying why (kept until it is resumed); the same object if
    it already is paused with that note (nothing to write). Pausing a paused job again only
    replaces its note."""
    if job.state is JobState.COMPLETED:
        raise Conflict(f"job {job.id!r} is completed and has nothing left to pause")
    if note is not None and len(note) > MAX_NOTE_CHARS:
        raise InvalidInput("note", f"give a note of at most {MAX_NOTE_CHARS} characters")
    if job.state is JobState.PAUSED:
        if note is None or note == job.pause_note:
            return job
        return replace(job, pause_note=note, updated_at=now)
    return replace(job, state=JobState.PAUSED, pause_note=note, paused_at=now, updated_at=now)


def resumed(job: Job, now: datetime, *, catch_up: bool = False) -> Job:
    """The job scheduled again, its pause note cleared; the same object if it already is
    scheduled (nothing to write).

    From now by default: occurrences that fell while it was paused are skipped (the job
    service records them in the ledger as `paused`). With `catch_up`, its next_run_at is its
    first occurrence not claimed when it was paused, so the scheduler finds those occurrences
    missed and applies the job's misfire policy to them (coalesce: one run for the latest;
    fire_all: each of them; skip: none)."""
    if job.state is JobState.COMPLETED:
        raise Conflict(f"job {job.id!r} is completed; give it a new schedule (PATCH) to re-arm it")
    if job.state is JobState.SCHEDULED:
        return job
    # A paused job keeps next_run_at: its first occurrence not claimed yet. Not the first one
    # after paused_at: the scheduler claims up to its look-ahead early, so that one may have
    # fired already (replanning it recorded it twice in the ledger; a property test found it).
    # Its nominal instant: the service plans the one resumed at anew (jitter, window).
    kept = None if job.next_run_at is None else nominal_of(job.schedule, job.next_run_at)
    if catch_up and job.paused_at is not None:
        next_run_at = kept if kept is not None else next_occurrence(job.schedule, job.paused_at)
    else:
        next_run_at = first_occurrence(job.schedule, now)
        if next_run_at is not None and kept is not None and next_run_at < kept:
            next_run_at = kept  # claimed ahead just before the pause: fired already
    state = JobState.SCHEDULED if next_run_at is not None else JobState.COMPLETED
    return replace(
        job, state=state, next_run_at=next_run_at, pause_note=None, paused_at=None, updated_at=now
    )
