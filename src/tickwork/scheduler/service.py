"""The scheduler service: find due jobs, claim them, hand their fires to an executor or off to
workers elsewhere.

`run_once(now)` is one tick and returns what it did; `run()` loops, sleeping until the earliest
due job (minus a small claim-ahead) or until the store reports a change, never polling blindly.

With an external queue, `run()` publishes a tick's envelopes while it claims the next batch
(one publish in flight at most): in a burst the claim and the publish then overlap instead of
adding up. That is safe because a publish is only the fast path: the runs are already in the
store, and a publish that fails or never happens is repaired by the workers' backstop.

With a `PartitionKeeper` (scheduler/partitions.py) the scheduler scans and claims only the
partitions it holds, each plan carrying the partition's epoch for the store to check; and every
quarter of the takeover grace it also claims the overdue work of the partitions it does not
hold whose owner is dead or stalled (ADR 0015, 0017), so that work waits about the grace, not a
lease TTL, while a live owner that is merely behind (a burst) is left to catch up alone.
Without a keeper it claims everything, unchecked (tools and tests).

With a fire ceiling (`SchedulerConfig.fire_ceiling`, ADR 0025) each tick, and each takeover,
claims at most what a token bucket at this scheduler's share of the ceiling holds (the ceiling
times the share of the partitions it holds), in due order; when due work is left behind for
want of tokens, the scheduler sleeps until enough have accrued, and the occurrences that waited
because of it fire as if on time, their lateness recorded on the run as `throttled_ms`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from tickwork import metrics
from tickwork.clock import Clock
from tickwork.domain.partitions import DueHead, PartitionLease
from tickwork.domain.runs import Envelope, Fire
from tickwork.scheduler.fair_scan import FairScan
from tickwork.scheduler.partitions import PartitionKeeper
from tickwork.scheduler.planning import (
    claim_reach_ms,
    herd_probe_in_s,
    plan_claim,
    settled_bound,
    sleep_seconds,
)
from tickwork.scheduler.stall import StallWatch
from tickwork.scheduler.window_load import WindowLoad
from tickwork.store.base import DEFAULT_TAKEOVER_GRACE_MS, ClaimPlan, DueJob, ScheduleStore
from tickwork.timing.pacing import FireBucket, ceiling_share, held_back, throttled_ms
from tickwork.waiting import first_of

log = logging.getLogger("tickwork.scheduler")

Dispatch = Callable[[Sequence[Fire]], object]  # hands fires to an executor; its answer is unused
# The epoch a takeover claims under: matches no lease, so the store admits only overdue work.
NO_EPOCH = -1
Publish = Callable[[Sequence[Envelope]], Awaitable[None]]
RECENT_TICKS = 8  # the ticks whose durations set how far ahead the next one claims


@dataclass(frozen=True, kw_only=True, slots=True)
class SchedulerConfig:
    node_id: str
    batch_size: int = 1000
    lookahead_ms: int = 200  # claim this early; the executor still starts on the instant (ADR 0009)
    max_idle_ms: int = 1000  # longest sleep when nothing wakes us (other processes' writes)
    lease_ttl_ms: int = 60_000  # how long a fire stays ours without a heartbeat
    # A job this late may be claimed by any scheduler, whoever holds its partition (ADR 0015).
    takeover_grace_ms: int = DEFAULT_TAKEOVER_GRACE_MS
    # The cluster's most fires per second (ADR 0025); None: no ceiling, nothing paced.
    fire_ceiling: float | None = None
    # How long before its instant a herd (more due at one instant than a batch) is claimed
    # (ADR 0036); no longer than lookahead_ms: never.
    herd_lead_ms: int = 1200

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.fire_ceiling is not None and not self.fire_ceiling > 0:
            raise ValueError("fire_ceiling must be > 0 (None: no ceiling)")
        if not 0 <= self.lookahead_ms <= self.max_idle_ms:
            raise ValueError("lookahead_ms must be between 0 and max_idle_ms")
        if self.herd_lead_ms < 0:
            raise ValueError("herd_lead_ms must be >= 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class TickResult:
    due: int  # jobs the due-scan returned
    fires: list[Fire] = field(default_factory=list)  # claimed and dispatched in this process
    handed_off: list[Envelope] = field(default_factory=list)  # claimed for workers elsewhere
    conflicts: int = 0  # planned fires dropped because another claimer or an edit won
    refused: int = 0  # plans the store refused: this scheduler no longer held that epoch
    full_batch: bool = False  # the scan hit the batch limit: more may be due already
    scanned_to: datetime | None = None  # how far the due scan reached (now + look-ahead)
    # Every scheduled job before this instant was settled by this tick (see `settled_bound`);
    # None when the tick cannot vouch for any instant (a conflict, a skipped occurrence).
    settled_below: datetime | None = None
    # The fire ceiling held this tick back: due work may be left behind for want of tokens
    # (ADR 0025); the next tick waits for tokens instead of claiming at once.
    throttled: bool = False

    @property
    def claimed(self) -> int:
        """Occurrences this tick fired, either way (one of the two lists is always empty)."""
        return len(self.fires) + len(self.handed_off)


class SchedulerService:
    def __init__(
        self,
        store: ScheduleStore,
        clock: Clock,
        config: SchedulerConfig,
        dispatch: Dispatch | None,
        publish: Publish | None = None,
        *,
        keeper: PartitionKeeper | None = None,
    ) -> None:
        """`dispatch` hands fires to an executor in this process; None hands them off through
        the store instead (the table queue, `claim_hand_off`), to workers in any process, and
        `publish` then also sends their envelopes to an external queue (a failed publish is
        logged: the store still has them). `keeper` gives the partitions this scheduler holds
        (None: every partition, unchecked)."""
        self._publish = publish
        self._store = store
        self._clock = clock
        self._config = config
        self._dispatch = dispatch
        self._keeper = keeper
        self._next_takeover_scan = 0.0  # by clock.monotonic_s()
        self._stalls = StallWatch(
            grace_s=config.takeover_grace_ms / 1000,
            verdict_ttl_s=keeper.lease_ttl_s if keeper is not None else 0.0,
        )
        self._gone_logged: frozenset[str] = frozenset()  # owners found gone, logged once
        self._recent: deque[tuple[float, int]] = deque()  # (monotonic s, fires) of each claim
        # How long the last ticks took (clock.monotonic_s), and how far ahead the last one
        # claimed: slow ticks claim further ahead (`claim_reach_ms`).
        self._tick_spans: deque[float] = deque(maxlen=RECENT_TICKS)
        self._reach_ms = config.lookahead_ms
        # A herd found ahead (ADR 0036): the ticks reach this far until they have claimed it;
        # and the instant last looked at for one, so that each is looked at once.
        self._herd_until: datetime | None = None
        self._probed_for: datetime | None = None
        # Where windowed occurrences are placed (ADR 0022).
        self._windows = WindowLoad(store, monotonic=clock.monotonic_s)
        # How a tick that is behind shares its batch among tenants.
        self._fair = FairScan(store, monotonic=clock.monotonic_s, share=self._fraction)
        # The fire ceiling's bucket (None: no ceiling) and since when (the `now` of the first
        # tick that left due work behind for want of tokens) this scheduler is throttled.
        self._bucket: FireBucket | None = None
        self._throttled_since: datetime | None = None
        if config.fire_ceiling is not None:
            self._bucket = FireBucket(rate=self._share(None), at_s=clock.monotonic_s())

    @property
    def keeper(self) -> PartitionKeeper | None:
        """The keeper of the partitions this scheduler holds (None: it claims everything)."""
        return self._keeper

    def describe(self) -> dict[str, object]:
        """What this scheduler's heartbeat tells the cluster view: fires in the last minute."""
        cutoff = self._clock.monotonic_s() - 60
        while self._recent and self._recent[0][0] < cutoff:
            self._recent.popleft()
        return {"fires_last_minute": sum(n for _, n in self._recent)}

    async def run_once(
        self, now: datetime | None = None, *, not_before: datetime | None = None
    ) -> TickResult:
        """Claim every job due by `now` (+ lookahead), up to one batch, and dispatch its fires
        (or hand them off, publishing their envelopes before it returns). `not_before` skips
        jobs due earlier: pass only what an earlier tick's `settled_below` vouched for."""
        result = await self._tick(now, not_before=not_before)
        if result.handed_off and self._publish is not None:
            await self._publish_safely(result.handed_off)
        return result

    async def _tick(self, now: datetime | None, *, not_before: datetime | None) -> TickResult:
        """One tick without the publish: the caller sends `handed_off` to the queue."""
        began = self._clock.monotonic_s()
        try:
            return await self._tick_from(now, not_before=not_before)
        finally:
            self._tick_spans.append(self._clock.monotonic_s() - began)

    async def _tick_from(self, now: datetime | None, *, not_before: datetime | None) -> TickResult:
        now = self._clock.now() if now is None else now
        cfg = self._config
        self._reach_ms = claim_reach_ms(
            cfg.lookahead_ms, self._tick_spans, limit_ms=cfg.max_idle_ms
        )
        horizon = now + timedelta(milliseconds=self._reach_ms)
        if self._herd_until is not None and self._herd_until > horizon:
            horizon = self._herd_until
        held = None if self._keeper is None else self._keeper.held_now()
        limit = self._limit(held)
        if limit == 0:  # no token left: nothing is claimed until some accrue
            return TickResult(due=0, settled_below=not_before, throttled=True)
        started = time.perf_counter()
        due, fair = (
            await self._scan(horizon, not_before, held, now, limit)
            if held is None or held
            else ([], False)
        )
        metrics.DUE_SCAN_SECONDS.observe(time.perf_counter() - started)
        # A shared scan (behind) is full while more is due than it took.
        full = self._fair.behind if fair else len(due) == limit
        if not full:
            self._herd_until = None  # claimed to its end, or none was found
        throttled = full and limit < cfg.batch_size  # the bucket, not the batch, cut it off
        if not due:
            if self._fair.behind:  # due work waits for its tenants' rates: nothing settled
                return TickResult(due=0, settled_below=not_before, throttled=True)
            self._throttled_since = None  # caught up: nothing due is left behind
            return TickResult(due=0, scanned_to=horizon, settled_below=horizon)
        # The plans of this scan still see the throttling the earlier ticks found: the last
        # jobs a throttled scheduler catches up with waited for the ceiling too.
        plans = [self._plan(job, now, _epoch_of(job, held)) for job in due]
        plans = await self._windows.place(plans, due, now)
        fires, handed_off, refused = await self._claim(plans, now, horizon=horizon)
        self._recent.append((self._clock.monotonic_s(), len(fires) + len(handed_off)))
        tenant_of = {job.job_id: job.tenant for job in due}
        claimed_ids = [f.job_id for f in fires] + [e.job_id for e in handed_off]
        self._fair.spend([tenant_of[job_id] for job_id in claimed_ids])
        if not full:
            self._throttled_since = None  # caught up: nothing due is left behind
        elif throttled and self._throttled_since is None:
            self._throttled_since = now
        planned = sum(p.scheduled_for is not None for p in plans)
        conflicts = planned - len(fires) - len(handed_off)
        # A full scan reached only as far as its last job; more may be due at that instant.
        # A shared one (behind) took jobs from each tenant's own order: it vouches for none.
        reach = None if fair else due[-1].next_run_at if full else horizon
        result = TickResult(
            due=len(due),
            fires=fires,
            handed_off=handed_off,
            conflicts=conflicts,
            refused=refused,
            full_batch=full,
            scanned_to=horizon,
            settled_below=None
            if reach is None
            else settled_bound(plans, reach, conflicts=conflicts),
            throttled=throttled,
        )
        _record(due, plans, result)
        return result

    async def _scan(
        self,
        horizon: datetime,
        not_before: datetime | None,
        held: Mapping[int, int] | None,
        now: datetime,
        batch: int,
    ) -> tuple[list[DueJob], bool]:
        """The due jobs of this tick, at most `batch`, and whether they are a shared batch:
        in time order while the scheduler keeps up, else shared fairly among the tenants
        (scheduler/fair_scan.py)."""
        fair = self._fair
        await fair.refresh()  # tenants' weights and rates, read every few seconds
        if not fair.behind:
            due = await self._store.due_jobs(horizon, batch, not_before=not_before, partitions=held)
            fair.notice(due, batch)
            if not fair.behind:
                return due, False
            # More is due than a batch: share this one already.
        shared = await fair.scan(horizon, batch, not_before=not_before, partitions=held, now=now)
        return shared, True

    def _fraction(self) -> float:
        """The part of the cluster's fires this scheduler claims: its partitions' part (1.0
        without a keeper). A tenant's max_fires_per_s is paced here at that part of it."""
        if self._keeper is None:
            return 1.0
        partitions = self._store.partition_count()
        return len(self._keeper.held_now()) / partitions if partitions else 1.0

    def _share(self, held: Mapping[int, int] | None) -> float:
        """This scheduler's share of the fire ceiling, in fires per second: the ceiling in
        proportion to the partitions it holds (without a keeper, all of it)."""
        ceiling = self._config.fire_ceiling
        assert ceiling is not None
        if self._keeper is None:
            return ceiling
        return ceiling_share(ceiling, len(held or {}), self._store.partition_count())

    def _limit(self, held: Mapping[int, int] | None) -> int:
        """How many jobs this tick may claim: a batch, or fewer under the fire ceiling."""
        bucket = self._bucket
        if bucket is None:
            return self._config.batch_size
        share = self._share(held)
        bucket.set_rate(share, self._clock.monotonic_s())
        metrics.CEILING_SHARE.set(share)
        return min(self._config.batch_size, max(bucket.available(self._clock.monotonic_s()), 0))

    def _plan(self, job: DueJob, now: datetime, epoch: int | None) -> ClaimPlan:
        """plan_claim, and the occurrences the fire ceiling or their tenant's rate held back:
        they fire as if on time, with how late the pacing made them (ADR 0025)."""
        since = self._throttled_since
        grace = job.schedule.misfire_grace_ms
        tenant_since = self._fair.held_since(job.tenant)
        if tenant_since is not None and held_back(
            job.next_run_at, throttled_since=tenant_since, grace_ms=grace
        ):
            since = tenant_since if since is None else min(since, tenant_since)
        if not held_back(job.next_run_at, throttled_since=since, grace_ms=grace):
            return plan_claim(job, now, epoch=epoch)
        assert since is not None
        plan = plan_claim(job, now, epoch=epoch, throttled=True)
        late = throttled_ms(job.next_run_at, now, throttled_since=since)
        return plan if late is None else replace(plan, throttled_ms=late)

    def pace_wait_s(self) -> float:
        """How long a throttled scheduler sleeps: until a quarter of the bucket (50 ms of its
        share) has accrued, so a tick claims a handful of fires, not one (0.0: no ceiling)."""
        waits = []
        bucket = self._bucket
        if bucket is not None:
            step = max(1, min(self._config.batch_size, int(bucket.capacity / 4)))
            waits.append(bucket.wait_s(step, self._clock.monotonic_s()))
        tenants = self._fair.wait_s()  # tenants waiting for their max_fires_per_s
        if tenants is not None:
            waits.append(tenants)
        return min([*waits, self._config.max_idle_ms / 1000]) if waits else 0.0

    async def _claim(
        self,
        plans: Sequence[ClaimPlan],
        now: datetime,
        *,
        takeover_grace_ms: int | None = None,
        horizon: datetime | None = None,
    ) -> tuple[list[Fire], list[Envelope], int]:
        """Claim `plans` for the executor of this process, or hand them off; dispatch the fires.
        Returns (fires, envelopes, plans refused for their epoch). A plan under no epoch is
        admitted when overdue by `takeover_grace_ms` (default: the configured grace). A fire's
        lease lasts from the scan's `horizon` (default: the reach from `now`), its latest
        instant, for the lease TTL."""
        cfg = self._config
        grace = cfg.takeover_grace_ms if takeover_grace_ms is None else takeover_grace_ms
        started = time.perf_counter()
        if self._dispatch is not None:
            reach_to = now + timedelta(milliseconds=self._reach_ms) if horizon is None else horizon
            lease_until = reach_to + timedelta(milliseconds=cfg.lease_ttl_ms)
            fires = await self._store.claim(
                plans, owner=cfg.node_id, lease_until=lease_until, now=now, takeover_grace_ms=grace
            )
            metrics.CLAIM_SECONDS.observe(time.perf_counter() - started)
            if fires:
                self._dispatch(fires)
            refused, fired, handed = fires.refused, list(fires), []
        else:
            # No executor here: the runs are left in the store for any worker, and only their
            # envelopes come back (what a queue carries; the table queue needs not even that).
            envelopes = await self._store.claim_hand_off(
                plans, owner=cfg.node_id, now=now, takeover_grace_ms=grace
            )
            metrics.CLAIM_SECONDS.observe(time.perf_counter() - started)
            refused, fired, handed = envelopes.refused, [], list(envelopes)
        if refused:
            metrics.STALE_EPOCH_REFUSALS.inc(refused)
            log.warning(
                "the store refused %d claims made under a stale partition epoch",
                refused,
                extra={"action": "stale_epoch_refused"},
            )
        if self._bucket is not None:
            self._spend(plans, [*fired, *handed])
        return fired, handed, refused

    def _spend(self, plans: Sequence[ClaimPlan], claimed: Sequence[Fire | Envelope]) -> None:
        """Take a token per occurrence claimed, and count those the ceiling held back."""
        assert self._bucket is not None
        self._bucket.take(len(claimed), self._clock.monotonic_s())
        held_back_ids = {p.job_id for p in plans if p.throttled_ms is not None}
        if held_back_ids:
            metrics.THROTTLED_FIRES.inc(sum(c.job_id in held_back_ids for c in claimed))

    async def take_over(self, now: datetime | None = None) -> TickResult:
        """Claim the work of the partitions this scheduler does not hold whose owner is gone
        or stalled (`StallWatch`): what a dead or paused owner left. A gone owner's work
        (ADR 0032) is claimed as it comes due, since nobody is left to race for it; any other
        only once it is overdue by the takeover grace. The store admits such a plan only while
        the job is that late, through the same compare-and-set as any claim."""
        now = self._clock.now() if now is None else now
        if self._keeper is None:
            return TickResult(due=0)
        leases = self._keeper.foreign_leases()
        if not leases:
            return TickResult(due=0)
        # Heads up to the look-ahead: a live owner claims those already, so the watch sees a
        # dead owner's first unclaimed head as early as it could have been claimed, and the
        # takeover lands about the grace after the instant, inside the misfire grace.
        soon = now + timedelta(milliseconds=self._config.lookahead_ms)
        heads = await self._store.partition_heads(soon, leases)
        gone = await self._gone_owners(leases, heads, now)
        stalled_before = self._stalls.stalled_owners()
        eligible = self._stalls.eligible(
            at_s=self._clock.monotonic_s(), now=now, leases=leases, heads=heads, gone=gone
        )
        self._log_stalls(stalled_before)
        orphaned = {p for p, lease in leases.items() if lease is not None and lease.owner in gone}
        grace_ms = self._config.takeover_grace_ms
        cutoff = now - timedelta(milliseconds=grace_ms)
        at_once = [p for p in sorted(eligible & orphaned) if p in heads and heads[p].due_at <= now]
        late = [p for p in sorted(eligible - orphaned) if p in heads and heads[p].due_at <= cutoff]
        first = await self._take(at_once, due_by=now, now=now, grace_ms=0)
        then = await self._take(late, due_by=cutoff, now=now, grace_ms=grace_ms)
        return TickResult(
            due=first.due + then.due,
            fires=first.fires + then.fires,
            handed_off=first.handed_off + then.handed_off,
            conflicts=first.conflicts + then.conflicts,
            refused=first.refused + then.refused,
        )

    async def _take(
        self, partitions: Sequence[int], *, due_by: datetime, now: datetime, grace_ms: int
    ) -> TickResult:
        """Claim the work of `partitions` due by `due_by`, under no epoch (take_over)."""
        if not partitions:
            return TickResult(due=0)
        assert self._keeper is not None
        limit = self._limit(self._keeper.held_now())  # the ceiling's tokens count here too
        if limit == 0:
            return TickResult(due=0)
        due = await self._store.due_jobs(due_by, limit, partitions=partitions)
        if not due:
            return TickResult(due=0)
        plans = [plan_claim(job, now, epoch=NO_EPOCH) for job in due]
        plans = await self._windows.place(plans, due, now)
        fires, handed_off, refused = await self._claim(plans, now, takeover_grace_ms=grace_ms)
        result = TickResult(due=len(due), fires=fires, handed_off=handed_off, refused=refused)
        self._recent.append((self._clock.monotonic_s(), result.claimed))
        metrics.TAKEOVERS.inc(result.claimed)
        if result.claimed:
            log.warning(
                "took over %d overdue occurrences of partitions held elsewhere",
                result.claimed,
                extra={"action": "takeover"},
            )
        result = replace(result, conflicts=len(due) - result.claimed)
        _record(due, plans, result)
        return result

    async def _gone_owners(
        self,
        leases: Mapping[int, PartitionLease | None],
        heads: Mapping[int, DueHead],
        cutoff: datetime,
    ) -> frozenset[str]:
        """The owners of partitions with work due by `cutoff` whose process the store knows
        is gone (ADR 0032): their work is taken over as it comes due rather than after watching
        their partitions stall for the grace. Asked only when such work exists (a query)."""
        owners = {
            lease.owner
            for partition, lease in leases.items()
            if lease is not None and lease.owner is not None
            and partition in heads and heads[partition].due_at <= cutoff
        }  # fmt: skip
        if not owners:
            return frozenset()
        gone = await self._store.gone_nodes(owners)
        if gone - self._gone_logged:
            log.warning(
                "scheduler %s has no session open to the database; taking over its work as it "
                "comes due",
                ", ".join(sorted(gone - self._gone_logged)),
                extra={"action": "owner_gone", "owners": sorted(gone)},
            )
        self._gone_logged = gone
        return gone

    def _log_stalls(self, before: frozenset[str]) -> None:
        judged = self._stalls.stalled_owners() - before
        if judged:
            log.warning(
                "scheduler %s claims nothing in its partitions; taking over their overdue work",
                ", ".join(sorted(judged)),
                extra={"action": "owner_stalled", "owners": sorted(judged)},
            )

    async def _publish_safely(self, envelopes: Sequence[Envelope]) -> None:
        assert self._publish is not None
        try:
            await self._publish(envelopes)
        except Exception:
            log.exception(
                "publish failed; workers will take these fires from the store",
                extra={"action": "publish_failed"},
            )

    async def run(self, stop: asyncio.Event) -> None:
        """Tick until `stop` is set. Store errors are logged and retried after a pause.

        Each tick's scan starts where the ticks before it left nothing unclaimed (`floor`),
        so it does not walk the claimed jobs' dead versions (ADR 0008). Below the floor a
        job can only appear by a write, and writes wake this loop: a wake-up by a change, a
        conflict or an error drops the floor, and so does the clock every `max_idle_ms` in
        case a change went unnoticed (a write made by hand, a notice lost with its
        connection)."""
        changed = self._store.watch("jobs")
        floor: datetime | None = None
        unbounded_by = 0.0  # when (clock.monotonic_s) the next scan must start at the bottom
        publishing = _PublishPipeline(self._publish_safely)
        held = self._keeper.changed if self._keeper is not None else asyncio.Event()
        try:
            while not stop.is_set():
                if held.is_set():  # other partitions: their jobs may lie below the floor
                    held.clear()
                    floor = None
                if changed.is_set() or self._clock.monotonic_s() >= unbounded_by:
                    floor = None
                if floor is None:
                    unbounded_by = self._clock.monotonic_s() + self._config.max_idle_ms / 1000
                floor = await self._tick_and_wait(floor, changed, stop, publishing)
        finally:
            await publishing.drain()  # what was claimed goes out before the queue closes

    async def _tick_and_wait(
        self,
        floor: datetime | None,
        changed: asyncio.Event,
        stop: asyncio.Event,
        publishing: _PublishPipeline,
    ) -> datetime | None:
        """One tick of `run()`, then the sleep until the next; returns the next tick's floor."""
        try:
            result = await self._tick(None, not_before=floor)
            if result.handed_off and self._publish is not None:
                await publishing.send(result.handed_off)
            taken = await self._take_over_when_due()
            if taken.handed_off and self._publish is not None:
                await publishing.send(taken.handed_off)
            floor = result.settled_below
            if result.throttled:  # more are due, but the ceiling's tokens ran out
                delay = min(self.pace_wait_s(), self._until_takeover_scan())
                if await _wait_any(changed, stop, delay, also=self._keeper_changed()):
                    floor = None
                return floor
            if result.full_batch:
                return floor  # more are due right now
            next_due = await self._next_due(floor)
            delay = min(
                sleep_seconds(
                    next_due,
                    self._clock.now(),
                    scanned_to=result.scanned_to,
                    lookahead_ms=self._reach_ms,
                    max_idle_ms=self._config.max_idle_ms,
                ),
                self._until_takeover_scan(),
            )
            delay, woken = await self._herd_look(next_due, delay, changed, stop)
            if woken:
                return None  # a change came first: tick at once, from the bottom
        except Exception:
            log.exception("scheduler tick failed", extra={"action": "tick_failed"})
            floor, delay = None, self._config.max_idle_ms / 1000
        if await _wait_any(changed, stop, delay, also=self._keeper_changed()):
            floor = None
        return floor

    async def _herd_look(
        self, next_due: datetime | None, delay: float, changed: asyncio.Event, stop: asyncio.Event
    ) -> tuple[float, bool]:
        """Look for a herd at `next_due` a lead before it (ADR 0036), inside the loop's sleep
        of `delay`: returns what is left of that sleep (0.0 when a herd was found: the next
        ticks claim it) and whether a change or a stop cut the wait short. Waits here, not
        in a tick of its own, so that an every-second herd's look, which falls on the
        previous herd's instant, costs one count and no due scan."""
        probe = herd_probe_in_s(
            next_due,
            self._clock.now(),
            herd_lead_ms=self._config.herd_lead_ms,
            reach_ms=self._reach_ms,
        )
        if probe is None or next_due is None or next_due == self._probed_for or probe >= delay:
            return delay, False
        if probe > 0 and await _wait_any(changed, stop, probe, also=self._keeper_changed()):
            return 0.0, True
        self._probed_for = next_due
        if await self._herd_due(next_due):
            return 0.0, False
        return max(delay - probe, 0.0), False

    async def _herd_due(self, instant: datetime) -> bool:
        """Whether more than a batch is due from `instant`, the earliest due, to the reach
        after it; if so, the ticks reach as far until they have claimed it. The look counts
        at most a batch and one entries of the due index (no row is decoded), once per
        instant, from the instant itself: nothing is due before it, and below it lie only the
        dead versions that claims leave until vacuum."""
        held = None if self._keeper is None else self._keeper.held_now()
        if held is not None and not held:
            return False
        until = instant + timedelta(milliseconds=self._reach_ms)
        batch = self._config.batch_size
        found = await self._store.count_due(until, batch + 1, not_before=instant, partitions=held)
        if found <= batch:
            return False
        self._herd_until = until
        log.info(
            "a herd of more than %d jobs is due at %s: claiming it ahead",
            batch,
            instant.isoformat(),
            extra={"action": "herd_ahead"},
        )
        metrics.HERDS_CLAIMED_AHEAD.inc()
        return True

    async def _next_due(self, floor: datetime | None) -> datetime | None:
        if self._keeper is None:
            return await self._store.next_due_at(not_before=floor)
        held = self._keeper.held_now()
        return await self._store.next_due_at(not_before=floor, partitions=held) if held else None

    async def _take_over_when_due(self) -> TickResult:
        """A takeover scan every quarter of the grace, while some partition is held elsewhere."""
        if self._keeper is None or self._clock.monotonic_s() < self._next_takeover_scan:
            return TickResult(due=0)
        self._next_takeover_scan = self._clock.monotonic_s() + self._takeover_every_s()
        return await self.take_over()

    def _until_takeover_scan(self) -> float:
        if self._keeper is None or not self._keeper.not_held():
            return self._config.max_idle_ms / 1000
        return max(self._next_takeover_scan - self._clock.monotonic_s(), 0.0)

    def _takeover_every_s(self) -> float:
        return self._config.takeover_grace_ms / 4000  # a takeover lands within 1.25 grace

    def _keeper_changed(self) -> asyncio.Event | None:
        return None if self._keeper is None else self._keeper.changed


