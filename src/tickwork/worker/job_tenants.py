"""Which tenant a fire's job belongs to, for the executor's per-tenant cap (ADR 0023).

A fire does not carry its tenant: the lease statements return the run and its job's target,
not the job's tenant. So the executor asks this cache, by job id: `known` answers from memory
(the fire path reads nothing when the job was seen within `ttl_s`), `learn` reads the jobs it
does not know (`get_job`, a few at a time) as soon as their fires are submitted, which is
usually a look-ahead before they are due. A job moved to another tenant counts against the
new one within `ttl_s`.

A job that no longer exists, or a read that fails, gives `UNKNOWN_TENANT`: its fire still
runs, sharing one tenant's cap with the other unknowns, rather than waiting for the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Final, Protocol

from tickwork.clock import Clock
from tickwork.domain.jobs import Job
from tickwork.errors import NotFound

__all__ = ["UNKNOWN_TENANT", "JobReads", "JobTenants"]

log = logging.getLogger("tickwork.executor")

UNKNOWN_TENANT: Final = ""  # no tenant may be named "" (services/rules.py check_tenant)
DEFAULT_TTL_S: Final = 60.0
JOBS_KEPT: Final = 100_000  # entries before the cache starts afresh (a bound, not an LRU)
READS_AT_ONCE: Final = 8  # a burst of new jobs must not take every connection of the pool


class JobReads(Protocol):
    async def get_job(self, job_id: str) -> Job: ...


class JobTenants:
    def __init__(self, store: JobReads, clock: Clock, *, ttl_s: float = DEFAULT_TTL_S) -> None:
        self._store = store
        self._clock = clock
        self._ttl_s = ttl_s
        self._tenants: dict[str, tuple[str, float]] = {}  # job id -> (tenant, read at)
        self._reads = asyncio.Semaphore(READS_AT_ONCE)

    def known(self, job_id: str) -> str | None:
        """The tenant of `job_id` if it was read within `ttl_s` (None: `learn` it first)."""
        entry = self._tenants.get(job_id)
        if entry is None or self._clock.monotonic_s() - entry[1] >= self._ttl_s:
            return None
        return entry[0]

    async def learn(self, job_ids: Collection[str]) -> dict[str, str]:
        """Read the tenants of `job_ids`; returns each one's (`UNKNOWN_TENANT` when the job is
        gone or the store did not answer: the next fire of that job asks again)."""
        if len(self._tenants) + len(job_ids) > JOBS_KEPT:
            self._tenants.clear()
        found = await asyncio.gather(*(self._read(job_id) for job_id in job_ids))
        return dict(zip(job_ids, found, strict=True))

    async def _read(self, job_id: str) -> str:
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
        self._tenants[job_id] = (job.tenant, self._clock.monotonic_s())
        return job.tenant
