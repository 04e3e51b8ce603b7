"""Pure: where a flexible window places an occurrence, choosing the least loaded second.

`schedule.window` lets an occurrence fire anywhere in [nominal, nominal + window). Unlike
jitter, which draws a delay blindly, placement looks at how many fires are already planned in
each second of the window and takes one of the least loaded seconds. Ties (always the case for
the first jobs, when nothing is planned yet) are broken by a draw from the occurrence itself,
(job id, nominal instant), so the same inputs give the same instant on every process, and a
batch placed against an empty load still spreads evenly instead of landing on the window's
first second. Inside the chosen second a second draw picks the millisecond.

The placed instant is a whole epoch millisecond (or the nominal instant itself when the
window is 0 or leaves no whole millisecond), never before nominal, before nominal + window
(a PT30S window on a whole second is 30 whole seconds), and strictly before the next
occurrence (ADR 0022). It lies in a second wholly inside the window whenever there is one, so
a partial first or last second is never packed as densely as the others.

`LoadMap` counts planned fires per epoch second for a planner placing many occurrences in a
row: `place_in_window(..., load=loads)` then `loads.add(instant)`. It answers "least loaded
second in a range" without reading every second of the range (blocks of 64 seconds that know
their own minimum), so long windows stay cheap.

No I/O, no clock: instants come in as aware datetimes (or epoch microseconds).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime

from tickwork.clock import from_us, to_us
from tickwork.timing.jitter import occurrence_digest, uniform_index

__all__ = [
    "WINDOW_PERSON",
    "LoadMap",
    "least_loaded_second",
    "place_in_window",
    "place_in_window_us",
]

# blake2b's personalisation for window draws: independent of the jitter draw of the same
# occurrence. Changing it moves every windowed fire: keep it.
WINDOW_PERSON = b"tickwork.window1"

_US_PER_MS = 1_000
_MS_PER_S = 1_000
_BLOCK = 64  # seconds per LoadMap block: a range of W seconds reads ~W/64 block minimums


def place_in_window(
    job_id: str,
    nominal: datetime,
    window_ms: int,
    *,
    next_nominal: datetime | None,
    load: Mapping[int, int],
) -> datetime:
    """The instant this occurrence fires at, inside its window, in a least loaded second.

    `load` maps epoch second -> fires already planned in it (a `LoadMap` is answered without
    scanning the window). `next_nominal` None: a one-shot or the last occurrence."""
    next_us = None if next_nominal is None else to_us(next_nominal)
    nominal_us = to_us(nominal)
    placed_us = place_in_window_us(
        job_id, nominal_us, window_ms, next_nominal_us=next_us, load=load
    )
    return nominal if placed_us == nominal_us else from_us(placed_us)


def place_in_window_us(
    job_id: str,
    nominal_us: int,
    window_ms: int,
    *,
    next_nominal_us: int | None,
    load: Mapping[int, int],
) -> int:
    """`place_in_window` on epoch microseconds, for planners that keep integers."""
    if window_ms < 0:
        raise ValueError(f"window_ms must be 0 or more, got {window_ms}")
    last_us = nominal_us + window_ms * _US_PER_MS - 1  # the window's end is not in it
    if next_nominal_us is not None:
        if next_nominal_us <= nominal_us:
            raise ValueError("next_nominal must be after nominal")
        last_us = min(last_us, next_nominal_us - 1)
    first_ms = -(-nominal_us // _US_PER_MS)  # the first whole millisecond not before nominal
    last_ms = last_us // _US_PER_MS
    if window_ms == 0 or first_ms > last_ms:
        return nominal_us
    digest = occurrence_digest(job_id, nominal_us, person=WINDOW_PERSON, size=16)
    low_s, high_s = _candidate_seconds(first_ms, last_ms)
    second = least_loaded_second(load, low_s, high_s, tie_draw=digest[:8])
    # The chosen second's whole milliseconds that are inside the window (the first and the
    # last second of the window may be partial).
    low_ms = max(first_ms, second * _MS_PER_S)
    high_ms = min(last_ms, second * _MS_PER_S + _MS_PER_S - 1)
    return (low_ms + uniform_index(digest[8:], high_ms - low_ms + 1)) * _US_PER_MS


def _candidate_seconds(first_ms: int, last_ms: int) -> tuple[int, int]:
    """The seconds a placement chooses among: those wholly inside [first_ms, last_ms], when
    there is one. A second only partly inside would get as many fires as a whole one in a
    fraction of its time: a window starting at .9986 s would pack a second's share into its
    first millisecond. Only a window with no whole second inside uses its partial ones."""
    whole_first = -(-first_ms // _MS_PER_S)
    whole_last = (last_ms + 1) // _MS_PER_S - 1
    if whole_first <= whole_last:
        return whole_first, whole_last
    return first_ms // _MS_PER_S, last_ms // _MS_PER_S


def least_loaded_second(
    load: Mapping[int, int], first_s: int, last_s: int, *, tie_draw: bytes
) -> int:
    """One of the seconds in [first_s, last_s] with the fewest planned fires: of the k tied
    seconds in ascending order, the one at `uniform_index(tie_draw, k)`."""
    if isinstance(load, LoadMap):
        return load.least_loaded(first_s, last_s, tie_draw=tie_draw)
    if last_s < first_s:
        raise ValueError("last_s must not be before first_s")
    counts = [load.get(second, 0) for second in range(first_s, last_s + 1)]
    fewest = min(counts)
    tied = [first_s + i for i, count in enumerate(counts) if count == fewest]
    return tied[uniform_index(tie_draw, len(tied))]


class _Block:
    """64 consecutive seconds' counts, with their minimum and how many seconds hold it."""

    __slots__ = ("counts", "fewest", "fewest_count")

    def __init__(self) -> None:
        self.counts = [0] * _BLOCK
        self.fewest = 0
        self.fewest_count = _BLOCK