class _PublishPipeline:
    """At most one publish in flight, running while the scheduler claims the next batch.

    `send` waits for the previous publish before it starts the next one, so a queue slower
    than the claims holds the scheduler back (one batch of envelopes in memory, not a
    growing pile) and envelopes go out in claim order."""

    def __init__(
        self, publish: Callable[[Sequence[Envelope]], Coroutine[object, None, None]]
    ) -> None:
        self._publish = publish
        self._in_flight: asyncio.Task[None] | None = None

    async def send(self, envelopes: Sequence[Envelope]) -> None:
        await self.drain()
        self._in_flight = asyncio.create_task(self._publish(envelopes))

    async def drain(self) -> None:
        task, self._in_flight = self._in_flight, None
        if task is not None:
            await task  # _publish_safely logs its own failures; it raises only on cancel


def _epoch_of(job: DueJob, held: Mapping[int, int] | None) -> int | None:
    """The epoch the plan of `job` claims under: None without partitions (unchecked)."""
    return None if held is None else held.get(job.partition, NO_EPOCH)


def _record(due: Sequence[DueJob], plans: Sequence[ClaimPlan], result: TickResult) -> None:
    metrics.FIRES.labels(origin="schedule").inc(result.claimed)
    metrics.CLAIM_CONFLICTS.inc(result.conflicts)
    for job, plan in zip(due, plans, strict=True):
        # fire_all folds nothing; what it skipped as older than its catchup_window counts.
        missed = plan.coalesced or plan.missed_count
        if missed:
            metrics.MISSED.labels(policy=job.schedule.misfire.value).inc(missed)


async def _wait_any(
    changed: asyncio.Event,
    stop: asyncio.Event,
    timeout_s: float,
    *,
    also: asyncio.Event | None = None,
) -> bool:
    """Sleep up to `timeout_s`, waking early on a store change, on stop, or on `also` (the
    partitions held changed); whether jobs changed (during the sleep or the tick before it)."""
    await first_of([changed, stop] if also is None else [changed, stop, also], timeout_s)
    was_changed = changed.is_set()
    changed.clear()
    return was_changed
