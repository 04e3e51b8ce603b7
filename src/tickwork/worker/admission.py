"""Which due fire starts next: execution slots, per-host and per-tenant caps (ADR 0023).

Pure bookkeeping, no I/O and no clock: the executor (worker/executor.py) parks every due fire
here and asks for the next one whenever a slot of its pool may be free.

* Two pools of slots. Webhooks are awaited sockets, so a worker holds many at once cheaply;
  Python tasks may run in threads and get a pool of their own. A fire of one pool never waits
  for a slot of the other.
* A lane is what a fire shares its caps with: its pool, its tenant and, for a webhook, its
  target's origin (scheme, host, port). A tenant holds at most `tenant_cap` slots of a pool
  and an origin at most `host_cap`, so a hanging endpoint holds at most `host_cap` slots and
  a flooding tenant at most its share, whatever else is due.
* The caps are hard, not "only while others wait": a slot taken by a fire that then hangs is
  held until its timeout (nothing preempts it), so a cap that lifts while others are idle
  would let the first tenant hold every slot when the second one's fires arrive.
* A tenant's `max_concurrent_runs` (ADR 0024), when it has one, caps its fires across both
  pools (`set_run_caps`). The lease statements enforce it across the cluster; here it bounds
  the fires an in-process claim (`tickwork up`) leased to this executor, which no lease
  statement counted before they came.
* Order among startable fires: first attempts before retries; then the tenant served least
  recently in this pool (round-robin across tenants); within a tenant the oldest instant, then
  the first parked. A retry has already had its turn; an on-time fire that waits behind it
  becomes late, the retry was late anyway (its backoff just ended). Round-robin, because the
  caps bind only on fires in flight: a task that completes without suspending is never in
  flight for long, so one tenant's thousands of parked fires (a backlog, older instants) would
  otherwise all start before another tenant's fire that came due meanwhile (ADR 0026).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Generic, TypeVar
from urllib.parse import urlsplit

__all__ = ["Admission", "Lane", "Pool", "PoolLimits", "origin_of", "tenant_cap"]

T = TypeVar("T")

_DEFAULT_PORTS = {"http": 80, "https": 443}


class Pool(StrEnum):
    WEBHOOK = "webhook"
    TASK = "task"


@dataclass(frozen=True, slots=True)
class Lane:
    """The caps a fire counts against: its pool's slots, its tenant's share of them and, for
    a webhook, its target origin's (`host` None: no host cap, as for Python tasks)."""

    pool: Pool
    tenant: str
    host: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolLimits:
    slots: int  # fires of this pool running at once
    tenant_cap: int  # of those, at most this many of one tenant
    host_cap: int | None = None  # and at most this many to one origin (None: no cap)

    def __post_init__(self) -> None:
        if self.slots < 1 or not 1 <= self.tenant_cap <= self.slots:
            raise ValueError("slots must be positive and tenant_cap within 1..slots")
        if self.host_cap is not None and self.host_cap < 1:
            raise ValueError("host_cap must be positive (None: no cap)")


def tenant_cap(slots: int, share: float) -> int:
    """A tenant's cap in a pool of `slots` when it may hold `share` (0 < share <= 1) of them:
    rounded up, so that a tenant may always run at least one fire."""
    if not 0 < share <= 1:
        raise ValueError("share must be more than 0 and at most 1")
    return max(1, math.ceil(slots * share))


