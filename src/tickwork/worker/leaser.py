"""The store leaser: feeds the executor with runs leased straight from the store.

Fires reach an executor three ways: from the scheduler of the same process (`tickwork up`),
from an external queue (`QueueConsumer`, worker/consumer.py), or from the store itself, here.
The store is the source of truth, so this service is what no deployment can do without:

* With the table queue it IS the dequeue: a hand-off claim leaves each run unowned, its lease
  free from its instant, and `lease_runs` takes it (fence + 1).
* Everywhere it re-leases orphaned runs: a lease that expired with its holder (a crashed or
  paused worker), a manual trigger, a retry whose backoff is over, a redriven dead letter.
  None of these is ever published to a queue, so it leases them as soon as they are free.
* Behind an external queue it is also the backstop for lost messages: a hand-off that no
  worker has leased yet is taken from the store only once its lease has been free for
  `backstop_delay_ms`, so the queue's consumers come first (`lease_runs`' `hand_offs_by`).
* A lease call can commit and still fail (the connection dies before the reply): its runs are
  then leased to this node at fences it never learned. The next round first takes back this
  node's live leases that its executor does not hold (`take_back_own_leases`, same fence), so
  a lost reply costs one round, not a lease TTL.

It lives in worker/ rather than maintenance/ because on the table queue it is the fire path
itself, not upkeep beside it. It leases when runs change (a NOTIFY from a hand-off, a redrive;
on the table queue only), when a retry it knows of comes due, when the earliest lease it knows
of ends (an expired lease notifies nobody: this is how a dead worker's fires come back within a
lease TTL), and every `scan_interval_ms`; a big batch is followed at once by the next, a small
one waits `pause_ms` so that a busy executor freeing a few slots at a time still leases in
batches.

It leases no more than the executor's room, with one exception: while the room is full, up to
`beyond_room` runs due after the latest instant it handed over (ADR 0029). Before a herd's
instant the room is full of the herd, and another tenant's runs due just after it would wait for
the herd's first fires to finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from tickwork import metrics
from tickwork.clock import Clock
from tickwork.domain.runs import Fire
from tickwork.store.base import LeaseStore, StoreLifecycle
from tickwork.timing.outage import outage_pause_s
from tickwork.waiting import first_of
from tickwork.worker.base import FireSink
from tickwork.worker.lease_timing import DEFAULT_LEASE_TTL_MS

log = logging.getLogger("tickwork.leaser")

LEASE_BATCH = 1000  # runs per lease (or take-back) call
MAX_IDLE_S = 1.0  # the longest sleep without a wake-up
# A round that leased nothing while runs were free (held back by their tenant's
# max_concurrent_runs, or being leased by another worker) waits twice as long each time, up to
# this, instead of leasing again after every pause: a capped tenant's waiting backlog costs each
# worker a lease round per 100 ms, not per 20 ms, and a freed slot waits at most this (ADR 0024).
MAX_BLOCKED_WAIT_MS = 100
# Of a round's room, the part the runs coming due within the look-ahead may take before the
# runs due now (`lease_runs`' `ahead_first`): right after a herd's instant the due runs are
# the herd, and a run of another tenant due a few milliseconds later is leased in the same
# round instead of a round later (ADR 0028).
AHEAD_FIRST_PART = 4


class LeaserStore(LeaseStore, StoreLifecycle, Protocol):
    """What the leaser needs of the store: its leases and its change notices."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaserConfig:
    node_id: str
    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS
    # How often to look for runs nobody is running even when no lease is known to come due:
    # what no notice and no known lease end announces (a retry released by a worker that died
    # before it leased it again). A dead worker's own leases are found when they end.
    scan_interval_ms: int = 2_000
    # With an external queue, hand-offs arrive as messages; the store is only the backstop for
    # a lost message, so a hand-off that no worker has leased yet is taken from the store only
    # once its lease has been free this long. Every other free run (an expired lease, a retry,
    # a manual trigger, a redriven dead letter) is never published: it is leased at once.
    backstop_delay_ms: int = 0
    # Lease runs this early (handed-off fires become leasable at their instant); the fire
    # itself still waits for its instant, so it starts on time instead of a loop tick late.
    lookahead_ms: int = 200
    # After a lease that was not full, wait this long (or for a change notice) before the next:
    # leases of a few runs each (a busy worker freeing slots one by one) stay batched.
    pause_ms: int = 20
    batch: int = LEASE_BATCH
    # Runs that became free this recently are leased before older ones (`lease_runs`'
    # `fresh_from`): a backlog one tenant's burst left in the queue does not delay the runs
    # of others coming due now (ADR 0026). None: strictly in the order they became free.
    fresh_ms: int | None = 100
    # Beyond the executor's room, how many runs due after every fire handed to it so far it may
    # hold at once: a herd leased ahead of its instant fills the room, and a run of another
    # tenant due in the herd's first milliseconds would otherwise wait for the herd's first
    # fires to finish (ADR 0029). 0: never beyond the room.
    beyond_room: int = 64

    def __post_init__(self) -> None:
        if self.batch < 1 or self.lease_ttl_ms < 1 or self.pause_ms < 0:
            raise ValueError("batch and lease_ttl_ms must be positive, pause_ms not negative")
        if self.backstop_delay_ms < 0 or self.beyond_room < 0:
            raise ValueError("backstop_delay_ms and beyond_room must not be negative")


