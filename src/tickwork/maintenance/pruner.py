"""History retention: delete attempts and finished runs older than the retention period.

Dead letters are kept until they are redriven or purged. Deletes go in batches so that a large
backlog never holds a long transaction (or SQLite's write lock) against the fire path.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta

from tickwork.clock import Clock
from tickwork.store.base import ScheduleStore

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


class Pruner:
    def __init__(self, store: ScheduleStore, clock: Clock, config: PrunerConfig) -> None:
        self._store = store
        self._clock = clock
        self._config = config

    async def run_once(self) -> int:
        """One pass: delete in batches until nothing is older than the retention; returns rows."""
        cutoff = self._clock.now() - self._config.retention
        total = 0
        while gone := await self._store.prune_history(
            finished_before=cutoff, limit=self._config.batch_size
        ):
            total += gone
            await asyncio.sleep(0)  # let the fire path in between batches
        if total:
            log.info("pruned %d history rows", total, extra={"action": "history_pruned"})
        return total

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.run_once()
            except Exception:
                log.exception("history pruning failed", extra={"action": "prune_failed"})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._config.interval_s)
