"""Counting what tickwork sends to PostgreSQL, and where a tick's time goes.

`QueryCounter.patch_pools()` wraps `asyncpg.create_pool` while a store opens, so that every
pooled connection gets a query logger: each statement (and asyncpg's own reset query on every
release to the pool) is counted by kind, with its client-side elapsed time (send, server work,
receive and decode). `TimedStore` wraps a store and times its due read and its claim; the rest
of a tick is planning in Python.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import asyncpg


def kind_of(query: str) -> str:
    text = " ".join(query.split())
    if "RESET ALL" in text:
        return "pool_reset"
    if "INSERT INTO tw_runs" in text and "UPDATE tw_jobs" in text:
        return "claim"
    if text.startswith("SELECT id, fence_token, next_run_us"):
        return "due_scan"
    if text.startswith("SET "):
        return "session_set"
    return "other"


class QueryCounter:
    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._elapsed: defaultdict[str, float] = defaultdict(float)

    def log(self, record: Any) -> None:
        kind = kind_of(record.query)
        self._counts[kind] += 1
        self._elapsed[kind] += record.elapsed

    def reset(self) -> None:
        self._counts.clear()
        self._elapsed.clear()

    def counts(self) -> dict[str, int]:
        return dict(self._counts)

    def elapsed(self) -> dict[str, float]:
        return {k: round(v, 3) for k, v in self._elapsed.items()}

    @contextlib.contextmanager
    def patch_pools(self) -> Iterator[None]:
        original = asyncpg.create_pool

        def create_pool(*args: Any, init: Any = None, **kwargs: Any) -> Any:
            async def init_logged(conn: asyncpg.Connection) -> None:
                conn.add_query_logger(self.log)
                if init is not None:
                    await init(conn)

            return original(*args, init=init_logged, **kwargs)

        asyncpg.create_pool = create_pool
        try:
            yield
        finally:
            asyncpg.create_pool = original


class TimedStore:
    """Delegates to a store; adds up the time spent in due_jobs and claim."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.due_s = 0.0
        self.claim_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def due_jobs(self, until: datetime, limit: int, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self._inner.due_jobs(until, limit, **kwargs)
        finally:
            self.due_s += time.perf_counter() - started

    async def claim(self, plans: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self._inner.claim(plans, **kwargs)
        finally:
            self.claim_s += time.perf_counter() - started

    async def claim_hand_off(self, plans: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self._inner.claim_hand_off(plans, **kwargs)
        finally:
            self.claim_s += time.perf_counter() - started

    def phases(self, total_s: float) -> dict[str, float]:
        """due read, claim, and the rest of the ticks (planning, metrics): seconds."""
        rest = max(total_s - self.due_s - self.claim_s, 0.0)
        return {
            "due_read": round(self.due_s, 3),
            "plan_and_rest": round(rest, 3),
            "claim": round(self.claim_s, 3),
        }
