"""The due scan of a scheduler that is behind: the batch shared fairly among tenants.

A tick that keeps up reads the due jobs in time order (`ScheduleStore.due_jobs`): everything
due is claimed, so order does not matter. A tick that is behind (its scan came back full: more
is due within the look-ahead than one batch holds, now or in the next few hundred milliseconds)
would, in time order, spend whole batches on one tenant's backlog while another tenant's
on-time fires wait behind it: tenant A's million one-shots due at 12:00:00 would delay tenant
B's every-second jobs until they drain. Behind, the scheduler reads instead:

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
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime

from tickwork.scheduler.fairness import fair_shares, interleave
from tickwork.store.base import DueJob, Level, ScheduleStore
from tickwork.timing.pacing import FireBucket

__all__ = ["FairScan", "level_limits", "order_fairly"]


class FairScan:
    def __init__(
        self,
        store: ScheduleStore,
        *,
        refresh_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        share: Callable[[], float] = lambda: 1.0,
    ) -> None:
        """`share`: the part of the cluster's fires this scheduler claims (its partitions' part,
        1.0 alone): each tenant's `max_fires_per_s` is paced here at that part of it."""
        self._store = store
        self._refresh_s = refresh_s
        self._monotonic = monotonic
        self._share = share
        self._weights: dict[str, int] = {}
        self._rates: dict[str, float] = {}  # tenants with max_fires_per_s
        self._buckets: dict[str, FireBucket] = {}
        self._since: dict[str, datetime] = {}  # tenants held back by their rate, since when
        self._read_at: float | None = None
        self.behind = False  # more is due than a batch, or than a tenant's rate allows

    async def refresh(self) -> None:
        """Read the tenants' weights and rates if the last read is `refresh_s` old."""
        now = self._monotonic()
        if self._read_at is not None and now - self._read_at <= self._refresh_s:
            return
        limits = await self._store.tenant_limits()
        self._weights = {name: lim.share for name, lim in limits.items()}
        self._rates = {
            name: lim.max_fires_per_s
            for name, lim in limits.items()
            if lim.max_fires_per_s is not None
        }
        for gone in set(self._buckets) - set(self._rates):
            del self._buckets[gone]
            self._since.pop(gone, None)
        self._read_at = now

    def notice(self, due: Sequence[DueJob], batch: int) -> None:
        """After a time-ordered scan: behind when it came back full (more is due within the
        look-ahead than a batch holds, whether or not its instant has come yet), or with more
        of a tenant's jobs than its rate lets through now."""
        # A full batch of jobs not yet due counts too: in time order, a herd due in 150 ms
        # would fill every batch until its instant and push another tenant's fires due just
        # after it behind the whole herd.
        self.behind = len(due) >= batch
        if self._rates and not self.behind:
            taken = Counter(job.tenant for job in due if job.tenant in self._rates)
            self.behind = any(count > self._tokens(t) for t, count in taken.items())

    async def scan(
        self,
        until: datetime,
        batch: int,
        *,
        not_before: datetime | None,
        partitions: Collection[int] | None,
        now: datetime,
    ) -> list[DueJob]:
        """The next batch, shared among the tenants with due work, no tenant beyond what its
        rate lets through; clears `behind` when less than a batch is due and no tenant waits
        for its rate."""
        await self.refresh()
        weights = self._weights
        counts = await self._store.due_counts(
            until, sorted(weights), batch, not_before=not_before, partitions=partitions
        )
        allowed = self._within_rates(counts, now)
        self.behind = sum(allowed.values()) >= batch or bool(self._since)
        if len(allowed) <= 1 and allowed == counts:  # one level, no rate: in time order
            return await self._store.due_jobs(
                until, batch, not_before=not_before, partitions=partitions
            )
        wanted = level_limits(allowed, weights, batch)
        found = await self._store.due_jobs_by_level(
            until, wanted, not_before=not_before, partitions=partitions
        )
        return order_fairly(found, weights)

    def _within_rates(self, counts: Mapping[Level, int], now: datetime) -> dict[Level, int]:
        """`counts` with each rate-limited tenant's cut to the tokens its rate left (highest
        priority first), and which tenants wait for their rate (`_since`) brought up to date."""
        if not self._rates:
            return dict(counts)
        due_by_tenant = Counter[str]()
        for (tenant, _priority), count in counts.items():
            due_by_tenant[tenant] += count
        left = {t: self._tokens(t) for t in due_by_tenant if t in self._rates}
        allowed: dict[Level, int] = {}
        for level in sorted(counts, key=lambda lv: (lv[0], -lv[1])):
            tenant, count = level[0], counts[level]
            take = count if tenant not in left else min(count, left[tenant])
            if tenant in left:
                left[tenant] -= take
            if take:
                allowed[level] = take
        for tenant in self._rates:
            if due_by_tenant.get(tenant, 0) > self._tokens(tenant):
                self._since.setdefault(tenant, now)  # its work is left behind for its rate
            else:
                self._since.pop(tenant, None)
        return allowed

    def _tokens(self, tenant: str) -> int:
        """How many of `tenant`'s jobs its rate lets through now (a large number without)."""
        rate = self._rates.get(tenant)
        if rate is None:
            return 2**31
        at = self._monotonic()
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = FireBucket(rate=rate * self._share(), at_s=at)
        bucket.set_rate(rate * self._share(), at)
        return bucket.available(at)

    def spend(self, tenants: Sequence[str]) -> None:
        """Take a token per occurrence claimed from its rate-limited tenant's bucket."""
        if not self._rates:
            return
        at = self._monotonic()
        for tenant, count in Counter(t for t in tenants if t in self._buckets).items():
            self._buckets[tenant].take(count, at)

    def held_since(self, tenant: str) -> datetime | None:
        """Since when `tenant`'s due work has waited for its rate (None: it does not)."""
        return self._since.get(tenant)

    def wait_s(self) -> float | None:
        """How long until a tenant waiting for its rate has a quarter of its bucket back (a
        handful of fires, not one); None when no tenant waits."""
        at = self._monotonic()
        waits = [
            bucket.wait_s(max(1, int(bucket.capacity / 4)), at)
            for tenant, bucket in self._buckets.items()
            if tenant in self._since
        ]
        return min(waits) if waits else None


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
