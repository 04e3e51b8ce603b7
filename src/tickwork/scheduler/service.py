"""The scheduler service: find due jobs, claim them, hand their fires to an executor or off to
workers elsewhere.

`run_once(now)` is one tick and returns what it did; `run()` loops, sleeping until the earliest
due job (minus a small claim-ahead) or until the store reports a change, never polling blindly.

With an external queue, `run()` publishes a tick's envelopes while it claims the next batch
(one publish in flight at most): in a burst the claim and the publish then overlap instead of
adding up. That is safe because a publish is only the fast path: the runs are already in the
store, and a publish that fails or never happens is repaired by the workers' backstop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tickwork import metrics
from tickwork.clock import Clock
from tickwork.domain.runs import Envelope, Fire
from tickwork.scheduler.planning import plan_claim, settled_bound, sleep_seconds
from tickwork.store.base import ClaimPlan, DueJob, ScheduleStore
from tickwork.waiting import first_of

log = logging.getLogger("tickwork.scheduler")

Dispatch = Callable[[Sequence[Fire]], object]  # hands fires to an executor; its answer is unused
Publish = Callable[[Sequence[Envelope]], Awaitable[None]]


@dataclass(frozen=True, kw_only=True, slots=True)
class SchedulerConfig:
    node_id: str
    batch_size: int = 1000
    lookahead_ms: int = 200  # claim this early; the executor still starts on the instant (ADR 0009)
    max_idle_ms: int = 1000  # longest sleep when nothing wakes us (other processes' writes)
    lease_ttl_ms: int = 60_000  # how long a fire stays ours without a heartbeat

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if not 0 <= self.lookahead_ms <= self.max_idle_ms:
            raise ValueError("lookahead_ms must be between 0 and max_idle_ms")


@dataclass(frozen=True, kw_only=True, slots=True)
class TickResult:
    due: int  # jobs the due-scan returned
    fires: list[Fire] = field(default_factory=list)  # claimed and dispatched in this process
    handed_off: list[Envelope] = field(default_factory=list)  # claimed for workers elsewhere
    conflicts: int = 0  # planned fires dropped because another claimer or an edit won
    full_batch: bool = False  # the scan hit the batch limit: more may be due already
    scanned_to: datetime | None = None  # how far the due scan reached (now + look-ahead)
    # Every scheduled job before this instant was settled by this tick (see `settled_bound`);
    # None when the tick cannot vouch for any instant (a conflict, a skipped occurrence).
    settled_below: datetime | None = None

    @property
    def claimed(self) -> int:
        """Occurrences this tick fired, either way (one of the two lists is always empty)."""
        return len(self.fires) + len(self.handed_off)


class SchedulerService:
    def __init__(
        self,
        store: ScheduleStore,
        clock: Clock,
        config: SchedulerConfig,
        dispatch: Dispatch | None,
        publish: Publish | None = None,
    ) -> None:
        """`dispatch` hands fires to an executor in this process; None hands them off through
        the store instead (the table queue, `claim_hand_off`), to workers in any process, and
        `publish` then also sends their envelopes to an external queue (a failed publish is
        logged: the store still has them)."""
        self._publish = publish
        self._store = store
        self._clock = clock
        self._config = config
        self._dispatch = dispatch

    async def run_once(
        self, now: datetime | None = None, *, not_before: datetime | None = None
    ) -> TickResult:
        """Claim every job due by `now` (+ lookahead), up to one batch, and dispatch its fires
        (or hand them off, publishing their envelopes before it returns). `not_before` skips
        jobs due earlier: pass only what an earlier tick's `settled_below` vouched for."""
        result = await self._tick(now, not_before=not_before)
        if result.handed_off and self._publish is not None:
            await self._publish_safely(result.handed_off)
        return result

    async def _tick(self, now: datetime | None, *, not_before: datetime | None) -> TickResult:
        """One tick without the publish: the caller sends `handed_off` to the queue."""
        now = self._clock.now() if now is None else now
        cfg = self._config
        started = time.perf_counter()
        horizon = now + timedelta(milliseconds=cfg.lookahead_ms)
        due = await self._store.due_jobs(horizon, cfg.batch_size, not_before=not_before)
        metrics.DUE_SCAN_SECONDS.observe(time.perf_counter() - started)
        if not due:
            return TickResult(due=0, scanned_to=horizon, settled_below=horizon)
        plans = [plan_claim(job, now) for job in due]
        fires: list[Fire] = []
        handed_off: list[Envelope] = []
        started = time.perf_counter()
        if self._dispatch is not None:
            lease_until = now + timedelta(milliseconds=cfg.lookahead_ms + cfg.lease_ttl_ms)
            fires = await self._store.claim(
                plans, owner=cfg.node_id, lease_until=lease_until, now=now
            )
            metrics.CLAIM_SECONDS.observe(time.perf_counter() - started)
            if fires:
                self._dispatch(fires)
        else:
            # No executor here: the runs are left in the store for any worker, and only their
            # envelopes come back (what a queue carries; the table queue needs not even that).
            handed_off = await self._store.claim_hand_off(plans, owner=cfg.node_id, now=now)
            metrics.CLAIM_SECONDS.observe(time.perf_counter() - started)
        planned = sum(p.scheduled_for is not None for p in plans)
        conflicts = planned - len(fires) - len(handed_off)
        full = len(due) == cfg.batch_size
        # A full scan reached only as far as its last job; more may be due at that instant.
        reach = due[-1].next_run_at if full else horizon
        result = TickResult(
            due=len(due),
            fires=fires,
            handed_off=handed_off,
            conflicts=conflicts,
            full_batch=full,
            scanned_to=horizon,
            settled_below=settled_bound(plans, reach, conflicts=conflicts),
        )
        _record(due, plans, result)
        return result

    async def _publish_safely(self, envelopes: Sequence[Envelope]) -> None:
        assert self._publish is not None
        try:
            await self._publish(envelopes)
        except Exception:
            log.exception(
                "publish failed; workers will take these fires from the store",
                extra={"action": "publish_failed"},
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set. Store errors are logged and retried after a pause.

        Each tick's scan starts where the ticks before it left nothing unclaimed (`floor`),
        so it does not walk the claimed jobs' dead versions (ADR 0008). Below the floor a
        job can only appear by a write, and writes wake this loop: a wake-up by a change, a
        conflict or an error drops the floor, and so does the clock every `max_idle_ms` in
        case a change went unnoticed (a write made by hand, a notice lost with its
        connection)."""
        changed = self._store.watch("jobs")
        floor: datetime | None = None
        unbounded_by = 0.0  # when (clock.monotonic_s) the next scan must start at the bottom
        publishing = _PublishPipeline(self._publish_safely)
        try:
            while not stop.is_set():
                if changed.is_set() or self._clock.monotonic_s() >= unbounded_by:
                    floor = None
                if floor is None:
                    unbounded_by = self._clock.monotonic_s() + self._config.max_idle_ms / 1000
                floor = await self._tick_and_wait(floor, changed, stop, publishing)
        finally:
            await publishing.drain()  # what was claimed goes out before the queue closes

    async def _tick_and_wait(
        self,
        floor: datetime | None,
        changed: asyncio.Event,
        stop: asyncio.Event,
        publishing: _PublishPipeline,
    ) -> datetime | None:
        """One tick of `run()`, then the sleep until the next; returns the next tick's floor."""
        try:
            result = await self._tick(None, not_before=floor)
            if result.handed_off and self._publish is not None:
                await publishing.send(result.handed_off)
            floor = result.settled_below
            if result.full_batch:
                return floor  # more are due right now
            delay = sleep_seconds(
                await self._store.next_due_at(not_before=floor),
                self._clock.now(),
                scanned_to=result.scanned_to,
                lookahead_ms=self._config.lookahead_ms,
                max_idle_ms=self._config.max_idle_ms,
            )
        except Exception:
            log.exception("scheduler tick failed", extra={"action": "tick_failed"})
            floor, delay = None, self._config.max_idle_ms / 1000
        if await _wait_any(changed, stop, delay):
            floor = None
        return floor


class _PublishPipeline:
    """At most one publish in flight, running while the scheduler claims the next batch.

    `send` waits for the previous publish before it starts the next one, so a queue slower
    than the claims holds the scheduler back (one batch of envelopes in memory, not a
    growing pile) and envelopes go out in claim order."""

    def __init__(
        self, publish: Callable[[Sequence[Envelope]], Coroutine[object, None, None]]
    ) -> None:
        self._publish = publish
        self._in_flight: asyncio.Task[None] | None = None

    async def send(self, envelopes: Sequence[Envelope]) -> None:
        await self.drain()
        self._in_flight = asyncio.create_task(self._publish(envelopes))

    async def drain(self) -> None:
        task, self._in_flight = self._in_flight, None
        if task is not None:
            await task  # _publish_safely logs its own failures; it raises only on cancel


def _record(due: Sequence[DueJob], plans: Sequence[ClaimPlan], result: TickResult) -> None:
    metrics.FIRES.labels(origin="schedule").inc(result.claimed)
    metrics.CLAIM_CONFLICTS.inc(result.conflicts)
    for job, plan in zip(due, plans, strict=True):
        if plan.coalesced:
            metrics.MISSED.labels(policy=job.schedule.misfire.value).inc(plan.coalesced)


async def _wait_any(changed: asyncio.Event, stop: asyncio.Event, timeout_s: float) -> bool:
    """Sleep up to `timeout_s`, waking early on a store change or on stop; whether jobs
    changed (during the sleep or the tick before it)."""
    await first_of([changed, stop], timeout_s)
    was_changed = changed.is_set()
    changed.clear()
    return was_changed
