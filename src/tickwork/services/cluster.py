"""The cluster view: who schedules and works, which partitions each holds, how far behind.

`ClusterService.view()` reads the store (nodes, partition leases, per-partition lag, the
queue's waiting fires) with one clock reading and `assemble` turns that into a `ClusterView`, a
pure function of what was read. The API answers `GET /v1/cluster` with it and
`tickwork cluster` shows it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from tickwork.clock import Clock
from tickwork.domain.partitions import Node, PartitionLease
from tickwork.store.base import ScheduleStore

__all__ = [
    "ClusterService",
    "ClusterView",
    "PartitionView",
    "QueueView",
    "SchedulerView",
    "WorkerView",
    "assemble",
]

TABLE_QUEUE = "table"


@dataclass(frozen=True, kw_only=True, slots=True)
class SchedulerView:
    id: str
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    partitions: Mapping[int, int]  # partition -> epoch, of the live leases it holds
    last_renewal: datetime | None  # the latest renewal of any lease it holds
    fires_last_minute: int


@dataclass(frozen=True, kw_only=True, slots=True)
class WorkerView:
    id: str
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    queue: str  # "table", "nats" or "redis"
    in_flight: int  # fires held: waiting for their instant, ready or running


@dataclass(frozen=True, kw_only=True, slots=True)
class QueueView:
    name: str
    depth: int | None  # fires waiting for a worker (None: no worker reported it yet)
    oldest_waiting_s: float  # how long the longest-waiting leasable fire has waited (0: none)


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionView:
    partition: int
    owner: str | None  # None: nobody holds it (its jobs fire by takeover)
    epoch: int
    lag_s: float  # now minus its oldest due job nobody has claimed (0: none)


@dataclass(frozen=True, kw_only=True, slots=True)
class ClusterView:
    now: datetime
    partition_count: int
    schedulers: tuple[SchedulerView, ...]
    workers: tuple[WorkerView, ...]
    queues: tuple[QueueView, ...]
    partitions: tuple[PartitionView, ...]

    @property
    def unowned(self) -> int:
        return sum(p.owner is None for p in self.partitions)

    @property
    def max_lag_s(self) -> float:
        return max((p.lag_s for p in self.partitions), default=0.0)


def assemble(
    *,
    now: datetime,
    partition_count: int,
    nodes: Sequence[Node],
    leases: Sequence[PartitionLease],
    leases_read_at: datetime,
    lags: Mapping[int, datetime],
    table_depth: int,
    oldest_leasable: datetime | None,
) -> ClusterView:
    """The view, from what the store said at `now`. A lease counts while unexpired at
    `leases_read_at`, the database's clock when it was read (leases expire by that clock)."""
    live = {
        le.partition: le for le in leases if le.owner is not None and le.expires_at > leases_read_at
    }
    schedulers = tuple(
        _scheduler(n, [le for le in live.values() if le.owner == n.id])
        for n in nodes
        if n.role == "scheduler"
    )
    workers = tuple(_worker(n) for n in nodes if n.role == "worker")
    waited = 0.0 if oldest_leasable is None else max((now - oldest_leasable).total_seconds(), 0)
    partitions = tuple(
        PartitionView(
            partition=le.partition,
            owner=live[le.partition].owner if le.partition in live else None,
            epoch=le.epoch,
            lag_s=_lag(now, lags.get(le.partition)),
        )
        for le in leases
    )
    return ClusterView(
        now=now,
        partition_count=partition_count,
        schedulers=schedulers,
        workers=workers,
        queues=_queues(workers, nodes, table_depth, waited),
        partitions=partitions,
    )


def _scheduler(node: Node, held: Sequence[PartitionLease]) -> SchedulerView:
    renewals = [le.renewed_at for le in held if le.renewed_at is not None]
    return SchedulerView(
        id=node.id,
        host=node.host,
        pid=node.pid,
        version=node.version,
        started_at=node.started_at,
        heartbeat_at=node.heartbeat_at,
        partitions={le.partition: le.epoch for le in sorted(held, key=lambda le: le.partition)},
        last_renewal=max(renewals, default=None),
        fires_last_minute=_int(node.info.get("fires_last_minute")),
    )


def _worker(node: Node) -> WorkerView:
    return WorkerView(
        id=node.id,
        host=node.host,
        pid=node.pid,
        version=node.version,
        started_at=node.started_at,
        heartbeat_at=node.heartbeat_at,
        queue=str(node.info.get("queue", TABLE_QUEUE)),
        in_flight=_int(node.info.get("in_flight")),
    )


def _queues(
    workers: Sequence[WorkerView], nodes: Sequence[Node], table_depth: int, waited_s: float
) -> tuple[QueueView, ...]:
    """One entry per queue the workers use (the table queue when none is running): its depth
    as the store counts it (table) or as its workers last sampled it (NATS, Redis), and the
    wait of the oldest fire any worker could lease now, which the store knows for every queue."""
    names = sorted({w.queue for w in workers}) or [TABLE_QUEUE]
    reported: dict[str, int] = {}
    for node in nodes:
        depth = node.info.get("queue_depth")
        if node.role == "worker" and isinstance(depth, int):
            name = str(node.info.get("queue", TABLE_QUEUE))
            reported[name] = max(reported.get(name, 0), depth)
    return tuple(
        QueueView(
            name=name,
            depth=table_depth if name == TABLE_QUEUE else reported.get(name),
            oldest_waiting_s=round(waited_s, 3),
        )
        for name in names
    )


def _lag(now: datetime, oldest_due: datetime | None) -> float:
    return 0.0 if oldest_due is None else round(max((now - oldest_due).total_seconds(), 0.0), 3)


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


class ClusterService:
    def __init__(self, store: ScheduleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def view(self) -> ClusterView:
        now = self._clock.now()
        nodes = await self._store.list_nodes()
        leases = await self._store.partition_leases()
        return assemble(
            now=now,
            partition_count=self._store.partition_count(),
            nodes=nodes,
            leases=leases.leases,
            leases_read_at=leases.now,
            lags={p: h.due_at for p, h in (await self._store.partition_heads(now)).items()},
            table_depth=await self._store.leasable_runs(now),
            oldest_leasable=await self._store.oldest_leasable_at(now),
        )