class LoadMap(Mapping[int, int]):
    """Planned fires per epoch second; counts only grow (a planner adds what it places).

    A Mapping of the seconds that hold at least one fire. `least_loaded` reads whole blocks
    of 64 seconds by their kept minimum and scans only the partial blocks at the range's
    ends, in C (list slices, min, count)."""

    def __init__(self, counts: Mapping[int, int] | None = None) -> None:
        self._blocks: dict[int, _Block] = {}
        self._seconds = 0  # seconds with at least one fire: the Mapping's length
        self._total = 0
        for second, fires in (counts or {}).items():
            self.add_to_second(second, fires)

    @property
    def total(self) -> int:
        """All fires counted."""
        return self._total

    def add(self, instant: datetime) -> None:
        """Count one more fire at `instant` (in its epoch second)."""
        self.add_to_second(to_us(instant) // 1_000_000)

    def add_us(self, instant_us: int) -> None:
        self.add_to_second(instant_us // 1_000_000)

    def add_to_second(self, second: int, fires: int = 1) -> None:
        """Count `fires` more in an epoch second. Never fewer: a block's minimum then only
        moves when its last second holding it grows, which keeps `least_loaded` exact."""
        if fires < 0:
            raise ValueError(f"fires must be 0 or more, got {fires}")
        if fires == 0:
            return
        index, offset = divmod(second, _BLOCK)
        block = self._blocks.get(index)
        if block is None:
            block = self._blocks[index] = _Block()
        before = block.counts[offset]
        block.counts[offset] = before + fires
        self._total += fires
        if before == 0:
            self._seconds += 1
        if before == block.fewest:
            block.fewest_count -= 1
            if block.fewest_count == 0:
                # Every other second holds more than `before`; find the new minimum in C.
                block.fewest = min(block.counts)
                block.fewest_count = block.counts.count(block.fewest)

    def least_loaded(self, first_s: int, last_s: int, *, tie_draw: bytes = bytes(8)) -> int:
        """One of the seconds in [first_s, last_s] with the fewest fires: of the k tied seconds
        in ascending order, the one at `uniform_index(tie_draw, k)` (the same rule as
        `least_loaded_second` on a plain mapping)."""
        if last_s < first_s:
            raise ValueError("last_s must not be before first_s")
        if last_s - first_s < 2 * _BLOCK:
            return self._least_loaded_short(first_s, last_s, tie_draw)
        # At least 129 seconds: a partial (or whole) head block, one or more whole blocks, a
        # partial (or whole) tail block. Whole blocks are read by their kept minimum only.
        head_index, tail_index = first_s // _BLOCK, last_s // _BLOCK
        head_start, tail_stop = first_s - head_index * _BLOCK, last_s - tail_index * _BLOCK
        head = self._blocks.get(head_index)
        tail = self._blocks.get(tail_index)
        head_counts = [0] * _BLOCK if head is None else head.counts
        tail_counts = [0] * _BLOCK if tail is None else tail.counts
        head_part = head_counts[head_start:]
        tail_part = tail_counts[: tail_stop + 1]
        middle = [self._blocks.get(index) for index in range(head_index + 1, tail_index)]
        middle_fewest = [0 if block is None else block.fewest for block in middle]
        fewest = min(min(head_part), min(tail_part), min(middle_fewest))
        head_tied = head_part.count(fewest)
        middle_tied = [
            (_BLOCK if block is None else block.fewest_count) if block_fewest == fewest else 0
            for block, block_fewest in zip(middle, middle_fewest, strict=True)
        ]
        rank = uniform_index(tie_draw, head_tied + sum(middle_tied) + tail_part.count(fewest))
        if rank < head_tied:
            return head_index * _BLOCK + _nth_index(head_counts, fewest, rank, head_start)
        rank -= head_tied
        for position, tied in enumerate(middle_tied):
            if rank < tied:
                block = middle[position]
                offset = rank if block is None else _nth_index(block.counts, fewest, rank, 0)
                return (head_index + 1 + position) * _BLOCK + offset
            rank -= tied
        return tail_index * _BLOCK + _nth_index(tail_counts, fewest, rank, 0)

    def _least_loaded_short(self, first_s: int, last_s: int, tie_draw: bytes) -> int:
        """A range of at most two blocks' length: copy its counts (list slices) and scan
        the copy in C; cheaper than the bookkeeping of whole blocks."""
        counts: list[int] = []
        first_block, last_block = first_s // _BLOCK, last_s // _BLOCK
        for index in range(first_block, last_block + 1):
            start = first_s - index * _BLOCK if index == first_block else 0
            stop = last_s - index * _BLOCK if index == last_block else _BLOCK - 1
            block = self._blocks.get(index)
            counts += [0] * (stop - start + 1) if block is None else block.counts[start : stop + 1]
        fewest = min(counts)
        rank = uniform_index(tie_draw, counts.count(fewest))
        return first_s + _nth_index(counts, fewest, rank, 0)

    def __getitem__(self, second: int) -> int:
        index, offset = divmod(second, _BLOCK)
        block = self._blocks.get(index)
        count = 0 if block is None else block.counts[offset]
        if count == 0:
            raise KeyError(second)
        return count

    def __iter__(self) -> Iterator[int]:
        for index in sorted(self._blocks):
            for offset, count in enumerate(self._blocks[index].counts):
                if count:
                    yield index * _BLOCK + offset

    def __len__(self) -> int:
        return self._seconds


def _nth_index(counts: list[int], value: int, rank: int, start: int) -> int:
    """The index of the (rank + 1)-th `value` in counts[start:], searched in C."""
    index = counts.index(value, start)
    for _ in range(rank):
        index = counts.index(value, index + 1)
    return index
