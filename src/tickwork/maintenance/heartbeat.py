"""A worker's heartbeat: it announces itself in the store, so the cluster view lists it.

Schedulers announce themselves through their partition keeper (scheduler/partitions.py), whose
heartbeat is also their membership. A worker process runs this service instead: every third of
`ttl_ms` it upserts its row in `tw_nodes` (live until `ttl_ms` after the database's clock) with
what `describe()` says (its queue, the fires it holds, the queue depth it last sampled). At stop
it removes its row (only this role's: in `tickwork up` the scheduler's stays until it leaves).

Each beat also asks which other live nodes are gone (their database sessions are all closed,
ADR 0032). A node judged gone at two beats in a row has its leases ended at once
(`release_leases`, ADR 0035): a dead worker's runs are leased again within about two beats
instead of when their leases run out. One beat is not enough: in a database restart every
session drops, and a live process reconnects within a beat.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tickwork.clock import Clock
from tickwork.domain.partitions import Node, NodeIdentity
from tickwork.store.base import ClaimStore, LeaseStore, NodeAnnouncement

log = logging.getLogger("tickwork.heartbeat")


@dataclass(frozen=True, kw_only=True, slots=True)
class HeartbeatConfig:
    node_id: str
    role: str = "worker"
    ttl_ms: int = 5_000

    def __post_init__(self) -> None:
        if self.ttl_ms < 300:
            raise ValueError("ttl_ms must be at least 300 ms (three beats per TTL)")


class HeartbeatStore(ClaimStore, LeaseStore, Protocol):
    """What the heartbeat uses: the node rows (ClaimStore) and the release of leases."""


class GoneWatch:
    """Which nodes to release the leases of: those judged gone at this beat and the one before.

    Pure: `observe` is given each beat's verdict (store.gone_nodes) and says which nodes were
    gone at both."""

    def __init__(self) -> None:
        self._before: frozenset[str] = frozenset()

    def observe(self, gone: frozenset[str]) -> frozenset[str]:
        confirmed = gone & self._before
        self._before = gone
        return confirmed


class NodeHeartbeat:
    def __init__(
        self,
        store: HeartbeatStore,
        identity: NodeIdentity,
        config: HeartbeatConfig,
        describe: Callable[[], dict[str, object]] = dict,
        *,
        clock: Clock,
    ) -> None:
        self._store = store
        self._identity = identity
        self._config = config
        self._describe = describe
        self._clock = clock
        self._gone = GoneWatch()

    async def run_once(self) -> list[Node]:
        """Announce this node once, and end the leases of the nodes gone since the last beat
        (`_release_gone`); returns the live nodes."""
        nodes = await self._announce()
        await self._release_gone(nodes)
        return nodes

    async def _release_gone(self, nodes: list[Node]) -> int:
        """End the leases of the live `nodes` (other than this one) that the store judged gone
        at this beat and the last; returns how many leases ended."""
        others = {node.id for node in nodes} - {self._config.node_id}
        gone = await self._store.gone_nodes(others) if others else frozenset()
        confirmed = self._gone.observe(gone)
        if not confirmed:
            return 0
        released = await self._store.release_leases(confirmed, now=self._clock.now())
        if released:
            log.warning(
                "leases of gone nodes released",
                extra={"action": "leases_released", "nodes": sorted(confirmed), "runs": released},
            )
        return released

    async def _announce(self) -> list[Node]:
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
