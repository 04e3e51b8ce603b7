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
    # Set when this process could not decrypt the job's target, secrets or alert (a key it
    # lacks): the attempt fails with this message instead of running (`target` is then a
    # placeholder that is never run).
    unreadable: str | None = None


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
        return json.dumps(
            {
                "r": self.run_id,
                "j": self.job_id,
                "k": self.key,
                "s": to_us(self.scheduled_for),
                "f": self.fence_token,
                "a": self.attempt,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Envelope:
        raw: dict[str, Any] = json.loads(data)
        return cls(
            run_id=raw["r"],
            job_id=raw["j"],
            key=raw["k"],
            scheduled_for=from_us(raw["s"]),
            fence_token=raw["f"],
            attempt=raw["a"],
        )


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
    status: RunStatus  # PENDING here means "failed, retried later"
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
