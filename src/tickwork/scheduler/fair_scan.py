"""The due scan of a scheduler that is behind: the batch shared fairly among tenants.

A tick that keeps up reads the due jobs in time order (`ScheduleStore.due_jobs`): everything
due is claimed, so order does not matter. A tick that is behind (its scan came back full, and
the last job in it was already due: more is due than one batch holds) would, in time order,
spend whole batches on one tenant's backlog while another tenant's on-time fires wait behind
it: tenant A's million one-shots due at 12:00:00 would delay tenant B's every-second jobs until
they drain. Behind, the scheduler reads instead:

1. how much each tenant has due, per priority level, counted no further than a batch
   (`due_counts`: one probe of the index tw_jobs_fair per tenant and level);
2. each tenant's share of the batch, weighted max-min fair (`fairness.fair_shares`; a tenant's
   `weight` limit, default 1), spent on its highest priority first (`level_limits`);
3. those jobs (`due_jobs_by_level`), ordered round-robin across tenants (`fairness.interleave`)
   so that the fires go out fairly within the batch as well.

It stays in that mode until a tick finds less due than a batch. A batch of one tenant at one
priority is read with the time-ordered scan (the same jobs, one query), so a single-tenant
burst pays only the counting probe per tick. The tenants and their weights are read every
`refresh_s` (default 5 s), without their secrets.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from tickwork.scheduler.fairness import fair_shares, interleave
from tickwork.store.base import DueJob, Level, ScheduleStore

__all__ = ["FairScan", "level_limits", "order_fairly"]


class FairScan:
    def __init__(
        self,
        store: ScheduleStore,
        *,
        refresh_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self._monotonic = monotonic
        self._weights: dict[str, int] = {}
        self._read_at: float | None = None
        self.behind = False  # the last tick had more due than a batch: share the next one

    def notice(self, due: Sequence[DueJob], batch: int, now: datetime) -> None:
        """After a time-ordered scan: behind when it came back full of jobs already due."""
        self.behind = len(due) >= batch and due[-1].next_run_at <= now

    async def scan(
        self,
        until: datetime,
        batch: int,
        *,
        not_before: datetime | None,
        partitions: Collection[int] | None,
    ) -> list[DueJob]:
        """The next batch, shared among the tenants with due work; clears `behind` when less
        than a batch is due."""
        weights = await self._tenant_weights()
        counts = await self._store.due_counts(
            until, sorted(weights), batch, not_before=not_before, partitions=partitions
        )
        self.behind = sum(counts.values()) >= batch
        if len(counts) <= 1:  # one tenant, one level: time order is the fair order
            return await self._store.due_jobs(
                until, batch, not_before=not_before, partitions=partitions
            )
        wanted = level_limits(counts, weights, batch)
        found = await self._store.due_jobs_by_level(
            until, wanted, not_before=not_before, partitions=partitions
        )
        return order_fairly(found, weights)

    async def _tenant_weights(self) -> dict[str, int]:
        now = self._monotonic()
        if self._read_at is None or now - self._read_at > self._refresh_s:
            limits = await self._store.tenant_limits()
            self._weights = {name: lim.weight or 1 for name, lim in limits.items()}
            self._read_at = now
        return self._weights


def level_limits(
    counts: Mapping[Level, int], weights: Mapping[str, int], batch: int
) -> dict[Level, int]:
    """How many to read of each (tenant, priority) level: each tenant's fair share of `batch`
    (by its total due), spent on its highest priority levels first."""
    due: dict[str, int] = {}
    for (tenant, _priority), count in counts.items():
        due[tenant] = due.get(tenant, 0) + count
    shares = fair_shares(due, weights, batch)
    wanted: dict[Level, int] = {}
    for level in sorted(counts, key=lambda lv: (lv[0], -lv[1])):
        tenant = level[0]
        take = min(counts[level], shares[tenant])
        if take:
            wanted[level] = take
            shares[tenant] -= take
    return wanted


def order_fairly(found: Sequence[DueJob], weights: Mapping[str, int]) -> list[DueJob]:
    """The jobs round-robin across tenants (`weight` per turn), each tenant's highest priority
    first, then earliest."""
    groups: dict[str, list[DueJob]] = {}
    for job in found:
        groups.setdefault(job.tenant, []).append(job)
    for jobs in groups.values():
        jobs.sort(key=lambda j: (-j.priority, j.next_run_at))
    return interleave(groups, weights)
