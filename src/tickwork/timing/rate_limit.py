"""Pure: token buckets, one per key (the API's per-key request limit; later per tenant).

A bucket holds up to `burst` tokens and refills at `rate` per second; a request takes one.
When it is empty the request is refused, and the answer says how long until a token is back
(`Retry-After`). Times are seconds on a monotonic clock, passed in: no I/O, no clock here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["Buckets", "Limit", "retry_after_header"]


@dataclass(frozen=True, slots=True)
class Limit:
    rate: float  # tokens per second; 0 or less: no limit
    burst: int  # the most tokens a bucket holds (requests allowed back to back)

    @property
    def unlimited(self) -> bool:
        return self.rate <= 0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at_s: float


class Buckets:
    """One token bucket per name; buckets idle long enough to be full again are forgotten."""

    def __init__(self, limit: Limit) -> None:
        self._limit = limit
        self._buckets: dict[str, _Bucket] = {}

    @property
    def limit(self) -> Limit:
        return self._limit

    def take(self, name: str, at_s: float) -> float:
        """Take a token from `name`'s bucket: 0.0 if granted, else the seconds until one will
        be there (the request is refused and takes nothing)."""
        limit = self._limit
        if limit.unlimited:
            return 0.0
        bucket = self._buckets.get(name)
        if bucket is None:
            bucket = self._buckets[name] = _Bucket(tokens=float(limit.burst), at_s=at_s)
            self._forget_full(at_s)
        elapsed = max(at_s - bucket.at_s, 0.0)
        bucket.tokens = min(float(limit.burst), bucket.tokens + elapsed * limit.rate)
        bucket.at_s = at_s
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / limit.rate

    def _forget_full(self, at_s: float) -> None:
        """Drop buckets that have refilled completely (they equal a new one): bounded memory."""
        if len(self._buckets) < 1024:
            return
        refill_s = self._limit.burst / self._limit.rate
        self._buckets = {n: b for n, b in self._buckets.items() if at_s - b.at_s < refill_s}


def retry_after_header(wait_s: float) -> str:
    """Whole seconds, at least 1 (HTTP's Retry-After has no fractions)."""
    return str(max(1, math.ceil(wait_s)))