@dataclass(frozen=True, kw_only=True, slots=True)
class LeaseRound:
    """What one `run_once` did."""

    started: int  # fires handed to the executor (taken back ones included)
    taken_back: int  # of those, leases taken back after a lost reply
    full: bool  # it leased half a batch or more: more is likely waiting, go again at once
    next_lease_at: datetime | None  # when to lease next at the latest (None: nothing pending)


class StoreLeaser:
    def __init__(
        self, store: LeaserStore, clock: Clock, sink: FireSink, config: LeaserConfig
    ) -> None:
        self._store = store
        self._clock = clock
        self._sink = sink
        self._config = config
        self._lease_ttl = timedelta(milliseconds=config.lease_ttl_ms)
        self._lookahead = timedelta(milliseconds=config.lookahead_ms)
        self._backstop = timedelta(milliseconds=config.backstop_delay_ms)
        self._next_lease_at: datetime | None = None
        self._woken = asyncio.Event()  # a retry came due earlier than the leaser knew
        self._announced: datetime | None = None  # the earliest retry announced during a round
        # The last lease call failed, and may have committed: take back its leases first.
        self._lease_uncertain = False
        self._blocked = 0  # rounds in a row that leased nothing while runs were free
        # The latest instant of the fires handed over, and the runs leased beyond the room
        # (`beyond_room`) that the executor may still hold.
        self._latest: datetime | None = None
        self._held_beyond: set[int] = set()
        sink.on_retry_released(self.wake_at)

    def _fresh_from(self, now: datetime) -> datetime | None:
        fresh_ms = self._config.fresh_ms
        return None if fresh_ms is None else now - timedelta(milliseconds=fresh_ms)

    def wake_at(self, when: datetime) -> None:
        """Lease again no later than `when` (the executor released a retry until then)."""
        # Kept apart as well: a round in progress, whose store reads may predate the retry,
        # would otherwise overwrite it with its own idea of the next lease.
        self._announced = _earliest(self._announced, when)
        if self._next_lease_at is None or when < self._next_lease_at:
            self._next_lease_at = when
            self._woken.set()

    async def run_once(self) -> LeaseRound:
        """Take back the leases a failed call may have committed, then lease what is free
        within the horizon, as much as the executor has room for, and hand it over."""
        self._next_lease_at = None
        self._announced = None
        now = self._clock.now()
        lease_until = now + self._lease_ttl
        taken_back = await self._take_back(now, lease_until) if self._lease_uncertain else 0
        room = min(self._sink.room(), self._config.batch)
        # Runs are leased up to a look-ahead early: the fire itself still waits for its instant.
        ahead = now + self._lookahead
        if room == 0:
            # Busy: look again after the pause rather than waiting for a wake-up, since runs
            # may be waiting in the store while nothing notifies.
            self._next_lease_at = now
            started = taken_back + await self._lease_beyond_room(ahead, lease_until)
            return LeaseRound(started=started, taken_back=taken_back, full=False,
                              next_lease_at=now)  # fmt: skip
        fires = await self._lease(
            ahead,
            lease_until,
            room,
            fresh_from=self._fresh_from(now),
            due_by=now,
            ahead_first=room // AHEAD_FIRST_PART,
        )
        started = taken_back + self._hand_over(fires)
        free_at = await self._next_free_at(ahead)
        metrics.QUEUE_LAG.set(max((now - free_at).total_seconds(), 0.0) if free_at else 0.0)
        # Room filled: more may be free already. Otherwise sleep no longer than until a run
        # may become leasable (a hand-off from a scheduler elsewhere, a lease that ends), or
        # until a retry the executor announced meanwhile comes due.
        self._next_lease_at = now if len(fires) >= room else _earliest(free_at, self._announced)
        if not fires and free_at is not None and free_at <= now:
            # Free runs, none leased: held back by a cap or leased elsewhere. Back off.
            self._blocked += 1
            wait_ms = min(self._config.pause_ms << min(self._blocked, 16), MAX_BLOCKED_WAIT_MS)
            blocked_until = now + timedelta(milliseconds=wait_ms)
            self._next_lease_at = _earliest(blocked_until, self._announced)
        else:
            self._blocked = 0
        return LeaseRound(
            started=started,
            taken_back=taken_back,
            full=started >= self._config.batch // 2,
            next_lease_at=self._next_lease_at,
        )

    async def _lease_beyond_room(self, ahead: datetime, lease_until: datetime) -> int:
        """With the room full: lease up to `beyond_room` runs (fewer the more of them the
        executor still holds) free after the latest instant handed over, soonest first.

        The room fills with whatever is soonest, and before a herd's instant that is the
        herd, leased a look-ahead early; a run of another tenant due a few milliseconds after
        the instant would then wait until the herd's first fires finish. Past the latest
        instant held there is no herd to wait for, so those runs are taken at once, a bounded
        few beyond the backlog limit (ADR 0029)."""
        if self._latest is None or self._latest >= ahead:
            return 0
        self._held_beyond = {i for i in self._held_beyond if self._sink.holds(i)}
        allowance = self._config.beyond_room - len(self._held_beyond)
        if allowance <= 0:
            return 0
        fires = await self._lease(ahead, lease_until, allowance, after=self._latest)
        self._held_beyond.update(f.run_id for f in fires)
        return self._hand_over(fires)

    async def _lease(
        self,
        ahead: datetime,
        lease_until: datetime,
        limit: int,
        *,
        fresh_from: datetime | None = None,
        due_by: datetime | None = None,
        ahead_first: int = 0,
        after: datetime | None = None,
    ) -> list[Fire]:
        """One `lease_runs` call up to the look-ahead `ahead`, with the backstop's horizon for
        hand-offs."""
        try:
            return await self._store.lease_runs(
                now=ahead,
                hand_offs_by=ahead - self._backstop,
                owner=self._config.node_id,
                lease_until=lease_until,
                limit=limit,
                fresh_from=fresh_from,
                due_by=due_by,
                ahead_first=ahead_first,
                after=after,
            )
        except Exception:
            # The error may have come after the commit (a lost reply): the runs would then be
            # ours at fences we never saw. The next round takes them back before anything else.
            self._lease_uncertain = True
            raise

    async def _next_free_at(self, ahead: datetime) -> datetime | None:
        """When a lease round may next find something, never later than that (None: no run is
        pending): a round just leased everything free by `ahead` except what the rule made it
        leave, so the next run may come from two places."""
        first = await self._store.next_lease_at()
        if first is None or not self._backstop:
            return None if first is None else first - self._lookahead
        # The earliest free lease left behind is a hand-off whose message may be in flight
        # (or a run another worker was leasing): leasable here once it is a backstop old.
        # Past `ahead`, any run may be the next: an expiring lease becomes leasable at once.
        beyond = await self._store.next_lease_at(after=ahead)
        backstopped = first + self._backstop
        return (backstopped if beyond is None else min(backstopped, beyond)) - self._lookahead

    async def _take_back(self, now: datetime, lease_until: datetime) -> int:
        """Start the runs leased to this node that its executor does not hold: those of a
        lease call whose reply was lost. Their leases are live, so no other worker takes them
        meanwhile."""
        fires = await self._store.take_back_own_leases(
            owner=self._config.node_id,
            holding=self._sink.held_run_ids(),
            now=now,
            lease_until=lease_until,
            limit=self._config.batch,
        )
        # Cleared only now that the store answered; a full batch may have left more behind.
        self._lease_uncertain = len(fires) >= self._config.batch
        if fires:
            log.info(
                "took back %d leases whose reply was lost",
                len(fires),
                extra={"action": "leases_taken_back"},
            )
        return self._hand_over(fires)

    def _hand_over(self, fires: Sequence[Fire]) -> int:
        if fires:
            latest = max(f.starts_at for f in fires)
            self._latest = latest if self._latest is None else max(self._latest, latest)
        started = self._sink.submit(fires)
        if started:
            metrics.FIRES.labels(origin="leased").inc(started)
        return started

    async def run(self, stop: asyncio.Event) -> None:
        """Lease until `stop`: on change notices, when a known retry or free lease comes due,
        and every `scan_interval_ms`; a full batch is followed at once by the next.

        Behind an external queue the notices are not followed: nearly all of them announce
        hand-offs, which the queue delivers, and each round there reads the hand-offs whose
        messages are in flight (to skip them). Manual triggers and redrives are found by the
        scan instead."""
        runs_changed = self._store.watch("runs") if not self._backstop else asyncio.Event()
        loop = asyncio.get_running_loop()
        next_scan = 0.0
        failures = 0  # consecutive failed rounds: while the store is down, back off, log once
        while not stop.is_set():
            if runs_changed.is_set() or loop.time() >= next_scan or self._due():
                runs_changed.clear()
                self._woken.clear()
                try:
                    leased = await self.run_once()
                except Exception:
                    failures += 1
                    self._log_failure(failures)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), outage_pause_s(failures))
                    continue
                if failures:
                    log.warning(
                        "store leases recovered",
                        extra={"action": "lease_recovered", "failed_rounds": failures},
                    )
                    failures = 0
                next_scan = loop.time() + self._config.scan_interval_ms / 1000
                if leased.full:
                    continue
            await self._pause(runs_changed, stop)

    def _log_failure(self, failures: int) -> None:
        if failures == 1:
            log.exception("leasing from the store failed", extra={"action": "lease_failed"})
        else:
            log.debug("leasing from the store failed again", exc_info=True)

    def _due(self) -> bool:
        return self._next_lease_at is not None and self._clock.now() >= self._next_lease_at

    async def _pause(self, runs_changed: asyncio.Event, stop: asyncio.Event) -> None:
        # A short pause first, woken by new runs: a scheduler claims as little as half a
        # look-ahead before the instant, and a leaser that slept through the notice could start
        # the fire late. Then, if nothing is due, sleep until something may be.
        await first_of([runs_changed, stop], self._config.pause_ms / 1000)
        if runs_changed.is_set() or stop.is_set() or self._due():
            return
        await first_of([runs_changed, stop, self._woken], self._idle_s())

    def _idle_s(self) -> float:
        """Sleep at most until the next known lease comes due (MAX_IDLE_S otherwise)."""
        if self._next_lease_at is None:
            return MAX_IDLE_S
        left = (self._next_lease_at - self._clock.now()).total_seconds()
        return min(max(left, 0.0), MAX_IDLE_S)


def _earliest(first: datetime | None, second: datetime | None) -> datetime | None:
    if first is None or second is None:
        return first if second is None else second
    return min(first, second)
