"""History retention: delete attempts, finished runs, audit entries and finished backfills older
than the retention period.

Each pass first lets the store maintain its history (`maintain_history`: on PostgreSQL, create
the coming days' partitions of tw_attempts and drop the expired ones, ADR 0007), then deletes
the rest in batches, so that a large backlog never holds a long transaction (or SQLite's write
lock) against the fire path. Every scheduler process runs a pruner, so partitions are kept
ahead without an operator; the store makes concurrent passes safe. Dead letters and their
attempts are kept until they are redriven or purged. The audit log (`tw_audit`) has the same
retention and goes in the same pass, in batches too, after the history; so do finished
backfills (completed or cancelled, by when they last changed), whose rows would otherwise
outlive the runs they made. Running backfills stay, however old.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwork.clock import Clock
from tickwork.errors import StoreError
from tickwork.store.base import HistoryMaintenance, ScheduleStore

log = logging.getLogger("tickwork.pruner")


@dataclass(frozen=True, kw_only=True, slots=True)
class PrunerConfig:
    retention: timedelta = timedelta(days=30)
    batch_size: int = 5_000
    interval_s: float = 600.0  # between passes; a pass runs until nothing old is left

    def __post_init__(self) -> None:
        if self.retention <= timedelta(0):
            raise ValueError("retention must be positive")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")


@dataclass(frozen=True, kw_only=True, slots=True)
class PruneResult:
    rows: int  # history rows (attempts and runs) deleted by the batched deletes
    partitions: HistoryMaintenance  # what the store's own upkeep changed
    audit: int = 0  # audit entries deleted
    backfills: int = 0  # finished backfills deleted


class Pruner:
    def __init__(self, store: ScheduleStore, clock: Clock, config: PrunerConfig) -> None:
        self._store = store
        self._clock = clock
        self._config = config

    async def run_once(self) -> PruneResult:
        """One pass: maintain, then delete in batches until nothing is older than the retention:
        the history, then the audit log, then finished backfills."""
        now = self._clock.now()
        upkeep = await self._maintain(now)
        cutoff = now - self._config.retention
        total = 0
        while gone := await self._store.prune_history(
            finished_before=cutoff, limit=self._config.batch_size
        ):
            total += gone
            await asyncio.sleep(0)  # let the fire path in between batches
        if total:
            log.info("pruned %d history rows", total, extra={"action": "history_pruned"})
        audit = 0
        while gone := await self._store.prune_audit(before=cutoff, limit=self._config.batch_size):
            audit += gone
            await asyncio.sleep(0)
        if audit:
            log.info("pruned %d audit entries", audit, extra={"action": "audit_pruned"})
        backfills = 0
        while gone := await self._store.prune_backfills(
            before=cutoff, limit=self._config.batch_size
        ):
            backfills += gone
            await asyncio.sleep(0)
        if backfills:
            log.info("pruned %d backfills", backfills, extra={"action": "backfills_pruned"})
        return PruneResult(rows=total, partitions=upkeep, audit=audit, backfills=backfills)

    async def _maintain(self, now: datetime) -> HistoryMaintenance:
        try:
            upkeep = await self._store.maintain_history(now=now, retention=self._config.retention)
        except StoreError:
            # The batched deletes still work without it; the next pass tries again.
            log.exception("history maintenance failed", extra={"action": "history_upkeep_failed"})
            return HistoryMaintenance(skipped=True)
        if upkeep.created or upkeep.dropped:
            log.info(
                "history partitions: created %s, dropped %s, kept %d dead-letter attempts",
                list(upkeep.created),
                list(upkeep.dropped),
                upkeep.kept_attempts,
                extra={"action": "history_partitions"},
            )
        return upkeep

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_once()
            except Exception:
                log.exception("history pruning failed", extra={"action": "prune_failed"})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._config.interval_s)
