"""GET /v1/cluster: the cluster view's response schema and its route."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from tickwork.api.routes import ERROR_RESPONSES
from tickwork.api.schemas import InstantOut
from tickwork.clock import utc_iso
from tickwork.services.cluster import (
    ClusterService,
    ClusterView,
    PartitionView,
    QueueView,
    SchedulerView,
    WorkerView,
)

router = APIRouter(responses=ERROR_RESPONSES)


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SchedulerOut(_Output):
    id: str = Field(description="host:pid, or the node id it was given")
    host: str
    pid: int
    version: str
    started_at: InstantOut
    last_heartbeat: InstantOut
    partitions: dict[str, int] = Field(description="partition -> epoch of each lease it holds")
    last_renewal: InstantOut | None
    fires_last_minute: int

    @classmethod
    def of(cls, s: SchedulerView) -> SchedulerOut:
        return cls(
            id=s.id,
            host=s.host,
            pid=s.pid,
            version=s.version,
            started_at=utc_iso(s.started_at),
            last_heartbeat=utc_iso(s.heartbeat_at),
            partitions={str(p): e for p, e in s.partitions.items()},
            last_renewal=None if s.last_renewal is None else utc_iso(s.last_renewal),
            fires_last_minute=s.fires_last_minute,
        )


class WorkerOut(_Output):
    id: str
    host: str
    pid: int
    version: str
    started_at: InstantOut
    last_heartbeat: InstantOut
    queue: str = Field(description="table, nats or redis")
    in_flight: int = Field(description="fires it holds: waiting for their instant or running")

    @classmethod
    def of(cls, w: WorkerView) -> WorkerOut:
        return cls(
            id=w.id,
            host=w.host,
            pid=w.pid,
            version=w.version,
            started_at=utc_iso(w.started_at),
            last_heartbeat=utc_iso(w.heartbeat_at),
            queue=w.queue,
            in_flight=w.in_flight,
        )


class QueueOut(_Output):
    name: str
    depth: int | None = Field(description="fires waiting for a worker (null: not reported yet)")
    oldest_waiting_s: float = Field(description="how long the oldest waiting fire has waited")

    @classmethod
    def of(cls, q: QueueView) -> QueueOut:
        return cls(name=q.name, depth=q.depth, oldest_waiting_s=q.oldest_waiting_s)


class PartitionOut(_Output):
    partition: int
    owner: str | None = Field(description="null: nobody holds it; its jobs fire by takeover")
    epoch: int
    lag_s: float = Field(description="now minus its oldest due job nobody has claimed")

    @classmethod
    def of(cls, p: PartitionView) -> PartitionOut:
        return cls(partition=p.partition, owner=p.owner, epoch=p.epoch, lag_s=p.lag_s)


class ClusterOut(_Output):
    now: InstantOut
    partition_count: int
    unowned_partitions: int
    max_partition_lag_s: float
    schedulers: list[SchedulerOut]
    workers: list[WorkerOut]
    queues: list[QueueOut]
    partitions: list[PartitionOut]

    @classmethod
    def of(cls, view: ClusterView) -> ClusterOut:
        return cls(
            now=utc_iso(view.now),
            partition_count=view.partition_count,
            unowned_partitions=view.unowned,
            max_partition_lag_s=view.max_lag_s,
            schedulers=[SchedulerOut.of(s) for s in view.schedulers],
            workers=[WorkerOut.of(w) for w in view.workers],
            queues=[QueueOut.of(q) for q in view.queues],
            partitions=[PartitionOut.of(p) for p in view.partitions],
        )


def _service(request: Request) -> ClusterService:
    service: ClusterService = request.app.state.cluster
    return service


@router.get("/cluster", tags=["cluster"], response_model=ClusterOut)
async def cluster(service: Annotated[ClusterService, Depends(_service)]) -> ClusterOut:
    """Every live scheduler and worker, the partitions each holds with their epochs, the queues
    and how long their oldest fire has waited, and each partition's lag."""
    return ClusterOut.of(await service.view())
