"""The backfill service: asking for a range of a job's past occurrences to be replayed through
the paced lane (scheduler/backfill_lane.py), reading such requests, cancelling them."""

from __future__ import annotations

import asyncio
from datetime import datetime

from tickwork.clock import Clock, utc_iso
from tickwork.domain.backfills import (
    DEFAULT_BACKFILL_RATE,
    MAX_BACKFILL_OCCURRENCES,
    MAX_BACKFILL_RATE,
    Backfill,
    BackfillKind,
    BackfillState,
)
from tickwork.domain.jobs import Job
from tickwork.errors import InvalidInput
from tickwork.scheduler.backfill_plan import count_in_range
from tickwork.store.base import ScheduleStore

__all__ = ["BackfillService"]


class BackfillService:
    def __init__(
        self,
        store: ScheduleStore,
        clock: Clock,
        *,
        max_occurrences: int = MAX_BACKFILL_OCCURRENCES,
    ) -> None:
        self._store = store
        self._clock = clock
        self._max = max_occurrences

    async def create(
        self, job: Job, from_at: datetime, to_at: datetime, rate_per_s: float | None = None
    ) -> Backfill:
        """Replay the job's occurrences in [from_at, to_at), oldest first, at `rate_per_s`.

        Raises InvalidInput for an empty or reversed range, one that reaches into the future
        (the schedule fires those itself) or one implying more than the cap of occurrences."""
        now = self._clock.now()
        rate = DEFAULT_BACKFILL_RATE if rate_per_s is None else rate_per_s
        _check_request(from_at, to_at, rate, now)
        # Counting a long cron range is CPU work (a second per ~100,000 occurrences): off the
        # event loop, so the API keeps answering meanwhile.
        total = await asyncio.to_thread(count_in_range, job.schedule, from_at, to_at, self._max + 1)
        if total > self._max:
            raise InvalidInput(
                "to",
                f"the range implies more than {self._max:,} occurrences of this job (the most"
                " one backfill replays); split it into several backfills",
                code="too_many_occurrences",
            )
        backfill = Backfill(
            id=0,
            job_id=job.id,
            tenant=job.tenant,
            kind=BackfillKind.BACKFILL,
            from_at=from_at,
            to_at=to_at,
            cursor_at=None,
            total=total,
            done=0,
            state=BackfillState.RUNNING if total else BackfillState.COMPLETED,
            rate_per_s=rate,
            created_at=now,
            updated_at=now,
            paced_at=now,
        )
        return await self._store.create_backfill(backfill)

    async def get(self, backfill_id: int) -> Backfill:
        return await self._store.get_backfill(backfill_id)

    async def of_job(self, job_id: str, *, limit: int = 100) -> list[Backfill]:
        return await self._store.list_backfills(job_id, limit=limit)

    async def cancel(self, backfill_id: int) -> Backfill:
        return await self._store.cancel_backfill(backfill_id, now=self._clock.now())


def _check_request(from_at: datetime, to_at: datetime, rate: float, now: datetime) -> None:
    if to_at <= from_at:
        raise InvalidInput(
            "to",
            "must be after `from`: the range is [from, to), `to` excluded",
            code="empty_range",
        )
    if to_at > now:
        raise InvalidInput(
            "to",
            f"backfill replays the past; give a `to` at or before now ({utc_iso(now)}):"
            " the schedule fires the occurrences still to come itself",
            code="in_future",
        )
    if not 0 < rate <= MAX_BACKFILL_RATE:
        raise InvalidInput(
            "rate",
            f"give occurrences per second, more than 0 and at most {MAX_BACKFILL_RATE:,.0f}",
            code="invalid_rate",
        )
