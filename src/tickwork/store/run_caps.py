"""The SQL stores' short cache of the tenants that have `max_concurrent_runs` (ADR 0024).

The lease statements take a capped form only while some tenant has that limit; otherwise they
run exactly as before. Which form to take is read from this cache, refreshed by one small read
of tw_tenants (the rows with limits) at most once per `ttl_s`, so a deployment without
concurrency limits pays one such read per second per process, not one per lease. A change
made through this store object drops the cache at once; one made elsewhere (another process)
is seen within `ttl_s`. The counting itself is never cached: the capped statements count the
running runs in the lease's own transaction.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

__all__ = ["DEFAULT_TTL_S", "RunCaps"]

DEFAULT_TTL_S: Final = 1.0


class RunCaps:
    """{tenant: cap} of the capped tenants, read through `load` at most once per `ttl_s`."""

    def __init__(
        self,
        load: Callable[[], Awaitable[Mapping[str, int]]],
        *,
        ttl_s: float = DEFAULT_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._load = load
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._caps: Mapping[str, int] = {}
        self._read_at: float | None = None
        self._generation = 0  # moved by invalidate: a read in flight then is not kept fresh
        self._lock = asyncio.Lock()

    def invalidate(self) -> None:
        """Read again at the next use (this process changed a tenant's limits)."""
        self._read_at = None
        self._generation += 1

    async def current(self) -> Mapping[str, int]:
        if self._fresh():
            return self._caps
        async with self._lock:  # concurrent leases share one read
            if not self._fresh():
                read_at, generation = self._monotonic(), self._generation
                self._caps = dict(await self._load())
                self._read_at = read_at if generation == self._generation else None
        return self._caps

    def _fresh(self) -> bool:
        return self._read_at is not None and self._monotonic() - self._read_at < self._ttl_s
