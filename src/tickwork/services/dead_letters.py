"""The dead-letter service: runs that failed for good, listed, redriven or purged.

Redriving a dead letter puts it back to pending, leasable at once, for one more attempt;
purging takes it out of the queue and leaves it failed in the history. The store acts on run
ids or on the whole queue, so acting on one job's (or one tenant's) dead letters walks that
part of the queue in pages (`DLQ_PAGE` run ids per store call).
"""

from __future__ import annotations

import builtins
from collections.abc import Awaitable, Callable
from typing import Final

from tickwork.clock import Clock
from tickwork.domain.runs import Run
from tickwork.errors import NotFound
from tickwork.store.base import ScheduleStore

__all__ = ["DLQ_PAGE", "DeadLetterService", "NotDeadLettered"]

DLQ_PAGE: Final = 500  # run ids per store call when acting on one job's dead letters


class NotDeadLettered(NotFound):
    """The run does not exist or is not in the dead-letter queue (HTTP 404)."""

    code = "not_dead_lettered"

    def __init__(self, run_id: int) -> None:
        super().__init__("run", str(run_id))
        self.args = (
            f"run {run_id} is not a dead letter: it does not exist, or it is not in the "
            "dead-letter queue (never failed for good, or already redriven or purged)",
        )


class DeadLetterService:
    """List, redrive and purge dead letters; `job_id` None means every job's, `tenant` None
    every tenant's (a tenant-scoped API key passes its tenant: a job of another tenant is then
    NotFound, as if it did not exist)."""

    def __init__(self, store: ScheduleStore, clock: Clock, *, page: int = DLQ_PAGE) -> None:
        self._store = store
        self._clock = clock
        self._page = page

    async def list(
        self,
        *,
        limit: int = 50,
        before_id: int | None = None,
        job_id: str | None = None,
        tenant: str | None = None,
    ) -> builtins.list[Run]:
        """Newest first. Raises NotFound for an unknown `job_id` (or one of another tenant)."""
        if job_id is not None:
            await self._job(job_id, tenant)
        return await self._store.list_dead_letters(
            limit=limit, before_id=before_id, job_id=job_id, tenant=tenant
        )

    async def redrive_one(self, run_id: int, *, tenant: str | None = None) -> None:
        """Give one dead letter (of `tenant`'s jobs) another attempt. Raises NotDeadLettered."""
        await self._check_run(run_id, tenant)
        if not await self._store.redrive([run_id], now=self._clock.now()):
            raise NotDeadLettered(run_id)

    async def redrive(self, job_id: str | None = None, *, tenant: str | None = None) -> int:
        """Give every dead letter (of `job_id`, of `tenant`'s jobs) another attempt; returns
        how many."""
        now = self._clock.now()
        return await self._each_page(job_id, tenant, lambda ids: self._store.redrive(ids, now=now))

    async def purge_one(self, run_id: int, *, tenant: str | None = None) -> None:
        """Drop one dead letter (of `tenant`'s jobs) from the queue. Raises NotDeadLettered."""
        await self._check_run(run_id, tenant)
        if not await self._store.purge_dead_letters([run_id]):
            raise NotDeadLettered(run_id)

    async def purge(self, job_id: str | None = None, *, tenant: str | None = None) -> int:
        """Drop every dead letter (of `job_id`, of `tenant`'s jobs) from the queue; returns how
        many."""
        return await self._each_page(job_id, tenant, self._store.purge_dead_letters)

    async def _job(self, job_id: str, tenant: str | None) -> None:
        """NotFound unless the job exists (and is `tenant`'s, when one is given)."""
        job = await self._store.get_job(job_id)
        if tenant is not None and job.tenant != tenant:
            raise NotFound("job", job_id)

    async def _check_run(self, run_id: int, tenant: str | None) -> None:
        """NotDeadLettered unless the run's job is `tenant`'s (nothing to check without one)."""
        if tenant is None:
            return
        try:
            run = await self._store.get_run(run_id)
            await self._job(run.job_id, tenant)
        except NotFound:
            raise NotDeadLettered(run_id) from None

    async def _each_page(
        self,
        job_id: str | None,
        tenant: str | None,
        act: Callable[[builtins.list[int] | None], Awaitable[int]],
    ) -> int:
        """Act on the whole queue in one call, or page through one job's or one tenant's dead
        letters, `self._page` run ids per call."""
        if job_id is None and tenant is None:
            return await act(None)
        if job_id is not None:
            await self._job(job_id, tenant)
        done, before = 0, None
        while True:
            page = await self._store.list_dead_letters(
                limit=self._page, before_id=before, job_id=job_id, tenant=tenant
            )
            if page:
                done += await act([run.id for run in page])
            if len(page) < self._page:
                return done
            before = page[-1].id
