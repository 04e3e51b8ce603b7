"""The paced lane: a loop of its own in every scheduler process that replays backfills and
catch-ups a slice at a time, apart from the tick loop, so on-time fires never wait for it.

Every `interval_ms` it reads the running backfills and gives each its next slice
(`backfill_plan.plan_slice`): no more than the backfill's own rate allows, and no more, for
all backfills together, than this process's rate (`TICKWORK_BACKFILL_RATE`). A slice is one
store call: the compare-and-set on the backfill's cursor and the slice's runs, in one
statement or transaction. The runs are unowned and leasable at once, so the workers take them
like manual triggers, beside the scheduled fires, which keep their own keys and claims.

Any scheduler may advance any backfill, whoever holds the job's partition (ADR 0015): the
cursor's compare-and-set makes the slice one process's, and the pacing clock in the row keeps
the backfill's rate whichever process wins. A backfill is not tied to a partition's owner, so
it goes on while partitions move (a rebalance, a takeover).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass
from datetime import datetime

from tickwork import metrics
from tickwork.clock import Clock
from tickwork.scheduler.backfill_plan import PACE_WINDOW, SliceLimits, plan_slice
from tickwork.store.base import ScheduleStore

log = logging.getLogger("tickwork.backfill")


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneConfig:
    rate_per_s: float = 50.0  # occurrences this process enqueues per second, all backfills
    interval_ms: int = 200
    max_slice: int = 1_000  # occurrences per statement
    scan_limit: int = 100  # running backfills read per round

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0:
            raise ValueError("rate_per_s must be > 0")
        if self.interval_ms < 1 or self.max_slice < 1 or self.scan_limit < 1:
            raise ValueError("interval_ms, max_slice and scan_limit must be >= 1")


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneRound:
    occurrences: int = 0  # occurrences the applied slices held
    inserted: int = 0  # runs inserted (an occurrence replayed before has its run already)
    advanced: int = 0  # slices applied
    lost: int = 0  # slices another process applied first, or that waited for a pending run


class BackfillLane:
    def __init__(self, store: ScheduleStore, clock: Clock, config: LaneConfig) -> None:
        self._store = store
        self._clock = clock
        self._config = config
        self._credit = 0.0  # occurrences this process may still enqueue (a token bucket)
        self._refilled_at: float | None = None  # monotonic s
        self._turn = 0  # which running backfill goes first this round (fairness)

    def _refill(self) -> int:
        cfg = self._config
        now_s = self._clock.monotonic_s()
        elapsed_s = (
            cfg.interval_ms / 1000 if self._refilled_at is None else now_s - self._refilled_at
        )
        self._refilled_at = now_s
        ceiling = cfg.rate_per_s * PACE_WINDOW.total_seconds()
        self._credit = min(self._credit + max(elapsed_s, 0.0) * cfg.rate_per_s, ceiling)
        return math.floor(self._credit + 1e-9)

    async def run_once(self, now: datetime | None = None) -> LaneRound:
        """One round: a slice for each running backfill that may take one now."""
        now = self._clock.now() if now is None else now
        budget = self._refill()
        if budget <= 0:
            return LaneRound()
        running = await self._store.running_backfills(limit=self._config.scan_limit)
        metrics.BACKFILLS_RUNNING.set(len(running))
        if not running:
            return LaneRound()
        first = self._turn % len(running)
        self._turn += 1
        occurrences = inserted = advanced = lost = 0
        for item in running[first:] + running[:first]:
            if budget <= 0:
                break
            limits = SliceLimits(budget=budget, max_slice=self._config.max_slice)
            advance = plan_slice(item, now, limits)
            if advance is None:
                continue
            added = await self._store.advance_backfill(advance, now=now)
            if added is None:
                lost += 1
                continue
            metrics.BACKFILL_ENQUEUED.labels(kind=item.backfill.kind.value).inc(added)
            taken = len(advance.occurrences)
            budget -= taken
            self._credit -= taken
            occurrences += taken
            inserted += added
            advanced += 1
            if advance.completes:
                log.info(
                    "backfill %d of job %s completed",
                    advance.backfill_id,
                    advance.job_id,
                    extra={"action": "backfill_completed"},
                )
        return LaneRound(occurrences=occurrences, inserted=inserted, advanced=advanced, lost=lost)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_once()
            except Exception:
                log.exception("backfill round failed", extra={"action": "backfill_failed"})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._config.interval_ms / 1000)
