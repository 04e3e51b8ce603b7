"""A worker's heartbeat: it announces itself in the store, so the cluster view lists it.

Schedulers announce themselves through their partition keeper (scheduler/partitions.py), whose
heartbeat is also their membership. A worker process runs this service instead: every third of
`ttl_ms` it upserts its row in `tw_nodes` (live until `ttl_ms` after the database's clock) with
what `describe()` says (its queue, the fires it holds, the queue depth it last sampled). At stop
it removes its row (only this role's: in `tickwork up` the scheduler's stays until it leaves).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from tickwork.domain.partitions import Node, NodeIdentity
from tickwork.store.base import ClaimStore, NodeAnnouncement

log = logging.getLogger("tickwork.heartbeat")


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatConfig:
    node_id: str
    role: str = "worker"
    ttl_ms: int = 5_000

    def __post_init__(self) -> None:
        if self.ttl_ms < 300:
            raise ValueError("ttl_ms must be at least 300 ms (three beats per TTL)")


class NodeHeartbeat:
    def __init__(
        self,
        store: ClaimStore,
        identity: NodeIdentity,
        config: HeartbeatConfig,
        describe: Callable[[], dict[str, object]] = dict,
    ) -> None:
        self._store = store
        self._identity = identity
        self._config = config
        self._describe = describe

    async def run_once(self) -> list[Node]:
        """Announce this node once; returns the live nodes."""
        me = self._identity
        node = NodeAnnouncement(
            id=self._config.node_id,
            role=self._config.role,
            host=me.host,
            pid=me.pid,
            version=me.version,
            started_at=me.started_at,
            info=self._describe(),
        )
        return await self._store.heartbeat_node(node, ttl_ms=self._config.ttl_ms)

    async def run(self, stop: asyncio.Event) -> None:
        """Beat until `stop`, then leave. A failed beat is logged and tried again next time:
        the row only feeds the cluster view, nothing on the fire path waits for it."""
        try:
            while not stop.is_set():
                try:
                    await self.run_once()
                except Exception:
                    log.warning("heartbeat failed", exc_info=True, extra={"action": "beat_failed"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._config.ttl_ms / 3000)
        finally:
            with contextlib.suppress(Exception):
                await self._store.forget_node(self._config.node_id, self._config.role)
