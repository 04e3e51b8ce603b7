"""Jobs and their schedules, as plain frozen records (no I/O, no clock)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from tickwork.domain.masking import mask_headers, mask_url
from tickwork.domain.retry import RetryPolicy

DEFAULT_MISFIRE_GRACE_MS: Final = 1_000
# How far back misfire fire_all catches up (P1D); older missed occurrences are skipped.
DEFAULT_CATCHUP_WINDOW_MS: Final = 86_400_000
MIN_CATCHUP_WINDOW_MS: Final = 1_000  # PT1S
MAX_CATCHUP_WINDOW_MS: Final = 366 * 86_400_000  # P366D
# A job's priority: higher is claimed first when more is due than can be claimed at once.
MIN_PRIORITY: Final = 1
MAX_PRIORITY: Final = 9
DEFAULT_PRIORITY: Final = 5
# schedule.jitter and schedule.window: at most a day (ADR 0022).
MAX_SHIFT_MS: Final = 86_400_000


class JobState(StrEnum):
    SCHEDULED = "scheduled"  # armed: fires at next_run_at
    PAUSED = "paused"  # keeps its schedule, does not fire
    COMPLETED = "completed"  # a one-shot that fired, or a schedule past its end_at


class MisfirePolicy(StrEnum):
    """What to do when the scheduler finds several occurrences already past (after downtime)."""

    COALESCE = "coalesce"  # fire once, for the latest missed occurrence; count the others
    # fire the latest on time; replay the missed ones within catchup_window through the paced
    # lane (a catch-up backfill), oldest first, and skip the older ones
    FIRE_ALL = "fire_all"
    SKIP = "skip"  # fire none of the missed ones; wait for the next future occurrence


class OverlapPolicy(StrEnum):
    """What happens when an occurrence comes due while the job's previous run is still going
    (docs/policies.md)."""

    ALLOW = "allow"  # run them side by side (the default: no occurrence is ever dropped)
    SKIP = "skip"  # record the new occurrence as skipped_overlap and do not run it
    BUFFER_ONE = "buffer_one"  # keep at most one waiting; it starts when the running one ends
    CANCEL_PREVIOUS = "cancel_previous"  # cancel the running one, then run the new one


class DstGap(StrEnum):
    """A cron wall time that does not exist on a spring-forward day (02:30 when clocks jump
    02:00->03:00)."""

    CRON = "cron"  # Debian cron's rule: a fixed time shifts, a repeating field skips
    SHIFT = "shift"  # fire at the first valid instant after the jump
    SKIP = "skip"  # do not fire for it


class DstRepeat(StrEnum):
    """A cron wall time that happens twice on a fall-back day (01:30 when clocks go back
    02:00->01:00)."""

    CRON = "cron"  # Debian cron's rule: a fixed time fires at the first, a repeating field at both
    FIRST = "first"  # once, at the first
    SECOND = "second"  # once, at the second
    BOTH = "both"  # twice


@dataclass(frozen=True, kw_only=True, slots=True)
class CronTrigger:
    expr: str
    timezone: str = "UTC"


@dataclass(frozen=True, kw_only=True, slots=True)
class EveryTrigger:
    interval_ms: int
    anchor: datetime  # occurrences are anchor + k * interval


@dataclass(frozen=True, kw_only=True, slots=True)
class AtTrigger:
    at: datetime


Trigger = CronTrigger | EveryTrigger | AtTrigger


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    trigger: Trigger
    start_at: datetime | None = None  # no occurrence before this instant
    end_at: datetime | None = None  # no occurrence after this instant
    misfire: MisfirePolicy = MisfirePolicy.COALESCE
    misfire_grace_ms: int = (
        DEFAULT_MISFIRE_GRACE_MS  # lateness up to this is "on time", not a misfire
    )
    # The job completes after this many scheduled fires (manual and backfill runs do not
    # count); None: no limit. Counted by the claims (`DueJob.fired_count`).
    max_runs: int | None = None
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    # DST choices for cron in a zone (docs/cron-and-dst.md); CRON keeps Debian cron's rule.
    dst_gap: DstGap = DstGap.CRON
    dst_repeat: DstRepeat = DstRepeat.CRON
    # misfire fire_all only: missed occurrences at most this old are caught up (paced), older
    # ones are skipped (unused by the other policies).
    catchup_window_ms: int = DEFAULT_CATCHUP_WINDOW_MS
    # Herd shaping (ADR 0022), at most one of the two; 0: none. Each occurrence fires at a
    # delay drawn from the occurrence in [0, jitter_ms], or at the least loaded second of
    # [nominal, nominal + window_ms]; the nominal instant stays the occurrence's identity.
    jitter_ms: int = 0
    window_ms: int = 0


@dataclass(frozen=True, kw_only=True, slots=True, repr=False)
class WebhookTarget:
    url: str
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Any = None  # JSON value sent as the request body; None sends no body
    timeout_s: float = 10.0
    # The job's own signing secrets (0-2 `whsec_...`); empty: the tenant's or the process's
    # sign. Left out of repr so that logging a target or a fire never prints them.
    secrets: tuple[str, ...] = field(default=(), repr=False)
    # False: never signed, even when the tenant or the process has secrets (an opt-out).
    signed: bool = True

    def __repr__(self) -> str:
        # Secret header values and a URL password never reach a log line or a traceback.
        return (
            f"WebhookTarget(url={mask_url(self.url)!r}, method={self.method!r},"
            f" headers={mask_headers(self.headers)!r}, timeout_s={self.timeout_s!r},"
            f" signed={self.signed!r})"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskTarget:
    """A Python function registered with `@tickwork.task(name)` in the worker processes."""

    name: str
    args: Any = None  # JSON value handed to the task as `ctx.args`
    timeout_s: float = 60.0


Target = WebhookTarget | TaskTarget


@dataclass(frozen=True, kw_only=True, slots=True, repr=False)
class AlertTarget:
    """Where a job's dead-letter alert goes (`on_failure`): always a JSON POST."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return (
            f"AlertTarget(url={mask_url(self.url)!r},"
            f" headers={mask_headers(self.headers, all_secret=True)!r})"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Job:
    id: str
    name: str
    schedule: Schedule
    target: Target
    state: JobState
    next_run_at: datetime | None
    created_at: datetime
    updated_at: datetime
    fence_token: int = 0
    tenant: str = "default"
    last_fired_at: datetime | None = None  # scheduled_for of the latest claimed occurrence
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_failure: AlertTarget | None = None  # POSTed once when an occurrence is dead-lettered
    fired_count: int = 0  # scheduled occurrences fired so far (what `max_runs` counts)
    pause_note: str | None = None  # why it was paused; kept while paused, cleared on resume
    paused_at: datetime | None = None  # when it was paused; None unless paused
    # Under overload, within its tenant's share, higher priority is claimed first (1..9).
    priority: int = DEFAULT_PRIORITY
