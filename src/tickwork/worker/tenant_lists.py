"""Tenant destination lists at fire time: the worker's last check before a request leaves.

The API checks a job's URLs against its tenant's lists when the job is created or changed, but
an admin may narrow the lists afterwards, so the worker checks again before each request. The
lease statements carry neither the job's tenant nor its lists (the fire path is the hot path:
no join is added there); instead this cache reads them through the store:

* every tenant's lists, in one `list_tenants` read at most once per `ttl_s` (only tenants that
  have lists are kept; when none has, a fire costs no read at all);
* a job's tenant (`get_job`), kept for the same `ttl_s`, and only read while some tenant has
  lists.

So a change of the lists, or a job moved to another tenant, reaches every worker within
`ttl_s` (1.5 s by default). Concurrent fires share one read rather than each making their own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol, TypeVar

from tickwork.clock import Clock
from tickwork.domain.egress import EgressRules, tenant_refusal
from tickwork.domain.jobs import Job
from tickwork.domain.tenants import Tenant
from tickwork.errors import NotFound

__all__ = ["DEFAULT_TTL_S", "TenantLists", "TenantReads"]

DEFAULT_TTL_S: Final = 1.5
JOBS_KEPT: Final = 100_000  # job -> tenant entries before the cache starts afresh

T = TypeVar("T")


class TenantReads(Protocol):
    """The two store reads the cache needs (every ScheduleStore has them)."""

    async def list_tenants(self) -> list[Tenant]: ...

    async def get_job(self, job_id: str) -> Job: ...


class TenantLists:
    """Answers "do the lists of this job's tenant refuse this URL?" from a short-lived cache."""

    def __init__(self, store: TenantReads, clock: Clock, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self._store = store
        self._clock = clock
        self._ttl_s = ttl_s
        self._lists: dict[str, EgressRules] = {}
        self._lists_read_at: float | None = None
        self._tenants: dict[str, tuple[str, float]] = {}  # job id -> (tenant, read at)
        self._pending: dict[str, asyncio.Future[Any]] = {}  # reads in flight, by key

    async def refusal(self, job_id: str, url: str) -> str | None:
        """Why the lists of `job_id`'s tenant refuse `url` (naming the tenant and the list),
        or None. A job that no longer exists has no lists: its fenced writes fail anyway."""
        lists = await self._current_lists()
        if not lists:
            return None
        tenant = await self._tenant_of(job_id)
        rules = None if tenant is None else lists.get(tenant)
        return None if rules is None else tenant_refusal(tenant or "", rules, url)

    async def _current_lists(self) -> dict[str, EgressRules]:
        now = self._clock.monotonic_s()
        if self._lists_read_at is None or now - self._lists_read_at >= self._ttl_s:
            tenants = await self._shared("lists", self._store.list_tenants)
            self._lists = {t.tenant: t.egress for t in tenants if not t.egress.empty}
            self._lists_read_at = now
        return self._lists

    async def _tenant_of(self, job_id: str) -> str | None:
        now = self._clock.monotonic_s()
        known = self._tenants.get(job_id)
        if known is not None and now - known[1] < self._ttl_s:
            return known[0]
        try:
            job = await self._shared(f"job:{job_id}", lambda: self._store.get_job(job_id))
        except NotFound:
            self._tenants.pop(job_id, None)
            return None
        if len(self._tenants) >= JOBS_KEPT:
            self._tenants.clear()
        self._tenants[job_id] = (job.tenant, now)
        return job.tenant

    async def _shared(self, key: str, read: Callable[[], Awaitable[T]]) -> T:
        """One read per key at a time: fires that need the same answer wait for it together."""
        pending = self._pending.get(key)
        if pending is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this fire was cancelled
                return await read()  # the fire that was reading was cancelled, not this one
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            result = await read()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            future.set_result(result)
            return result
        finally:
            del self._pending[key]
