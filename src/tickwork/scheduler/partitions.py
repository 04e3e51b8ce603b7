"""The partition keeper: the leases a scheduler holds on its share of the job space.

Each round (every third of the lease TTL, or at once when the cluster changes):

1. announce this scheduler (its node row, alive for one TTL by the database's clock) and read
   the live members;
2. read every partition's lease and compute, with every other member's same pure function
   (`assignment.plan_assignment`), which partitions this scheduler should hold;
3. in one transaction: renew what it keeps (at the epoch it holds: a lease that changed hands
   is not renewed), release what it should give up, take what is free (epoch + 1).

The scheduler claims only partitions `held_now()` returns. A lease counts as held until the
round that renewed it started plus 90 % of the TTL by this process's monotonic clock: the
database set the expiry at TTL after its own clock read, later than that start, so a scheduler
that cannot renew (the database is unreachable, the process was paused) stops claiming before
its lease can expire and belong to someone else. The store's claim checks the epoch anyway, by
the database's clock: the keeper's deadline is the first line, not the only one.

`leave()` (an orderly shutdown, SIGTERM) forgets the node and releases every lease in one
transaction and wakes the other schedulers, which take the partitions over at once.

On SQLite (`exclusive=True`), one process holds every partition: a second live scheduler is
refused with a clear error, since several schedulers need PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from tickwork import metrics
from tickwork.clock import Clock
from tickwork.domain.partitions import Node, NodeIdentity, PartitionLease
from tickwork.errors import InvalidInput
from tickwork.scheduler.assignment import moves, plan_assignment
from tickwork.store.base import ClaimStore, LeaseView, NodeAnnouncement, StoreLifecycle
from tickwork.timing.outage import outage_pause_s
from tickwork.waiting import first_of

log = logging.getLogger("tickwork.partitions")

SCHEDULER = "scheduler"
SAFETY = 0.9  # a lease counts as held for this share of its TTL after its round started


class KeeperStore(ClaimStore, StoreLifecycle, Protocol):
    """What the keeper needs of the store: the partition leases, the nodes, change notices."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KeeperConfig:
    node_id: str
    lease_ttl_ms: int = 5_000
    exclusive: bool = False  # hold every partition, and refuse a second scheduler (SQLite)
    # Fault injection (tests only): `held_now()` keeps answering the first partitions and
    # epochs this keeper held, whatever happens since, like a scheduler whose view went stale;
    # the store's epoch check is then all that stands between it and a double claim.
    frozen_view: bool = False

    def __post_init__(self) -> None:
        if self.lease_ttl_ms < 300:
            raise ValueError("lease_ttl_ms must be at least 300 ms (three renewals per TTL)")

    @property
    def renew_every_s(self) -> float:
        return self.lease_ttl_ms / 3000


@dataclass(frozen=True, kw_only=True, slots=True)
class KeeperRound:
    """What one round did."""

    held: Mapping[int, int]  # partition -> epoch, after the round
    acquired: frozenset[int] = frozenset()
    released: frozenset[int] = frozenset()
    lost: frozenset[int] = frozenset()  # held before, not renewed (taken over meanwhile)
    members: tuple[str, ...] = ()  # the live schedulers, this one included


@dataclass(slots=True)
class _Held:
    epochs: dict[int, int] = field(default_factory=dict)
    valid_until: float = 0.0  # by clock.monotonic_s()


