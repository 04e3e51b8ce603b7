"""Runs: one record per occurrence handed to an executor, the fire that carries it, and the
envelope that names it when it is handed off to workers elsewhere."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from tickwork.clock import from_us, to_us
from tickwork.domain.jobs import AlertTarget, Target
from tickwork.domain.retry import RetryPolicy


class RunStatus(StrEnum):
    """What tw_runs.status stores. A leased run stays PENDING (the lease index and every lease
    statement select on it); what a reader is shown is `RunState`, derived by `run_state`."""

    PENDING = "pending"  # claimed, waiting for (or in) execution, or for its next retry
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # terminal: a non-retryable failure or the last attempt; dead-lettered
    # terminal: stopped by the store, not by its executor (overlap cancel_previous: a newer
    # occurrence of its job was due while it was still going)
    CANCELLED = "cancelled"


class RunOrigin(StrEnum):
    SCHEDULE = "schedule"
    MANUAL = "manual"  # POST /v1/jobs/{id}/trigger
    BACKFILL = "backfill"  # POST /v1/jobs/{id}/backfill: a past occurrence replayed
    CATCHUP = "catchup"  # misfire policy `all`: a missed occurrence fired late


TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})


class RunState(StrEnum):
    """A run's state as the API, the CLI and the docs show it: derived on read from the stored
    status, the lease and the clock (`run_state`), never stored."""

    PENDING = "pending"  # claimed, not leased yet: waiting for its instant or its first attempt
    RUNNING = "running"  # leased by a live lease: a worker holds it
    RETRYING = "retrying"  # an attempt ended without success; waiting for the next one
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # failed for good and no longer in the dead-letter queue (purged)
    DEAD_LETTERED = "dead_lettered"  # failed for good, in the dead-letter queue
    CANCELLED = "cancelled"


class AttemptStatus(StrEnum):
    """How one attempt ended, as tw_attempts.status stores it."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the last attempt of a dead-lettered run
    RETRIED = "pending"  # failed, and the run was released for another attempt
    LOST = "lost"  # its worker stopped heartbeating: the lease expired without an outcome
    CANCELLED = "cancelled"  # overlap cancel_previous stopped its run


# The error a lost attempt is recorded with (the lease statements write the same words).
LOST_ERROR = "lease expired: worker stopped heartbeating"
# The error of one whose lease a survivor released because its worker was judged gone (ADR
# 0035): release_leases writes it on the run, and the next lease records it instead.
RELEASED_ERROR = "lease released: its worker is gone (no database session left)"


def occurrence_key(
    job_id: str, scheduled_for: datetime, origin: RunOrigin = RunOrigin.SCHEDULE
) -> str:
    """The idempotency key of one occurrence: the same for every attempt of it.

    Built from the nominal instant (never a jittered or actual one), in epoch milliseconds so
    it does not depend on how the instant is formatted.
    """
    ms = to_us(scheduled_for) // 1000
    suffix = "" if origin is RunOrigin.SCHEDULE else f":{origin.value}"
    return f"{job_id}:{ms}{suffix}"


def manual_key(job_id: str, at: datetime) -> str:
    """A manual trigger's key: its instant and a random tag, so two triggers in the same
    millisecond are two runs (a trigger is a request to run once more, not an occurrence)."""
    return f"{occurrence_key(job_id, at, RunOrigin.MANUAL)}:{secrets.token_hex(4)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Fire:
    """One occurrence leased to an executor, with everything needed to run it."""

    run_id: int
    job_id: str
    key: str
    scheduled_for: datetime
    fence_token: int
    attempt: int
    target: Target
    lease_until: datetime
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Read with the lease (a join), so a worker needs no store read per fire to sign it.
    tenant_secrets: tuple[str, ...] = field(default=(), repr=False)
    on_failure: AlertTarget | None = None
    # The job's tenant, read with the lease (the same join): the executor's per-tenant cap
    # keys on it (ADR 0023) without a store read per fire.
    tenant: str = "default"
    # The instant a jittered or windowed occurrence was planned at (ADR 0022), after
    # `scheduled_for`, its nominal instant; None: it starts at `scheduled_for`.
    planned_for: datetime | None = None
    # Set when this process could not decrypt the job's target, secrets or alert (a key it
    # lacks): the attempt fails with this message instead of running (`target` is then a
    # placeholder that is never run).
    unreadable: str | None = None

    @property
    def starts_at(self) -> datetime:
        """The instant the executor starts the fire at: its planned instant, if shifted."""
        return self.scheduled_for if self.planned_for is None else self.planned_for


