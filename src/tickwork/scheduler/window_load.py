"""The load a scheduler places windowed occurrences against (`schedule.window`, ADR 0022).

A window places an occurrence in the least loaded second of [nominal, nominal + window]. The
load is what is planned there: the jobs whose next_run_at falls in each second. The scheduler
reads that from the store once per range of seconds it has not read yet (`planned_counts`,
one read of the due index), then keeps counting in memory what it plans itself: the placed
occurrences, and every other next fire of its claims that lands in a range it has read. A
herd of windowed jobs claimed in many batches therefore costs one read per window range, not
one per batch, and each batch sees the ones placed before it.

What other schedulers place after the read is not seen: each one flattens its own share of
the partitions (ADR 0022's consequence), and the sum is flat to within the number of
schedulers per second. Ranges wholly in the past are forgotten.

Plain batches pay nothing: with no windowed job in the batch and no range read, `place`
returns the plans untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from tickwork.clock import to_us
from tickwork.scheduler.planning import place_windows, window_ranges
from tickwork.store.base import ClaimPlan, DueJob, ScheduleStore
from tickwork.timing.window import LoadMap

__all__ = ["WindowLoad", "merge_ranges", "subtract_ranges"]

Range = tuple[int, int]  # epoch seconds, both ends included


class WindowLoad:
    def __init__(self, store: ScheduleStore) -> None:
        self._store = store
        self._load = LoadMap()
        self._read: list[Range] = []  # merged, sorted: the ranges whose counts `_load` holds

    async def place(
        self, plans: Sequence[ClaimPlan], due: Sequence[DueJob], now: datetime
    ) -> list[ClaimPlan]:
        """`plans` with their windowed occurrences placed (planning.place_windows), the load
        read for any range not read yet; the batch's other next fires counted too."""
        wanted = window_ranges(plans, due)
        if not wanted and not self._read:
            return list(plans)
        self._forget_before(to_us(now) // 1_000_000)
        for first, last in subtract_ranges(merge_ranges(wanted), self._read):
            for second, fires in (await self._store.planned_counts(first, last)).items():
                self._load.add_to_second(second, fires)
            self._read = merge_ranges([*self._read, (first, last)])
        placed = place_windows(plans, due, self._load) if wanted else list(plans)
        for plan, job in zip(placed, due, strict=True):
            # Placed ones were counted by their placement; count the rest that land here.
            if not job.schedule.window_ms and plan.new_next_run_at is not None:
                second = to_us(plan.new_next_run_at) // 1_000_000
                if _inside(second, self._read):
                    self._load.add_to_second(second)
        return placed

    def _forget_before(self, second: int) -> None:
        """Drop the ranges wholly before `second`, and their counts."""
        kept = [r for r in self._read if r[1] >= second]
        if len(kept) == len(self._read):
            return
        load = LoadMap()
        for counted in self._load:
            if _inside(counted, kept):
                load.add_to_second(counted, self._load[counted])
        self._load, self._read = load, kept


def _inside(second: int, ranges: Sequence[Range]) -> bool:
    return any(first <= second <= last for first, last in ranges)


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
