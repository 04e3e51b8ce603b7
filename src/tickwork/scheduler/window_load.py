"""The load a scheduler places windowed occurrences against (`schedule.window`, ADR 0022).

A window places an occurrence in the least loaded second of [nominal, nominal + window). The
load is what is planned there: the jobs whose next_run_at falls in each second. The scheduler
reads that from the store once per range of seconds it has not read yet (`planned_counts`,
one read of the due index), then keeps counting in memory what it plans itself: the placed
occurrences, and every other next fire of its claims that lands in a range it has read. A
herd of windowed jobs claimed in many batches therefore costs one read per window range, not
one per batch, and each batch sees the ones placed before it.

What other schedulers (or API processes) place after the read is seen only when the counts are
read afresh, every `refresh_s` (10 s for a scheduler, 1 s for the job service): in between,
each process flattens its own share, and the sum is flat to within the number of processes
per second (ADR 0022's consequence). Dropping everything at each refresh also bounds memory.

Plain batches pay nothing: with no windowed job in the batch and no range read, `place`
returns the plans untouched.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from tickwork.clock import to_us
from tickwork.scheduler.planning import place_windows, window_ranges
from tickwork.store.base import ClaimPlan, DueJob, ScheduleStore
from tickwork.timing.window import LoadMap

__all__ = ["WindowLoad", "merge_ranges", "subtract_ranges"]

Range = tuple[int, int]  # epoch seconds, both ends included


class WindowLoad:
    """Planned fires per second, for placing windows: read from the store per range of seconds,
    then kept up to date in memory with what this process plans, and read afresh every
    `refresh_s` (what other processes planned meanwhile is seen then)."""

    def __init__(
        self,
        store: ScheduleStore,
        *,
        refresh_s: float = 10.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._monotonic = monotonic
        self._load = LoadMap()
        self._read: list[Range] = []  # merged, sorted: the ranges whose counts `_load` holds
        self._since = monotonic()  # when the counts were first read: they are dropped after

    async def place(
        self, plans: Sequence[ClaimPlan], due: Sequence[DueJob], now: datetime
    ) -> list[ClaimPlan]:
        """`plans` with their windowed occurrences placed (planning.place_windows), the load
        read for any range not read yet; the batch's other next fires counted too."""
        wanted = window_ranges(plans, due)
        if not wanted and not self._read:
            return list(plans)
        load = await self.load_for(wanted)
        placed = place_windows(plans, due, load) if wanted else list(plans)
        for plan, job in zip(placed, due, strict=True):
            # Placed ones were counted by their placement; count the rest that land here.
            if not job.schedule.window_ms and plan.new_next_run_at is not None:
                self.note(plan.new_next_run_at)
        return placed

    async def load_for(self, ranges: Sequence[Range]) -> LoadMap:
        """The counts, with every second of `ranges` read: a map to place against (a
        placement made with it counts itself, see `timing.shift.planned_of`)."""
        if self._monotonic() - self._since > self._refresh_s:
            self._load, self._read, self._since = LoadMap(), [], self._monotonic()
        for first, last in subtract_ranges(merge_ranges(ranges), self._read):
            for second, fires in (await self._store.planned_counts(first, last)).items():
                self._load.add_to_second(second, fires)
            self._read = merge_ranges([*self._read, (first, last)])
        return self._load

    def note(self, instant: datetime) -> None:
        """Count a fire planned at `instant` by other means (not placed against this map)."""
        second = to_us(instant) // 1_000_000
        at = bisect.bisect_right(self._read, (second, _FAR)) - 1
        if at >= 0 and self._read[at][0] <= second <= self._read[at][1]:
            self._load.add_to_second(second)


_FAR = 2**62


def merge_ranges(ranges: Sequence[Range]) -> list[Range]:
    """Sorted, with overlapping or adjacent ranges joined."""
    merged: list[Range] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def subtract_ranges(wanted: Sequence[Range], have: Sequence[Range]) -> list[Range]:
    """The parts of the merged, sorted `wanted` not covered by the merged, sorted `have`."""
    missing: list[Range] = []
    for first, last in wanted:
        start = first
        for have_first, have_last in have:
            if have_last < start or have_first > last:
                continue
            if have_first > start:
                missing.append((start, have_first - 1))
            start = max(start, have_last + 1)
            if start > last:
                break
        if start <= last:
            missing.append((start, last))
    return missing