class PartitionKeeper:
    def __init__(
        self,
        store: KeeperStore,
        clock: Clock,
        config: KeeperConfig,
        identity: NodeIdentity,
    ) -> None:
        self._store = store
        self._clock = clock
        self._config = config
        self._identity = identity
        # What the heartbeat tells the cluster view about this scheduler (set by its owner).
        self.describe: Callable[[], dict[str, object]] = dict
        self._held = _Held()
        self._conflict_since: float | None = None  # exclusive mode: another scheduler seen since
        self._frozen: dict[int, int] | None = None  # the view a frozen_view keeper keeps
        self._lag_labels: set[int] = set()  # partitions with a lag gauge of this process
        self._leases: dict[int, PartitionLease] = {}  # every partition's, as of the last round
        self.changed = asyncio.Event()  # set when the partitions held change (a new scan floor)

    @property
    def lease_ttl_s(self) -> float:
        return self._config.lease_ttl_ms / 1000

    def held_now(self) -> Mapping[int, int]:
        """The partitions this scheduler may claim now, with their epochs (empty once the
        leases could have expired: see the module docstring)."""
        if self._config.frozen_view and self._frozen is not None:
            return self._frozen
        if self._clock.monotonic_s() >= self._held.valid_until:
            return {}
        return self._held.epochs

    def not_held(self) -> list[int]:
        """The partitions this scheduler does not hold now (where it looks for overdue work)."""
        held = self.held_now()
        return [p for p in range(self._store.partition_count()) if p not in held]

    def foreign_leases(self) -> dict[int, PartitionLease | None]:
        """The partitions this scheduler does not hold now, each with its lease as of the last
        round (None: not known, or still marked as this scheduler's own, which it no longer
        holds): where a takeover looks, and whose owner it watches."""
        me = self._config.node_id
        found = {p: self._leases.get(p) for p in self.not_held()}
        return {p: None if le is None or le.owner == me else le for p, le in found.items()}

    async def run_once(self) -> KeeperRound:
        """One round: announce, read, compute the share, renew / release / acquire."""
        started = self._clock.monotonic_s()
        nodes = await self._store.heartbeat_node(self._announce(), ttl_ms=self._config.lease_ttl_ms)
        members = _schedulers(nodes, self._config.node_id)
        if self._config.exclusive and len(members) > 1:
            if not self._held.epochs:
                return self._wait_for_the_other(members, started)
            members = [self._config.node_id]  # the one holding them keeps every partition
        self._conflict_since = None
        view = await self._store.partition_leases()
        holders = _live_holders(view)
        partitions = self._store.partition_count()
        target = plan_assignment(partitions, members, holders)[self._config.node_id]
        mine = {le.partition: le.epoch for le in view.leases if le.owner == self._config.node_id}
        keep, release, acquire = moves(self._config.node_id, target, mine, holders)
        after = await self._store.update_partition_leases(
            self._config.node_id,
            renew={p: mine[p] for p in keep},
            release=release,
            acquire=acquire,
            ttl_ms=self._config.lease_ttl_ms,
        )
        self._remember(view, after, release)
        done = self._settle(after, started, release, members)
        await self._report_lag(done.held)
        return done

    async def _report_lag(self, held: Mapping[int, int]) -> None:
        """`tickwork_partition_lag_seconds` for the partitions this scheduler holds (a label
        per partition; the labels of partitions given up are removed)."""
        now = self._clock.now()
        heads = await self._store.partition_heads(now, held) if held else {}
        for partition in self._lag_labels - set(held):
            metrics.PARTITION_LAG.remove(str(partition))
        for partition in held:
            head = heads.get(partition)
            lag = 0.0 if head is None else max((now - head.due_at).total_seconds(), 0.0)
            metrics.PARTITION_LAG.labels(partition=str(partition)).set(lag)
        self._lag_labels = set(held)

    def _remember(self, view: LeaseView, after: LeaseView, released: frozenset[int]) -> None:
        """Every lease as the round left it: the view it read, with its own changes."""
        leases = {le.partition: le for le in view.leases}
        for partition in released:
            if partition in leases:
                leases[partition] = replace(leases[partition], owner=None)
        leases.update((le.partition, le) for le in after.leases)
        self._leases = leases

    def _announce(self) -> NodeAnnouncement:
        me = self._identity
        info = self.describe() | {"partitions": dict(sorted(self.held_now().items()))}
        return NodeAnnouncement(
            id=self._config.node_id,
            role=SCHEDULER,
            host=me.host,
            pid=me.pid,
            version=me.version,
            started_at=me.started_at,
            info=info,
        )

    async def start(self) -> KeeperRound:
        """The first rounds, before the scheduler starts: on SQLite, wait out (or refuse) a
        scheduler that is still listed; elsewhere one round."""
        while True:
            done = await self.run_once()
            if not self._config.exclusive or self._conflict_since is None:
                return done
            await asyncio.sleep(self._config.renew_every_s)

    def _wait_for_the_other(self, members: list[str], started: float) -> KeeperRound:
        """Exclusive mode, holding nothing, met another live scheduler: one that crashed a
        moment ago is still listed until its heartbeat expires, so wait for it to go; one still
        there after 1.5 TTL is a second scheduler, which SQLite cannot share partitions with.
        (The one that holds the partitions ignores a newcomer: the newcomer is refused.)"""
        others = ", ".join(m for m in members if m != self._config.node_id)
        if self._conflict_since is None:
            self._conflict_since = started
            log.warning(
                "another scheduler (%s) is listed on this database; waiting for it to go",
                others,
                extra={"action": "scheduler_conflict"},
            )
        if started - self._conflict_since > 1.5 * self._config.lease_ttl_ms / 1000:
            raise InvalidInput(
                "database_url",
                f"another scheduler ({others}) uses this SQLite database; several schedulers "
                "need PostgreSQL (postgresql://...): run one scheduler on SQLite",
            )
        return KeeperRound(held=self.held_now(), members=tuple(members))

    def _settle(
        self, after: LeaseView, started: float, released: frozenset[int], members: list[str]
    ) -> KeeperRound:
        before = self._held.epochs
        held = {
            le.partition: le.epoch
            for le in after.leases
            if le.owner == self._config.node_id and le.expires_at > after.now
        }
        self._held = _Held(
            epochs=held,
            valid_until=started + SAFETY * self._config.lease_ttl_ms / 1000,
        )
        if held != before:
            self.changed.set()
        if self._config.frozen_view and self._frozen is None and held:
            self._frozen = dict(held)
        metrics.PARTITIONS_OWNED.set(len(held))
        lost = frozenset(before) - frozenset(held) - released
        if lost:
            log.warning(
                "lost %d partition leases to another scheduler",
                len(lost),
                extra={"action": "partitions_lost", "partitions": sorted(lost)},
            )
        acquired = frozenset(held) - frozenset(before)
        if acquired:
            log.info(
                "took %d partitions",
                len(acquired),
                extra={"action": "partitions_taken", "partitions": sorted(acquired)},
            )
        return KeeperRound(
            held=held, acquired=acquired, released=released, lost=lost, members=tuple(members)
        )

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the leases until `stop`: a round every third of the TTL, and at once when the
        cluster changes (a scheduler joined, left or released partitions). Then leave: the
        others take the partitions over at once."""
        try:
            await self._keep(stop)
        finally:
            with contextlib.suppress(Exception):  # a store that is down: the leases expire
                await self.leave()

    async def _keep(self, stop: asyncio.Event) -> None:
        cluster_changed = self._store.watch("cluster")
        failures = 0
        while not stop.is_set():
            cluster_changed.clear()
            try:
                await self.run_once()
            except InvalidInput:
                raise  # a second scheduler on SQLite: the process must not go on
            except Exception:
                failures += 1
                if failures == 1:
                    log.exception("partition lease round failed", extra={"action": "lease_failed"})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), outage_pause_s(failures))
                continue
            failures = 0
            await first_of([cluster_changed, stop], self._config.renew_every_s)

    async def leave(self) -> None:
        """Release every partition and forget this node, at once (an orderly shutdown)."""
        self._held = _Held()
        metrics.PARTITIONS_OWNED.set(0)
        await self._store.leave(self._config.node_id)


def _schedulers(nodes: list[Node], me: str) -> list[str]:
    ids = {n.id for n in nodes if n.role == SCHEDULER}
    ids.add(me)  # a heartbeat that just committed may not be in the read that followed it
    return sorted(ids)


def _live_holders(view: LeaseView) -> dict[int, str | None]:
    """Who holds each partition now: an expired lease is held by nobody."""
    return {
        le.partition: le.owner if le.owner is not None and le.expires_at > view.now else None
        for le in view.leases
    }
