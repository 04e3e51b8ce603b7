"""The executor: runs the fires a process holds, each on time, and records their outcomes.

Every deployment runs its fires here; they arrive through `submit` (the executor is the
`FireSink` of worker/base.py). In `tickwork up` the scheduler of the same process hands its
fires over directly. The store leaser (worker/leaser.py) leases runs from the store: on the
table queue that is the dequeue, and everywhere it re-leases orphaned runs (an expired lease, a
manual trigger, a retry whose backoff is over, a redriven dead letter). Behind an external
queue (NATS, Redis) the `QueueConsumer` (worker/consumer.py) leases the runs its messages name.

Each fire waits for its scheduled instant (the scheduler claims slightly ahead), then for a
slot (worker/admission.py, ADR 0023): webhooks and Python tasks have pools of their own, and
within a pool a tenant holds at most its share of the slots and a webhook origin at most
`max_per_host`, so a tenant's flood or a hanging endpoint costs that tenant alone. A fire over a
cap stays parked here, leased and heartbeated, without a slot; first attempts start before
retries. It runs through a `Runner` (worker/base.py states what a runner must do), and its
outcome is recorded in batches with a fence-guarded write, while a heartbeat renews the leases
of the fires held here (worker/lease_timing.py says which, how often and why). A retry
released by an outcome is announced to whoever leases from the store (`on_retry_released`),
so it is leased again when its backoff ends.

A fire whose lease the store refuses to extend is stopped: its run was cancelled (overlap
cancel_previous) or its lease ran out and another worker took it, so its outcome would be
rejected anyway. A running task gets asyncio cancellation, a webhook's request is aborted (its
connection closed); no outcome is written for it, and a fire still waiting never starts.

A job's dead-letter alert (`on_failure`) is sent only once the batch that dead-letters its run
has been written and the store confirmed that this outcome applied: a zombie whose outcome the
fence rejected stays silent. Alerts run as their own tasks, outside the fires' concurrency
slots, so a slow alert receiver never holds up other runs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tickwork import metrics
from tickwork.clock import Clock, to_us
from tickwork.domain.jobs import TaskTarget
from tickwork.domain.runs import Fire, RunOutcome, RunStatus
from tickwork.store.base import ScheduleStore
from tickwork.timing.outage import outage_pause_s
from tickwork.waiting import first_of
from tickwork.worker.admission import Admission, Lane, Pool, PoolLimits, origin_of, tenant_cap
from tickwork.worker.base import Alerter, Attempt, Preparing, Runner
from tickwork.worker.lease_timing import (
    DEFAULT_HEARTBEAT_MS,
    DEFAULT_LEASE_TTL_MS,
    lease_timing_problem,
    renew_by,
)
from tickwork.worker.outcomes import outcome_for

log = logging.getLogger("tickwork.executor")

# The shortest timer the executor arms. Loop timers have millisecond resolution (uvloop also
# reads a cached loop time), so a timer for less than that fires at once, the clock says "not
# yet", and the executor re-armed it again and again: ~76 wake-ups per fire, most of a worker's
# CPU at 2,000 fires/s (py-spy). Waiting at least this long costs a fire under a millisecond.
TIMER_FLOOR_S = 0.001
MAX_IDLE_S = 1.0  # the longest the write loop sleeps without a wake-up
# The longest the write loop holds finished outcomes back while due fires wait to start
# (`_pause`): after a flush interval, the herd of an instant first.
FLUSH_HOLD_MAX_S = 0.1
# The hard bound on unwritten outcomes, as a multiple of ExecutorConfig.unrecorded_limit (ADR
# 0034): room for one batch being written while the next ones gather. At 1x, the fires of a
# herd waited for each write's round trip in turn (1,000 no-op tasks at one instant: p99 50
# ms instead of 20).
UNRECORDED_HARD_FACTOR = 4
# Fires due at least this far ahead are prepared (Preparing) before their instant, this many
# per turn of the loop, so that timers due meanwhile are not held up by a herd's preparation.
PREPARE_AHEAD_MIN_US = 5_000
PREPARE_PER_TURN = 64
LANES_KEPT = 4096  # lanes (tenant, target) remembered by _lane_of; past it, they are rebuilt
_NEVER_US = 2**63 - 1


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecutorConfig:
    node_id: str
    concurrency: int = 256  # Python tasks running at once (sync ones run in threads)
    # Webhooks running at once: awaited sockets, not threads, so a worker holds many more of
    # them than tasks; bounded by file descriptors (ADR 0023 says why 512).
    webhook_concurrency: int = 512
    max_per_host: int = 32  # webhooks running at once to one origin; 0: no cap
    tenant_share: float = 0.5  # of each pool's slots, the most one tenant holds (1: no cap)
    lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS  # how often held leases are renewed
    flush_interval_ms: int = 20  # outcomes are written in batches at most this stale
    # Bodies finished whose outcomes are not yet written: at this many the executor writes
    # them at once, without the flush interval or a herd's hold (unless fires wait to start
    # and those it holds, running or due, all fit under the hard bound: a herd that fits
    # runs whole first), and it never holds more than UNRECORDED_HARD_FACTOR times as many
    # (a batch being written included): no runner starts a fire until a write brings them
    # below. If the worker dies, each such body runs again once its lease ends (at least
    # once), so this bounds what a crash repeats (ADR 0034).
    unrecorded_limit: int = 256
    # Fires leased but not yet finished that this executor keeps at most. Beyond it, it leases
    # no more: a worker that cannot keep up leaves the rest in the store (or the queue) for
    # other workers, instead of holding every run of a burst under leases it must heartbeat
    # and that would all wait out their TTL if it died.
    backlog_limit: int = 1024
    # Fires held back by a tenant or host cap count against this bound of their own before
    # they count against `backlog_limit`: one tenant's parked flood cannot use up what the
    # leaser may still lease for the others.
    parked_limit: int = 1024

    def __post_init__(self) -> None:
        problem = lease_timing_problem(self.lease_ttl_ms, self.heartbeat_ms)
        if problem is not None:
            raise ValueError(problem)
        if min(self.concurrency, self.webhook_concurrency) < 1 or self.max_per_host < 0:
            raise ValueError("concurrencies must be positive and max_per_host not negative")
        if self.parked_limit < 0:
            raise ValueError("parked_limit must not be negative")
        if self.unrecorded_limit < 1:
            raise ValueError("unrecorded_limit must be >= 1")
        self.limits()  # the tenant share is checked there

    def limits(self) -> dict[Pool, PoolLimits]:
        """The slots and caps of each pool (worker/admission.py); a tenant share of 1: no
        tenant cap."""
        share = self.tenant_share
        return {
            Pool.WEBHOOK: PoolLimits(
                slots=self.webhook_concurrency,
                tenant_cap=tenant_cap(self.webhook_concurrency, share),
                host_cap=self.max_per_host or None,
            ),
            Pool.TASK: PoolLimits(
                slots=self.concurrency, tenant_cap=tenant_cap(self.concurrency, share)
            ),
        }


class Executor:
    def __init__(
        self,
        store: ScheduleStore,
        clock: Clock,
        runner: Runner,
        config: ExecutorConfig,
        *,
        alerts: Alerter | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._runner = runner
        self._config = config
        self._alerts = alerts
        self._alert_tasks: set[asyncio.Task[object]] = set()
        # Fires whose FAILED outcome awaits its write, for the alert: run_id -> fire.
        self._to_alert: dict[int, Fire] = {}
        # Due fires waiting for a slot, by lane, and what each pool, tenant and origin runs.
        # A fire carries its job's tenant (read with its lease): the cap needs no read.
        self._admission: Admission[Fire] = Admission(config.limits())
        self._lanes: dict[tuple[str, str | None], Lane] = {}
        # A heap of fires not yet due, by instant in epoch µs: at an instant of a herd, the
        # heap pops 1,000 fires, and ints compare several times faster than datetimes.
        self._waiting: list[tuple[int, int, Fire]] = []
        self._order = itertools.count()  # ties in the heap: first submitted, first run
        self._timer: asyncio.TimerHandle | None = None
        self._timer_for = _NEVER_US  # the instant the timer is armed for, in epoch µs
        self._timer_at = 0.0  # when the timer is due, on the monotonic clock
        self._room = asyncio.Event()  # set when a finished fire may have made room
        self._idle = asyncio.Event()  # nothing ready, waiting or running
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._outcomes: list[RunOutcome] = []
        # Attempts finished and not yet turned into outcomes, and the lateness (start minus
        # planned instant, in seconds) of fires started since the last flush: _record_finished.
        self._finished: list[tuple[Fire, Attempt, datetime, datetime]] = []
        self._started: list[float] = []
        self._outcome_ready = asyncio.Event()
        # Set when unrecorded_limit outcomes wait (unless fires wait to start and those in
        # hand all fit under the hard bound), or at the bound: the write loop stops waiting
        # and writes. `_under_hard_limit` is clear while the hard bound's worth of
        # outcomes are unwritten (`_writing`: those of the batch being written): no runner
        # starts a fire then.
        self._flush_now = asyncio.Event()
        self._under_hard_limit = asyncio.Event()
        self._under_hard_limit.set()
        self._writing = 0
        self._hard_limit = UNRECORDED_HARD_FACTOR * config.unrecorded_limit
        # run_id -> (fence, lease end) of every fire we hold: the heartbeat renews the leases
        # that are at least a heartbeat old (worker/lease_timing.py).
        self._leased: dict[int, tuple[int, datetime]] = {}
        # run_id -> (fence, the runner task running it) while its runner is awaited, and the
        # (run_id, fence) leases the store refused to extend: those fires are stopped.
        self._running: dict[int, tuple[int, asyncio.Task[None]]] = {}
        self._stopped: set[tuple[int, int]] = set()
        self._lease_ttl = timedelta(milliseconds=config.lease_ttl_ms)
        self._heartbeat = timedelta(milliseconds=config.heartbeat_ms)
        self._retry_listeners: list[Callable[[datetime], None]] = []
        self._random = random.Random().random  # backoff jitter; tests may replace it
        # Fires submitted ahead of their instant, for the runner to prepare (ADR 0027).
        self._prepare = runner.prepare if isinstance(runner, Preparing) else None
        self._to_prepare: collections.deque[Fire] = collections.deque()
        self._preparing = False  # a _prepare_some is scheduled

    async def refresh_run_caps(self) -> None:
        """Apply the tenants' current max_concurrent_runs (ADR 0024; the store's cache, at
        most a second old) to what starts next: a cap that rose may let parked fires start."""
        caps = dict(await self._store.concurrency_caps())
        self._admission.set_run_caps(caps)
        self._start_runners()

    @property
    def backlog(self) -> int:
        """Fires held here that have not finished: waiting, parked or running."""
        return len(self._waiting) + self._admission.parked + self._running_count()

    def _running_count(self) -> int:
        return sum(self._admission.running(pool) for pool in Pool)

    def room(self) -> int:
        """How many more fires this executor wants to lease now: `backlog_limit` minus what
        it holds, where fires held back by a cap count only beyond `parked_limit`."""
        capped = self._admission.held_by_caps()
        metrics.PARKED.set(capped)
        active = self.backlog - capped
        overflow = max(capped - self._config.parked_limit, 0)
        return max(self._config.backlog_limit - active - overflow, 0)

    async def wait_for_room(self, timeout_s: float) -> bool:
        """Wait until the backlog is under its limit (or `timeout_s` passed); whether it is."""
        if self.room():
            return True
        self._room.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._room.wait(), timeout_s)
        return self.room() > 0

    def holds(self, run_id: int) -> bool:
        """Whether a fire of this run is waiting or running here."""
        return run_id in self._leased

    def held_run_ids(self) -> frozenset[int]:
        """The runs whose fires are waiting or running here (what a take-back leaves alone)."""
        return frozenset(self._leased)

    def on_retry_released(self, callback: Callable[[datetime], None]) -> None:
        """Call `callback(retry_at)` for each retry an outcome write releases."""
        self._retry_listeners.append(callback)

    def submit(self, fires: Sequence[Fire]) -> int:
        """Start each fire at its instant; returns at once, with how many fires were new
        (the scheduler's dispatch hook, and where the leaser and the queue consumer deliver).

        No task per fire: due fires go to a ready queue that at most `concurrency` runner
        tasks drain, and later ones wait in a heap behind one timer. A task, a sleep and a
        semaphore per fire were half of a worker's CPU in a no-op task burst (py-spy).

        A fire already held here at the same fence is not started again: taking back our own
        leases may return a run that the scheduler or the queue consumer of this process leased
        too, and hands over once its own reply is in."""
        if not fires:
            return 0
        now = self._clock.now()
        started = 0
        for fire in fires:
            held = self._leased.get(fire.run_id)
            if held is not None and held[0] == fire.fence_token:
                continue
            self._leased[fire.run_id] = (fire.fence_token, fire.lease_until)
            started += 1
            # A jittered or windowed fire starts at its planned instant (ADR 0022).
            if fire.starts_at <= now:
                self._park(fire)
            else:
                heapq.heappush(self._waiting, (to_us(fire.starts_at), next(self._order), fire))
                if self._prepare is not None:
                    self._to_prepare.append(fire)
        if self._to_prepare and not self._preparing:
            self._preparing = True
            asyncio.get_running_loop().call_soon(self._prepare_some)
        # Parked fires count against their own bound, not the backlog: a consumer waiting for
        # room may have some now (wait_for_room checks).
        self._room.set()
        self._idle.clear()
        self._start_runners()
        self._arm_timer()
        return started

    def _prepare_some(self) -> None:
        """Prepare up to PREPARE_PER_TURN waiting fires, then yield to the loop if more wait.
        A fire about to start (or gone: stopped, started) is left alone: it builds what it
        needs when it starts."""
        assert self._prepare is not None
        soon = to_us(self._clock.now()) + PREPARE_AHEAD_MIN_US
        for _ in range(min(PREPARE_PER_TURN, len(self._to_prepare))):
            fire = self._to_prepare.popleft()
            held = self._leased.get(fire.run_id)
            if held is None or held[0] != fire.fence_token or to_us(fire.starts_at) < soon:
                continue
            try:
                self._prepare(fire)
            except Exception:  # an optimisation that failed: the fire builds at its start
                log.exception("preparing a fire failed", extra={"action": "prepare_failed"})
        if self._to_prepare:
            asyncio.get_running_loop().call_soon(self._prepare_some)
        else:
            self._preparing = False

    def _park(self, fire: Fire) -> None:
        """A due fire waits here for a slot of its pool within its caps."""
        self._admission.park(
            fire, self._lane_of(fire), instant=fire.starts_at, retry=fire.attempt > 1
        )

    def _lane_of(self, fire: Fire) -> Lane:
        # One Lane object per tenant and target, kept: a herd parks 1,000 fires at its instant,
        # and building (and hashing) a new one for each was a visible share of that.
        target = fire.target
        key = (fire.tenant, None if isinstance(target, TaskTarget) else target.url)
        lane = self._lanes.get(key)
        if lane is None:
            if len(self._lanes) >= LANES_KEPT:
                self._lanes.clear()
            lane = self._lanes[key] = _lane(fire, fire.tenant)
        return lane

    def _arm_timer(self) -> None:
        if not self._waiting:
            return
        first = self._waiting[0][0]
        if self._timer is not None:
            if self._timer_for <= first:
                return
            self._timer.cancel()
        delay = (first - to_us(self._clock.now())) / 1e6
        delay = max(delay, TIMER_FLOOR_S) if delay > 0 else 0.0
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self._release_due)
        self._timer_for = first
        # When it is due on the monotonic clock, for runners to see it overdue (_park_overdue):
        # not the loop's time, which uvloop reads once per turn of the loop (a runner going
        # from fire to fire never sees it move), nor the handle's when(), which uvloop lacks.
        self._timer_at = time.monotonic() + delay

    def _release_due(self) -> None:
        self._timer = None
        self._park_due()
        self._start_runners()
        self._arm_timer()

    def _park_due(self) -> None:
        # Loop timers may fire early by up to their resolution (uvloop rounds to milliseconds
        # and reads a cached time), so the clock, not the timer, decides that an instant has
        # come: a fire released early would start early. What is not due yet re-arms.
        now = to_us(self._clock.now())
        waiting = self._waiting
        while waiting and waiting[0][0] <= now:
            self._park(heapq.heappop(waiting)[2])
        self._room.set()  # see submit

    def _park_overdue(self) -> None:
        """Between two fires of a runner: park the fires whose timer is overdue.

        A runner goes from one parked fire to the next without returning to the event loop as
        long as each fire finishes without suspending (a no-op or CPU-only task), so during a
        tenant's herd (~2,000 parked fires) the timer of another tenant's fire could not run
        until they had all been run: tens of milliseconds late (issue 21). Parked
        here instead, it is the next fire this runner takes: admission serves the tenant
        served least recently first. One read of the monotonic clock per fire."""
        timer = self._timer
        if timer is not None and time.monotonic() >= self._timer_at:
            timer.cancel()
            self._timer = None
            self._park_due()
            self._arm_timer()

    def _start_runners(self, pools: Sequence[Pool] = tuple(Pool)) -> None:
        """A runner task for each parked fire that may start now."""
        for pool in pools:
            while (taken := self._admission.take(pool)) is not None:
                task = asyncio.create_task(self._run_from(*taken))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _run_from(self, fire: Fire, lane: Lane) -> None:
        # A runner goes on with the next startable fire of its pool rather than ending, so a
        # burst costs a task per slot, not per fire; it exists only while it has a fire to
        # run, so runners are the fires in flight: the gauge moves per runner.
        metrics.INFLIGHT.inc()
        try:
            while True:
                await self._room_to_record()
                try:
                    await self._execute(fire)
                finally:
                    self._admission.done(lane)
                self._room.set()
                self._park_overdue()
                taken = self._admission.take(lane.pool)
                if taken is None:
                    break
                fire, lane = taken
                # What finished freed a slot, a tenant's share and an origin's: more than one
                # parked fire may have become startable.
                self._start_runners((lane.pool,))
        finally:
            metrics.INFLIGHT.dec()
            self._check_idle()

    async def _room_to_record(self) -> None:
        """Before a runner starts a fire (ADR 0034): wait while the hard bound's worth of
        outcomes are unwritten; and while the limit's worth gather (the write loop told to
        write), give the loop one turn, so that the write loop takes them and the reply to the
        batch being written is read. A runner whose fires never suspend goes from fire to fire
        without returning to the loop, and would otherwise run the whole backlog first."""
        await self._wait_under_hard_limit()
        if self._flush_now.is_set():
            await asyncio.sleep(0)  # one turn of the loop per fire
            await self._wait_under_hard_limit()  # the turn may have reached the bound

    async def _wait_under_hard_limit(self) -> None:
        while not self._under_hard_limit.is_set():
            await self._under_hard_limit.wait()  # (woken together: the first may close it)

    def _check_idle(self) -> None:
        if not self.backlog:
            self._idle.set()

    async def _execute(self, fire: Fire) -> None:
        lease = (fire.run_id, fire.fence_token)
        if lease in self._stopped:  # refused before it started: it never runs
            self._stopped.discard(lease)
            return
        started = self._clock.now()
        # Observed at the next flush (_record_finished), like everything a finished fire
        # leaves: the instant's herd pays only for starting its fires.
        self._started.append(started.timestamp() - fire.starts_at.timestamp())
        task = asyncio.current_task()
        assert task is not None
        self._running[fire.run_id] = (fire.fence_token, task)
        try:
            attempt = await self._runner(fire)
        except asyncio.CancelledError:
            if lease not in self._stopped:
                raise  # a shutdown
            self._stopped.discard(lease)
            if task.uncancel() > 0:
                raise  # a shutdown came too
            log.info(
                "fire stopped: the store refused its lease (a cancelled run)",
                extra={"action": "fire_stopped", "run_id": fire.run_id},
            )
            return
        except Exception as exc:  # a runner bug must not lose the outcome
            log.exception("runner failed", extra={"action": "runner_crashed"})
            attempt = Attempt(ok=False, error=f"internal error: {type(exc).__name__}")
        finally:
            if self._running.get(fire.run_id, (None,))[0] == fire.fence_token:
                del self._running[fire.run_id]
        self._finished.append((fire, attempt, started, self._clock.now()))
        self._outcome_ready.set()
        unwritten = self._unwritten()
        if unwritten >= self._hard_limit:
            self._flush_now.set()
            self._under_hard_limit.clear()
        elif len(self._finished) + len(self._outcomes) >= self._config.unrecorded_limit:
            # While fires wait to start, written now only if they and those running would
            # carry the unwritten past the hard bound: a herd that fits under it runs whole,
            # undisturbed by writes, and is written once its last fire has started (ADR 0034).
            parked = self._admission.parked
            if not parked or unwritten + len(self._running) + parked > self._hard_limit:
                self._flush_now.set()

    def _unwritten(self) -> int:
        """Finished fires whose outcomes are not written yet, the batch being written included."""
        return len(self._finished) + len(self._outcomes) + self._writing

    def _open_below_hard_limit(self) -> None:
        if self._unwritten() < self._hard_limit:
            self._under_hard_limit.set()

    def _record_finished(self) -> None:
        """Turn the attempts finished since the last flush into outcomes, and observe the
        lateness and duration metrics of the fires started and finished since then.

        This is done here, in the flush, rather than as each fire ends: when a herd of fires
        is due at one instant and its fires never suspend (a no-op task), a runner goes from
        fire to fire without returning to the loop, so the last fire of the herd starts only
        after every earlier fire's bookkeeping too. Deferred, it costs the same CPU but not
        at the instant (issue 22's aligned load: ~1,000 fires at the top of each second)."""
        for lateness in self._started:
            # From the planned instant: a jittered fire is not late by its delay.
            metrics.FIRE_LATENESS.observe(lateness if lateness > 0 else 0.0)
        self._started.clear()
        finished, self._finished = self._finished, []
        for fire, attempt, started, ended in finished:
            metrics.RUN_SECONDS.observe((ended - started).total_seconds())
            outcome = outcome_for(
                fire,
                attempt,
                started=started,
                finished=ended,
                worker=self._config.node_id,
                rand=self._random(),
            )
            if outcome.status is RunStatus.FAILED and fire.on_failure is not None:
                self._to_alert[fire.run_id] = fire
            self._outcomes.append(outcome)

    async def heartbeat(self) -> int:
        """Renew, in one batch, the leases of the fires held here (waiting or running) that
        are at least a heartbeat old; returns how many the store extended. A lease whose fence
        moved on (overlap cancel_previous cancelled the run, or it ran out and another worker
        took the run) is not extended, and its fire is stopped (`_stop`): the outcome of this
        attempt would be rejected the same way."""
        metrics.PARKED.set(self._admission.held_by_caps())  # sampled here and by `room`
        now = self._clock.now()
        due = renew_by(now, self._lease_ttl, self._heartbeat)
        leases = [(run_id, fence) for run_id, (fence, end) in self._leased.items() if end <= due]
        if not leases:
            return 0
        until = now + self._lease_ttl
        extended = await self._store.extend_leases(leases, lease_until=until)
        for run_id, fence in leases:
            held = self._leased.get(run_id)
            if held is None or held[0] != fence:
                continue  # finished or leased anew meanwhile
            if (run_id, fence) in extended.leases:
                self._leased[run_id] = (fence, until)
            else:
                self._stop(run_id, fence)
        return extended

    def _stop(self, run_id: int, fence: int) -> None:
        """Stop the fire of a lease the store refused: cancel its runner if it is running (a
        webhook's request is aborted), or let it be dropped when its turn comes."""
        del self._leased[run_id]
        self._stopped.add((run_id, fence))
        running = self._running.get(run_id)
        if running is not None and running[0] == fence:
            running[1].cancel()

    async def flush(self) -> int:
        """Write the outcomes gathered so far in one batch; returns how many were applied."""
        self._flush_now.clear()
        self._record_finished()
        batch, self._outcomes = self._outcomes, []
        if not batch:
            self._open_below_hard_limit()
            return 0
        self._writing = len(batch)
        try:
            applied = await self._store.finish_runs(batch)
        except Exception:
            self._outcomes[:0] = batch  # keep them for the next flush; never drop an outcome
            raise
        finally:
            self._writing = 0
            self._open_below_hard_limit()
        for outcome in batch:
            # Only the lease this outcome was for: after its lease ran out, this executor may
            # hold the same run again at a newer fence, which must keep its heartbeat.
            held = self._leased.get(outcome.run_id)
            if held is not None and held[0] == outcome.fence_token:
                del self._leased[outcome.run_id]
            self._stopped.discard((outcome.run_id, outcome.fence_token))  # it ended first
            if outcome.retry_at is not None:
                for listener in self._retry_listeners:
                    listener(outcome.retry_at)
            alerting = self._to_alert.pop(outcome.run_id, None)
            if alerting is not None and outcome.run_id in applied.run_ids:
                self._alert(alerting, outcome)
        _count(batch)
        if applied < len(batch):
            metrics.STALE_OUTCOMES.inc(len(batch) - applied)
            log.warning("stale outcomes rejected by fence", extra={"action": "stale_outcome"})
        return applied

    def _alert(self, fire: Fire, outcome: RunOutcome) -> None:
        if self._alerts is None:
            return
        task: asyncio.Task[object] = asyncio.create_task(self._alerts(fire, outcome))
        self._alert_tasks.add(task)
        task.add_done_callback(self._alert_tasks.discard)

    async def run(self, stop: asyncio.Event) -> None:
        """Write outcomes in batches and heartbeat the leases of held fires until `stop`; then
        drain the fires in flight."""
        loop = asyncio.get_running_loop()
        next_heartbeat = 0.0
        failures = 0  # consecutive failed rounds: while the store is down, back off, log once
        while not stop.is_set():
            try:
                await self.flush()
                if loop.time() >= next_heartbeat:
                    await self.refresh_run_caps()
                    await self.heartbeat()
                    next_heartbeat = loop.time() + self._config.heartbeat_ms / 1000
            except Exception:
                failures += 1
                if failures == 1:
                    log.exception(
                        "executor housekeeping failed", extra={"action": "executor_failed"}
                    )
                else:
                    log.debug("executor housekeeping failed again", exc_info=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), outage_pause_s(failures))
                continue
            if failures:
                log.warning(
                    "executor housekeeping recovered",
                    extra={"action": "executor_recovered", "failed_rounds": failures},
                )
                failures = 0
            await self._pause(stop, next_heartbeat - loop.time())
        await self.drain()

    async def _pause(self, stop: asyncio.Event, heartbeat_in_s: float) -> None:
        """Wait for outcomes (or the next heartbeat), then for a flush interval more, so that
        outcomes are written together rather than one commit each."""
        if not self._outcomes and not self._finished:
            wait_s = min(max(heartbeat_in_s, 0.0), MAX_IDLE_S)
            await first_of([self._outcome_ready, stop], wait_s)
            self._outcome_ready.clear()
        # Every wait below ends early once unrecorded_limit outcomes wait (`_flush_now`).
        wake = [stop, self._flush_now]
        if (self._outcomes or self._finished) and not stop.is_set():
            await first_of(wake, self._config.flush_interval_ms / 1000)
            # While due fires still wait to start (a herd at one instant), they go first: a
            # flush is CPU on this loop (the outcomes built, the batch encoded), ~a third of
            # the executor's per-fire cost, and during a herd it delayed the herd's last
            # starts. Held at most FLUSH_HOLD_MAX_S, so a tenant's flood parked behind a cap
            # delays its outcomes' writes by that much, not more.
            held_until = time.monotonic() + FLUSH_HOLD_MAX_S
            while self._admission.parked and not _any_set(wake):
                left = held_until - time.monotonic()
                if left <= 0:
                    break
                await first_of(wake, min(left, self._config.flush_interval_ms / 1000))

    async def drain(self) -> None:
        """Wait for in-flight fires, write their outcomes, then let pending alerts finish
        (each gives up after its few quick attempts)."""
        while not self._idle.is_set():
            # Runners held at the hard bound wait for a write: this loop now writes.
            await first_of([self._idle, self._flush_now], MAX_IDLE_S)
            if self._flush_now.is_set() or not self._under_hard_limit.is_set():
                await self.flush()
        await self.flush()
        if self._alert_tasks:
            await asyncio.gather(*list(self._alert_tasks), return_exceptions=True)


def _any_set(events: Sequence[asyncio.Event]) -> bool:
    return any(event.is_set() for event in events)


def _lane(fire: Fire, tenant: str) -> Lane:
    """The caps `fire` counts against: a task's tenant; a webhook's tenant and origin."""
    if isinstance(fire.target, TaskTarget):
        return Lane(Pool.TASK, tenant)
    return Lane(Pool.WEBHOOK, tenant, origin_of(fire.target.url))


def _count(batch: Sequence[RunOutcome]) -> None:
    # One increment per status and batch: a labelled counter per outcome was a visible
    # share of a worker's CPU at thousands of fires per second.
    by_status = collections.Counter(outcome.status for outcome in batch)
    for status, count in by_status.items():
        if status is RunStatus.PENDING:
            metrics.RETRIES.inc(count)
        else:
            metrics.RUNS.labels(status=status.value).inc(count)
    for outcome in batch:
        if outcome.status is RunStatus.FAILED:
            metrics.DEAD_LETTERS.inc()
            log.warning(
                "occurrence dead-lettered after attempt %d: %s",
                outcome.attempt,
                outcome.error,
                extra={"action": "dead_lettered", "run_id": outcome.run_id},
            )