@dataclass(frozen=True, kw_only=True, slots=True)
class Envelope:
    """One attempt of one occurrence, named but not carried: what a hand-off claim returns and
    what travels through a queue. A worker leases the run by (run_id, fence_token) and reads
    the rest (target, retry policy, secrets) with the lease, so the scheduler never builds it.

    It lives here, not in the queue package, because the stores return it too."""

    run_id: int
    job_id: str
    key: str  # the occurrence's idempotency key (same for every attempt)
    scheduled_for: datetime
    fence_token: int
    attempt: int

    @property
    def msg_id(self) -> str:
        """Deduplication id: one per attempt, so a retry is not dropped as a duplicate."""
        return f"{self.key}#{self.attempt}"

    def encode(self) -> bytes:
        """The message body: `E1`, then run id, fence, attempt, instant (epoch µs) and the
        job id's length in characters, separated by spaces, then the job id and the key with
        nothing between them (neither is split, so either may hold any character).

        A fixed layout rather than JSON: at 10,000 fires/s a `json.dumps` and a `json.loads`
        per message were about 5 % of the scheduler's and of the worker's CPU on NATS
        (docs/benchmarks.md, "where the NATS path's time goes")."""
        return (
            f"{WIRE_TAG} {self.run_id} {self.fence_token} {self.attempt} "
            f"{to_us(self.scheduled_for)} {len(self.job_id)} {self.job_id}{self.key}"
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Envelope:
        """An envelope from `encode`'s bytes, or from the JSON object an earlier tickwork
        published (messages still in a queue across an upgrade). Anything else raises
        ValueError (a queue drops such a message as poison)."""
        if data[:1] == b"{":
            return cls._decode_json(data)
        tag, run_id, fence, attempt, at_us, job_chars, rest = data.decode().split(" ", 6)
        n = int(job_chars)
        if tag != WIRE_TAG or not 0 < n < len(rest):
            raise ValueError(f"not a tickwork envelope: {data[:60]!r}")
        return cls(
            run_id=int(run_id),
            job_id=rest[:n],
            key=rest[n:],
            scheduled_for=from_us(int(at_us)),
            fence_token=int(fence),
            attempt=int(attempt),
        )

    @classmethod
    def _decode_json(cls, data: bytes) -> Envelope:
        raw: dict[str, Any] = json.loads(data)
        return cls(
            run_id=raw["r"],
            job_id=raw["j"],
            key=raw["k"],
            scheduled_for=from_us(raw["s"]),
            fence_token=raw["f"],
            attempt=raw["a"],
        )


# The first word of an encoded envelope: names the layout, so that a later one can be told
# apart (and an old worker drops a message it cannot read rather than misreading it).
WIRE_TAG = "E1"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunOutcome:
    """What an executor reports for one attempt; applied only if `fence_token` is current.

    `status` SUCCEEDED and FAILED finish the occurrence (FAILED also dead-letters it);
    PENDING with `retry_at` releases it for another attempt no earlier than `retry_at`.
    Every applied outcome is also appended to the attempt history.
    """

    run_id: int
    job_id: str
    attempt: int
    fence_token: int
    status: RunStatus
    started_at: datetime
    finished_at: datetime
    http_status: int | None = None
    error: str | None = None
    retry_at: datetime | None = None
    worker: str | None = None

    def __post_init__(self) -> None:
        if (self.status is RunStatus.PENDING) != (self.retry_at is not None):
            raise ValueError("retry_at goes with status PENDING, and only with it")


@dataclass(frozen=True, kw_only=True, slots=True)
class AttemptRecord:
    """One attempt of one occurrence, as kept in the history."""

    id: int
    run_id: int
    job_id: str
    attempt: int
    fence_token: int
    worker: str | None
    started_at: datetime
    finished_at: datetime
    status: AttemptStatus
    http_status: int | None
    error: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class Run:
    id: int
    job_id: str
    key: str
    origin: RunOrigin
    scheduled_for: datetime
    status: RunStatus
    attempt: int
    fence_token: int
    coalesced: int  # occurrences skipped by the misfire policy in favour of this one
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    http_status: int | None
    error: str | None
    dead_lettered_at: datetime | None = None  # set while the occurrence is in the DLQ
    last_error: str | None = None  # the latest attempt's error
    # The epoch of the job's partition lease when the run was claimed (ADR 0015); None for a
    # manual run, and for runs claimed before partitions existed.
    claim_epoch: int | None = None
    # Who holds the run's lease and until when. An owner is set from a lease until an outcome
    # clears it, so an owner whose lease has ended means its attempt was lost. While the run
    # is pending and unowned, `lease_until` is the instant from which a worker may lease it;
    # None once it finished.
    lease_owner: str | None = None
    lease_until: datetime | None = None
    # When a jittered or windowed occurrence was planned to fire (ADR 0022); None: at
    # `scheduled_for`, its nominal instant.
    planned_for: datetime | None = None
    # How much later than its instant the occurrence was claimed because the global fire
    # ceiling held it back (ms, ADR 0025); None: it was not throttled.
    throttled_ms: int | None = None


def run_state(run: Run, now: datetime) -> RunState:
    """The state a reader is shown for `run` at `now` (pure: the stored status, the lease and
    the attempt number decide).

    A pending run is RUNNING while a live lease holds it; unleased, it is RETRYING once an
    attempt has been made (a retry waiting out its backoff, a lost attempt, a redriven dead
    letter) and PENDING before its first one. A FAILED run is DEAD_LETTERED while it is in
    the dead-letter queue.
    """
    match run.status:
        case RunStatus.SUCCEEDED:
            return RunState.SUCCEEDED
        case RunStatus.CANCELLED:
            return RunState.CANCELLED
        case RunStatus.FAILED:
            return RunState.FAILED if run.dead_lettered_at is None else RunState.DEAD_LETTERED
    if leased_at(run, now):
        return RunState.RUNNING
    return RunState.RETRYING if run.attempt >= 1 else RunState.PENDING


def leased_at(run: Run, now: datetime) -> bool:
    """Whether a live lease holds the pending `run` at `now`."""
    return (
        run.status is RunStatus.PENDING
        and run.lease_owner is not None
        and run.lease_until is not None
        and run.lease_until > now
    )


def lost_attempt(run: Run) -> AttemptRecord | None:
    """The attempt of the lease that holds `run`, as the history records it once that lease
    has ended without an outcome (the stores do when they lease the run again): status LOST,
    from the lease's start to its end, by its owner. None when no lease holds the run (not
    pending, or released). Its id is 0: it is not a stored row."""
    if run.status is not RunStatus.PENDING or run.lease_owner is None or run.lease_until is None:
        return None
    return ended_attempt(
        run,
        worker=run.lease_owner,
        started_at=run.created_at if run.started_at is None else run.started_at,
        finished_at=run.lease_until,
        status=AttemptStatus.LOST,
        error=RELEASED_ERROR if run.error == RELEASED_ERROR else LOST_ERROR,
    )


def ended_attempt(
    run: Run,
    *,
    worker: str | None,
    started_at: datetime,
    finished_at: datetime,
    status: AttemptStatus,
    error: str,
) -> AttemptRecord:
    """The attempt of `run`'s current lease (its attempt number and fence), ended by the store
    rather than by an outcome (lost, cancelled): no HTTP status, and an id of 0 until stored."""
    return AttemptRecord(
        id=0,
        run_id=run.id,
        job_id=run.job_id,
        attempt=run.attempt,
        fence_token=run.fence_token,
        worker=worker,
        started_at=started_at,
        finished_at=finished_at,
        status=status,
        http_status=None,
        error=error,
    )


def success_attempt(run: Run, worker: str | None) -> AttemptRecord | None:
    """The last attempt of a succeeded `run`, from the run itself, which holds everything an
    attempt record does but the worker (ADR 0033: the stores keep a success on its run, not
    as an attempt of its own); an id of 0, as it is not a stored row. None unless `run`
    succeeded."""
    if run.status is not RunStatus.SUCCEEDED or run.finished_at is None:
        return None
    return AttemptRecord(
        id=0,
        run_id=run.id,
        job_id=run.job_id,
        attempt=run.attempt,
        fence_token=run.fence_token,
        worker=worker,
        started_at=run.finished_at if run.started_at is None else run.started_at,
        finished_at=run.finished_at,
        status=AttemptStatus.SUCCEEDED,
        http_status=run.http_status,
        error=run.error,
    )


def unrecorded_lost_attempt(run: Run, now: datetime) -> AttemptRecord | None:
    """The lost attempt of a run whose lease has expired by `now` without an outcome, before
    any worker leased it again (which records it): shown with the history, not stored. None
    while the lease is live, or when there is none."""
    return None if leased_at(run, now) else lost_attempt(run)