@functools.lru_cache(maxsize=4096)
def origin_of(url: str) -> str:
    """The origin a webhook URL names, as the host cap keys it: `scheme://host:port`, with
    the scheme's default port filled in, so `http://a/` and `http://a:80/x` share a cap while
    two services on one host at different ports do not (they are different servers)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:  # a malformed port: the runner reports it; it still gets a cap
        port = None
    host = (parts.hostname or "").lower()
    return f"{scheme}://{host}:{port or _DEFAULT_PORTS.get(scheme, 0)}"


_Entry = tuple[bool, datetime, int, T]  # retry?, instant, arrival, item: a heap's order


@dataclass(slots=True)
class _Counts:
    running: dict[Pool, int] = field(default_factory=dict)
    by_tenant: dict[tuple[Pool, str], int] = field(default_factory=dict)
    by_host: dict[str, int] = field(default_factory=dict)
    by_tenant_total: dict[str, int] = field(default_factory=dict)  # both pools


class Admission(Generic[T]):
    """Parked fires (any item `T`) by lane, and how many of each pool, tenant and origin run.

    `park` an item when it is due; `take(pool)` starts the best startable one (counting it as
    running) or returns None; `done(lane)` when it finishes. Choosing scans the lanes that
    have parked items, one heap head each: lanes are (tenant, origin) pairs, few next to the
    fires they hold."""

    def __init__(self, limits: dict[Pool, PoolLimits]) -> None:
        self._limits = limits
        self._lanes: dict[Lane, list[_Entry[T]]] = {}
        self._counts = _Counts()
        self._arrival = itertools.count()
        self._parked = 0
        self._run_caps: dict[str, int] = {}  # tenant -> max_concurrent_runs, across pools
        self._turn = itertools.count()
        self._served: dict[tuple[Pool, str], int] = {}  # (pool, tenant) -> its last turn

    def set_run_caps(self, caps: dict[str, int]) -> None:
        """The tenants' `max_concurrent_runs` from now on (those absent: none). Fires already
        running stay; a cap that rose may make parked fires startable (`take` again)."""
        self._run_caps = dict(caps)

    @property
    def parked(self) -> int:
        """Items parked, whatever holds them back (a full pool or a cap)."""
        return self._parked

    def running(self, pool: Pool) -> int:
        return self._counts.running.get(pool, 0)

    def park(self, item: T, lane: Lane, *, instant: datetime, retry: bool) -> None:
        entry = (retry, instant, next(self._arrival), item)
        heapq.heappush(self._lanes.setdefault(lane, []), entry)
        self._parked += 1

    def take(self, pool: Pool) -> tuple[T, Lane] | None:
        """The startable item of `pool` that goes first, now counted as running (None: the
        pool is full, or every parked item of it is held back by a cap)."""
        if self.running(pool) >= self._limits[pool].slots:
            return None
        best: Lane | None = None
        first: tuple[bool, int, datetime, int] | None = None
        served = self._served
        for lane, heap in self._lanes.items():
            if lane.pool is not pool or self._capped(lane):
                continue
            retry, instant, arrival = heap[0][:3]
            head = (retry, served.get((pool, lane.tenant), -1), instant, arrival)
            if first is None or head < first:
                best, first = lane, head
        if best is None:
            return None
        served[(pool, best.tenant)] = next(self._turn)
        heap = self._lanes[best]
        item = heapq.heappop(heap)[3]
        if not heap:
            del self._lanes[best]
        self._parked -= 1
        self._count(best, +1)
        return item, best

    def done(self, lane: Lane) -> None:
        """An item taken from `lane` finished: its slot and its share of the caps are free."""
        self._count(lane, -1)

    def held_by_caps(self) -> int:
        """Parked items that a tenant or host cap holds back (not merely a full pool): what a
        tenant's flood or a hanging origin leaves waiting here (the parked gauge, the
        executor's backlog rule)."""
        return sum(len(heap) for lane, heap in self._lanes.items() if self._capped(lane))

    def _capped(self, lane: Lane) -> bool:
        limits = self._limits[lane.pool]
        counts = self._counts
        if counts.by_tenant.get((lane.pool, lane.tenant), 0) >= limits.tenant_cap:
            return True
        cap = self._run_caps.get(lane.tenant)
        if cap is not None and counts.by_tenant_total.get(lane.tenant, 0) >= cap:
            return True
        return (
            lane.host is not None
            and limits.host_cap is not None
            and counts.by_host.get(lane.host, 0) >= limits.host_cap
        )

    def _count(self, lane: Lane, step: int) -> None:
        counts = self._counts
        counts.running[lane.pool] = counts.running.get(lane.pool, 0) + step
        tenant = (lane.pool, lane.tenant)
        counts.by_tenant[tenant] = counts.by_tenant.get(tenant, 0) + step
        if not counts.by_tenant[tenant]:
            del counts.by_tenant[tenant]  # tenants come and go: keep only those running
        total = counts.by_tenant_total.get(lane.tenant, 0) + step
        if total:
            counts.by_tenant_total[lane.tenant] = total
        else:
            counts.by_tenant_total.pop(lane.tenant, None)
        if lane.host is not None:
            counts.by_host[lane.host] = counts.by_host.get(lane.host, 0) + step
            if not counts.by_host[lane.host]:
                del counts.by_host[lane.host]
