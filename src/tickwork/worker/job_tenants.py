"""Which tenant a fire's job belongs to, for the executor's per-tenant cap (ADR 0023).

A fire does not carry its tenant: the lease statements return the run and its job's target,
not the job's tenant. So the executor asks this cache, by job id, and it reads as little as
it can:

* The tenant list first (`list_tenants`, one read per `tenants_ttl_s`). A job can only be
  created for an existing tenant and a tenant with jobs cannot be deleted, so while there is
  at most one tenant every job is its (or `DEFAULT_TENANT`'s, on a database that never had
  one): no read per job at all, which is every single-tenant deployment and its bursts.
* With several tenants, each job's tenant (`get_job`, a few reads at a time) the first time
  one of its fires is submitted, usually a look-ahead before it is due; kept `jobs_ttl_s`,
  so an every-second job costs one read a minute. A job moved to another tenant counts
  against the new one within that time.

`known` answers from memory without waiting; a tenant list past its time is still used while
`learn` reads it again. A job that no longer exists, or a read that fails, gives
`UNKNOWN_TENANT`: its fire still runs, sharing one tenant's cap with the other unknowns,
rather than waiting for the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Final, Protocol

from tickwork.clock import Clock
from tickwork.domain.jobs import Job
from tickwork.domain.tenants import Tenant
from tickwork.errors import NotFound

__all__ = ["DEFAULT_TENANT", "UNKNOWN_TENANT", "JobReads", "JobTenants"]

log = logging.getLogger("tickwork.executor")

DEFAULT_TENANT: Final = "default"  # a job's tenant when none is given (domain/jobs.py)
UNKNOWN_TENANT: Final = ""  # no tenant may be named "" (services/rules.py check_tenant)
TENANTS_TTL_S: Final = 5.0
JOBS_TTL_S: Final = 60.0
JOBS_KEPT: Final = 100_000  # entries before the cache starts afresh (a bound, not an LRU)
READS_AT_ONCE: Final = 8  # a burst of new jobs must not take every connection of the pool


class JobReads(Protocol):
    """The two store reads the cache needs (every ScheduleStore has them)."""

    async def list_tenants(self) -> list[Tenant]: ...

    async def get_job(self, job_id: str) -> Job: ...


class JobTenants:
    def __init__(
        self,
        store: JobReads,
        clock: Clock,
        *,
        tenants_ttl_s: float = TENANTS_TTL_S,
        jobs_ttl_s: float = JOBS_TTL_S,
    ) -> None:
        self._store = store
        self._clock = clock
        self._tenants_ttl_s = tenants_ttl_s
        self._jobs_ttl_s = jobs_ttl_s
        # The one tenant every job belongs to (None: several tenants, or not read yet).
        self._sole: str | None = None
        self._listed_at: float | None = None
        self._jobs: dict[str, tuple[str, float]] = {}  # job id -> (tenant, read at)
        self._reads = asyncio.Semaphore(READS_AT_ONCE)

    def known(self, job_id: str) -> str | None:
        """The tenant of `job_id` from memory (None: `learn` it first)."""
        if self._sole is not None:
            return self._sole
        entry = self._jobs.get(job_id)
        if entry is None or self._clock.monotonic_s() - entry[1] >= self._jobs_ttl_s:
            return None
        return entry[0]

    def stale(self) -> bool:
        """Whether the tenant list is due for another read (`learn` does it)."""
        listed_at = self._listed_at
        return listed_at is None or self._clock.monotonic_s() - listed_at >= self._tenants_ttl_s

    async def learn(self, job_ids: Collection[str]) -> dict[str, str]:
        """Read what is needed to know the tenants of `job_ids`; returns each one's."""
        if self.stale():
            await self._list()
        if self._sole is not None:
            return dict.fromkeys(job_ids, self._sole)
        if len(self._jobs) + len(job_ids) > JOBS_KEPT:
            self._jobs.clear()
        found = await asyncio.gather(*(self._read(job_id) for job_id in job_ids))
        return dict(zip(job_ids, found, strict=True))

    async def _list(self) -> None:
        try:
            tenants = await self._store.list_tenants()
        except Exception:
            # Keep what we knew; with nothing known, jobs are read one by one meanwhile.
            log.warning(
                "could not read the tenant list", exc_info=True, extra={"action": "tenants_failed"}
            )
            return
        self._listed_at = self._clock.monotonic_s()
        if len(tenants) <= 1:
            self._sole = tenants[0].tenant if tenants else DEFAULT_TENANT
        else:
            self._sole = None

    async def _read(self, job_id: str) -> str:
        known = self.known(job_id)  # read meanwhile for another fire
        if known is not None:
            return known
        async with self._reads:
            try:
                job = await self._store.get_job(job_id)
            except NotFound:
                return UNKNOWN_TENANT
            except Exception:
                log.warning(
                    "could not read a job's tenant; its fire counts as an unknown tenant's",
                    exc_info=True,
                    extra={"action": "tenant_read_failed", "job_id": job_id},
                )
                return UNKNOWN_TENANT
        self._jobs[job_id] = (job.tenant, self._clock.monotonic_s())
        return job.tenant
