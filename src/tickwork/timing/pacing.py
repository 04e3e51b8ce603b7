"""Pure: the token bucket that paces a scheduler's claims under the global fire ceiling.

The cluster may fire at most `TICKWORK_FIRE_CEILING` occurrences per second (ADR 0025). Each
scheduler claims at its share of it: the ceiling times the share of the partitions it holds.
A claim takes one token per occurrence it fires; the bucket refills at the share's rate and
holds at most `burst_s` of it (the look-ahead's worth, 200 ms), so that over any window the
fires a scheduler claims exceed rate x window by at most that burst.

Times are seconds on a monotonic clock, passed in: no I/O, no clock here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["DEFAULT_BURST_S", "FireBucket", "ceiling_share", "held_back", "throttled_ms"]

# How many seconds of the rate a full bucket holds (the look-ahead: ADR 0009).
DEFAULT_BURST_S = 0.2


def ceiling_share(ceiling: float, held: int, partitions: int) -> float:
    """The fires per second a scheduler holding `held` of `partitions` partitions may claim:
    the ceiling in proportion (the whole of it without partitions, `partitions` 0)."""
    if ceiling <= 0:
        raise ValueError("ceiling must be > 0")
    if partitions <= 0:
        return ceiling
    return ceiling * min(max(held, 0), partitions) / partitions


@dataclass(slots=True)
class FireBucket:
    """A token bucket: `available(at)` whole tokens, `take(n, at)`, `wait_s(n, at)`.

    It starts full. Its rate may change (`set_rate`: partitions taken or given up); what it
    holds is then kept, up to the new capacity, and refills at the new rate from then on."""

    rate: float  # tokens per second (>= 0)
    burst_s: float = DEFAULT_BURST_S
    tokens: float = math.inf  # what it holds (negative: in debt); at most its capacity
    at_s: float = 0.0  # when `tokens` was last brought up to date

    def __post_init__(self) -> None:
        if self.rate < 0:
            raise ValueError("rate must be >= 0")
        if self.burst_s <= 0:
            raise ValueError("burst_s must be > 0")
        self.tokens = min(self.tokens, self.capacity)

    @property
    def capacity(self) -> float:
        """The most tokens it holds: `burst_s` of the rate, and at least one (a rate below
        5/s would otherwise never let a single fire through)."""
        return max(self.rate * self.burst_s, 1.0) if self.rate > 0 else 0.0

    def _refill(self, at_s: float) -> None:
        elapsed = max(at_s - self.at_s, 0.0)  # a clock read out of order adds nothing
        self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
        self.at_s = max(self.at_s, at_s)

    def available(self, at_s: float) -> int:
        """Whole tokens in the bucket at `at_s`: how many fires may be claimed now."""
        self._refill(at_s)
        return max(math.floor(self.tokens + 1e-9), 0)

    def take(self, count: int, at_s: float) -> None:
        """Take `count` tokens (the fires a claim made). More than it holds leaves it in debt,
        repaid by the refill before anything more is available: a claim is never undone, and
        the pace over a window still holds."""
        if count < 0:
            raise ValueError("count must be >= 0")
        self._refill(at_s)
        self.tokens -= count

    def wait_s(self, count: int, at_s: float) -> float:
        """Seconds from `at_s` until `count` tokens are there (0.0 if they are now; infinite
        at rate 0). `count` is capped at the capacity: a bucket never holds more."""
        self._refill(at_s)
        if count <= 0:
            return 0.0
        if self.rate <= 0:
            return math.inf
        want = min(float(count), self.capacity)
        if self.tokens + 1e-9 >= want:
            return 0.0
        return (want - self.tokens) / self.rate

    def set_rate(self, rate: float, at_s: float) -> None:
        """Change the rate from `at_s` on (what accrued until then at the old rate is kept,
        up to the new capacity)."""
        if rate < 0:
            raise ValueError("rate must be >= 0")
        if rate == self.rate:
            return
        self._refill(at_s)
        self.rate = rate
        self.tokens = min(self.tokens, self.capacity)


def held_back(due_at: datetime, *, throttled_since: datetime | None, grace_ms: int) -> bool:
    """Whether an occurrence due at `due_at` waited because of the ceiling, not a downtime:
    the scheduler has been throttled (a tick left due work behind for want of tokens) since
    `throttled_since`, and the occurrence was still on time then (due no earlier than that
    instant minus its misfire grace). Such an occurrence fires as if on time, however late;
    one that was late already before the throttling keeps its misfire policy."""
    if throttled_since is None:
        return False
    return due_at >= throttled_since - timedelta(milliseconds=grace_ms)


def throttled_ms(due_at: datetime, now: datetime, *, throttled_since: datetime) -> int | None:
    """How much later than its instant an occurrence held back by the ceiling is claimed at
    `now` because of it: the lateness since it was due or since the throttling began,
    whichever is later, in whole milliseconds; None when it is not late (claimed ahead, or
    within the millisecond)."""
    late = now - max(due_at, throttled_since)
    late_ms = late // timedelta(milliseconds=1)
    return late_ms if late_ms > 0 else None
