"""SchedulerService.run_once against the in-memory store with a manual clock."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY

from tickwork.clock import ManualClock, SystemClock
from tickwork.domain.jobs import AtTrigger, EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Envelope, Fire, RunStatus, occurrence_key
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.base import DEFAULT_TAKEOVER_GRACE_MS, Claimed, ClaimPlan, DueJob, Topic
from tickwork.store.memory import MemoryStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)


def job(n: int, schedule: Schedule, next_run_at: datetime) -> Job:
    return Job(
        id=f"{n:032x}",
        name=f"j{n}",
        schedule=schedule,
        target=WebhookTarget(url="http://127.0.0.1:9/"),
        state=JobState.SCHEDULED,
        next_run_at=next_run_at,
        created_at=T0,
        updated_at=T0,
    )


class Collector:
    def __init__(self) -> None:
        self.fires: list[Fire] = []

    def __call__(self, fires: Sequence[Fire]) -> None:
        self.fires.extend(fires)


async def scheduler(store: MemoryStore, **config: int) -> tuple[SchedulerService, Collector]:
    sink = Collector()
    service = SchedulerService(
        store, ManualClock(T0), SchedulerConfig(node_id="n1", **config), dispatch=sink
    )
    return service, sink


async def test_run_once_claims_only_what_is_due_and_dispatches_it() -> None:
    store = MemoryStore()
    every = Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0))
    await store.create_job(job(1, every, T0))
    await store.create_job(job(2, every, T0 + 10 * S))
    service, sink = await scheduler(store, lookahead_ms=50)
    result = await service.run_once(T0)
    assert [f.job_id for f in result.fires] == [f"{1:032x}"]
    assert sink.fires == result.fires
    assert (result.handed_off, result.claimed) == ([], 1)
    assert result.settled_below == result.scanned_to == T0 + 50 * MS
    assert (result.fires[0].attempt, result.fires[0].lease_until) == (1, T0 + 60 * S + 50 * MS)
    assert (await store.get_job(f"{1:032x}")).next_run_at == T0 + S
    assert (await store.get_job(f"{2:032x}")).next_run_at == T0 + 10 * S


async def test_nothing_fires_before_its_instant_minus_the_claim_ahead() -> None:
    store = MemoryStore()
    await store.create_job(job(1, Schedule(trigger=AtTrigger(at=T0 + S)), T0 + S))
    service, _sink = await scheduler(store, lookahead_ms=50)
    assert (await service.run_once(T0 + timedelta(milliseconds=940))).fires == []
    result = await service.run_once(T0 + timedelta(milliseconds=960))
    assert [f.scheduled_for for f in result.fires] == [T0 + S]  # claimed ahead, for its instant
    assert (await store.get_job(f"{1:032x}")).state is JobState.COMPLETED


async def test_a_full_batch_is_reported_so_the_loop_claims_again_at_once() -> None:
    store = MemoryStore()
    every = Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0))
    for n in range(5):
        await store.create_job(job(n, every, T0))
    service, sink = await scheduler(store, batch_size=3)
    first = await service.run_once(T0)
    second = await service.run_once(T0)
    assert (len(first.fires), first.full_batch) == (3, True)
    assert (len(second.fires), second.full_batch) == (2, False)
    assert len({f.job_id for f in sink.fires}) == 5


async def test_each_tick_fires_the_next_occurrence_no_gaps_no_repeats() -> None:
    store = MemoryStore()
    await store.create_job(job(1, Schedule(trigger=EveryTrigger(interval_ms=250, anchor=T0)), T0))
    service, sink = await scheduler(store, lookahead_ms=0)
    for step in range(12):  # ticks at 100 ms: some find nothing, none skip an occurrence
        await service.run_once(T0 + step * timedelta(milliseconds=100))
    assert [f.scheduled_for for f in sink.fires] == [
        T0 + k * timedelta(milliseconds=250) for k in range(5)
    ]


# -- hand-off: no executor in this process ------------------------------------------------------


class Published:
    """Stands in for the publisher of an external queue."""

    def __init__(self, *, fail: bool = False) -> None:
        self.envelopes: list[Envelope] = []
        self.fail = fail

    async def __call__(self, envelopes: Sequence[Envelope]) -> None:
        if self.fail:
            raise ConnectionError("queue down")
        self.envelopes.extend(envelopes)


def fires_total() -> float:
    return REGISTRY.get_sample_value("tickwork_fires_total", {"origin": "schedule"}) or 0.0


def handing_off(store: MemoryStore, publish: Published | None = None) -> SchedulerService:
    config = SchedulerConfig(node_id="s1", lookahead_ms=50)
    return SchedulerService(store, ManualClock(T0), config, dispatch=None, publish=publish)


async def test_without_an_executor_runs_are_handed_off_and_their_envelopes_published() -> None:
    store = MemoryStore()
    every = Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0))
    for n in (1, 2):
        await store.create_job(job(n, every, T0 + S))
    published = Published()
    counted = fires_total()

    result = await handing_off(store, published).run_once(T0 + 960 * MS)  # claimed ahead

    assert result.fires == []
    assert (result.due, result.claimed, result.conflicts) == (2, 2, 0)
    assert published.envelopes == result.handed_off
    assert sorted((e.job_id, e.key, e.scheduled_for, e.attempt) for e in result.handed_off) == [
        (f"{n:032x}", occurrence_key(f"{n:032x}", T0 + S), T0 + S, 0) for n in (1, 2)
    ]
    assert fires_total() - counted == 2
    # Left in the store for any worker, from their instant on (not leased to the scheduler).
    assert (
        await store.lease_runs(now=T0 + 999 * MS, owner="w", lease_until=T0 + 9 * S, limit=9) == []
    )
    leased = await store.lease_runs(now=T0 + S, owner="w", lease_until=T0 + 9 * S, limit=9)
    assert sorted((f.run_id, f.fence_token, f.attempt) for f in leased) == sorted(
        (e.run_id, e.fence_token + 1, 1) for e in result.handed_off
    )


async def test_the_table_queue_alone_needs_no_publisher() -> None:
    store = MemoryStore()
    await store.create_job(job(1, Schedule(trigger=AtTrigger(at=T0)), T0))
    woken = store.watch("runs")  # how workers of this process learn of the hand-off
    result = await handing_off(store).run_once(T0)
    assert [e.job_id for e in result.handed_off] == [f"{1:032x}"]
    assert woken.is_set()
    assert (await store.get_job(f"{1:032x}")).state is JobState.COMPLETED


async def test_a_failed_publish_is_logged_and_the_runs_stay_in_the_store(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore()
    await store.create_job(job(1, Schedule(trigger=AtTrigger(at=T0)), T0))
    with caplog.at_level(logging.ERROR, logger="tickwork.scheduler"):
        result = await handing_off(store, Published(fail=True)).run_once(T0)
    assert result.claimed == 1
    assert [r.action for r in caplog.records] == ["publish_failed"]  # type: ignore[attr-defined]
    [run] = await store.list_runs(f"{1:032x}")
    assert (run.id, run.status) == (result.handed_off[0].run_id, RunStatus.PENDING)
    assert await store.leasable_runs(T0) == 1


class StaleScan(MemoryStore):
    """A due-scan that read the jobs before another scheduler claimed them."""

    stale: list[DueJob] | None = None

    async def due_jobs(
        self,
        until: datetime,
        limit: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        if self.stale is not None:
            return self.stale
        return await super().due_jobs(until, limit, not_before=not_before, partitions=partitions)


async def test_a_hand_off_another_scheduler_won_counts_as_a_conflict() -> None:
    store = StaleScan()
    every = Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0))
    for n in range(3):
        await store.create_job(job(n, every, T0))
    store.stale = await store.due_jobs(T0, 10)
    published = Published()
    winner, loser = handing_off(store, published), handing_off(store, published)
    assert (await winner.run_once(T0)).claimed == 3
    lost = await loser.run_once(T0)
    assert (lost.due, lost.claimed, lost.conflicts, lost.handed_off) == (3, 0, 3, [])
    assert lost.settled_below is None  # the next-due query must not skip what it left behind
    assert len(published.envelopes) == 3  # the loser published nothing


class WatchedSink(Collector):
    """Lets a test await a condition on the fires dispatched so far."""

    def __init__(self) -> None:
        super().__init__()
        self._arrived = asyncio.Condition()

    def __call__(self, fires: Sequence[Fire]) -> None:
        super().__call__(fires)
        asyncio.get_running_loop().create_task(self._announce())

    async def _announce(self) -> None:
        async with self._arrived:
            self._arrived.notify_all()

    async def until(self, condition: Callable[[list[Fire]], bool], timeout_s: float) -> None:
        async def wait() -> None:
            async with self._arrived:
                await self._arrived.wait_for(lambda: condition(self.fires))

        await asyncio.wait_for(wait(), timeout_s)


@contextlib.asynccontextmanager
async def looping(service: SchedulerService) -> AsyncIterator[None]:
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


def every_10ms(start: datetime) -> Schedule:
    return Schedule(trigger=EveryTrigger(interval_ms=10, anchor=start))


async def test_a_next_occurrence_within_the_last_scan_is_not_slept_past() -> None:
    """A 10 ms job claimed 50 ms ahead is due again inside the scan it was claimed in: the
    loop's next-due query must still see it, or the scheduler would sleep its idle minute."""
    store = MemoryStore()
    start = SystemClock().now()
    await store.create_job(job(1, every_10ms(start), start))
    sink = WatchedSink()
    config = SchedulerConfig(node_id="n1", lookahead_ms=50, max_idle_ms=60_000)
    service = SchedulerService(store, SystemClock(), config, dispatch=sink)
    async with looping(service):
        await sink.until(lambda fires: len(fires) >= 10, timeout_s=10)
    instants = [f.scheduled_for for f in sink.fires[:10]]
    assert instants == [start + k * 10 * MS for k in range(10)]


class DeafStore(MemoryStore):
    """Its writes wake nobody, like a PostgreSQL store whose LISTEN connection is down."""

    def watch(self, topic: Topic) -> asyncio.Event:
        return asyncio.Event()


@pytest.mark.parametrize(
    ("deaf", "max_idle_ms"),
    [
        (False, 60_000),  # the write wakes the loop, which then scans from the bottom
        (True, 200),  # nobody is told; the periodic scan from the bottom finds it
    ],
)
async def test_a_job_written_below_the_scan_floor_still_fires(deaf: bool, max_idle_ms: int) -> None:
    """A 10 ms job keeps the loop ticking with a raised floor; a job then written with an
    instant below that floor must fire anyway."""
    store = DeafStore() if deaf else MemoryStore()
    start = SystemClock().now()
    await store.create_job(job(1, every_10ms(start), start))
    sink = WatchedSink()
    config = SchedulerConfig(node_id="n1", lookahead_ms=50, max_idle_ms=max_idle_ms)
    service = SchedulerService(store, SystemClock(), config, dispatch=sink)
    late = start - 10 * S  # below any floor the ticks can have set
    async with looping(service):
        await sink.until(lambda fires: len(fires) >= 5, timeout_s=10)
        await store.create_job(job(2, Schedule(trigger=AtTrigger(at=late)), late))
        await sink.until(lambda fires: any(f.job_id == f"{2:032x}" for f in fires), 10)


class ScanLog(DeafStore):
    """A deaf store that logs the floor (`not_before`) of every due scan; a test can await a
    number of scans."""

    def __init__(self) -> None:
        super().__init__()
        self.floors: list[datetime | None] = []
        self._scanned = asyncio.Condition()

    async def due_jobs(
        self,
        until: datetime,
        limit: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> list[DueJob]:
        self.floors.append(not_before)
        async with self._scanned:
            self._scanned.notify_all()
        return await super().due_jobs(until, limit, not_before=not_before, partitions=partitions)

    async def until_scans(self, count: int, timeout_s: float = 5) -> None:
        async def wait() -> None:
            async with self._scanned:
                await self._scanned.wait_for(lambda: len(self.floors) >= count)

        await asyncio.wait_for(wait(), timeout_s)


async def test_the_periodic_scan_from_the_bottom_follows_the_injected_clock() -> None:
    """The scan floor drops every `max_idle_ms` by the scheduler's clock, not the machine's: on
    a ManualClock that stands still the floor stays up however long the loop runs, and moved
    past `max_idle_ms` the next scan starts from the bottom and finds the job nobody announced."""
    store = ScanLog()
    clock = ManualClock(T0)
    await store.create_job(job(1, every_10ms(T0), T0))  # keeps the loop ticking, floor raised
    sink = WatchedSink()
    config = SchedulerConfig(node_id="n1", lookahead_ms=50, max_idle_ms=60_000)
    service = SchedulerService(store, clock, config, dispatch=sink)
    late = T0 - 10 * S  # below any floor the ticks can have set
    hidden = f"{2:032x}"
    async with looping(service):
        await sink.until(lambda fires: len(fires) >= 5, timeout_s=5)
        await store.create_job(job(2, Schedule(trigger=AtTrigger(at=late)), late))
        written_at = len(store.floors)
        await store.until_scans(written_at + 5)
        assert None not in store.floors[written_at:]  # every scan since started at the floor
        assert all(f.job_id != hidden for f in sink.fires)

        clock.advance(timedelta(milliseconds=config.max_idle_ms + 1))
        await sink.until(lambda fires: any(f.job_id == hidden for f in fires), timeout_s=5)
    assert None in store.floors[written_at:]


# -- the loop publishes one batch while it claims the next ------------------------------------


class GatedPublisher:
    """A publisher whose every call waits for a permit the test releases; it logs each call's
    start and end in `events`."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.batches: list[list[Envelope]] = []
        self.permits = asyncio.Semaphore(0)
        self._changed = asyncio.Condition()

    async def __call__(self, envelopes: Sequence[Envelope]) -> None:
        self.batches.append(list(envelopes))
        self.events.append(f"publish {len(self.batches)} started")
        await self.notify()
        number = len(self.batches)
        await self.permits.acquire()
        self.events.append(f"publish {number} done")

    async def notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def until(self, condition: Callable[[], bool]) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(condition), 5)


class ClaimLog(MemoryStore):
    """Logs each hand-off claim in `events` and wakes a test waiting for one."""

    def __init__(self, events: list[str], publisher: GatedPublisher) -> None:
        super().__init__()
        self.events = events
        self.publisher = publisher
        self.claims = 0

    async def claim_hand_off(
        self,
        plans: Sequence[ClaimPlan],
        *,
        owner: str,
        now: datetime,
        takeover_grace_ms: int = DEFAULT_TAKEOVER_GRACE_MS,
    ) -> Claimed[Envelope]:
        envelopes = await super().claim_hand_off(
            plans, owner=owner, now=now, takeover_grace_ms=takeover_grace_ms
        )
        self.claims += 1
        self.events.append(f"claim {self.claims}")
        await self.publisher.notify()  # one condition wakes the test for both logs
        return envelopes


async def test_the_loop_claims_the_next_batch_while_the_last_is_published() -> None:
    events: list[str] = []
    publisher = GatedPublisher(events)
    store = ClaimLog(events, publisher)
    for n in range(6):
        await store.create_job(job(n, Schedule(trigger=AtTrigger(at=T0)), T0))
    config = SchedulerConfig(node_id="s1", batch_size=2, lookahead_ms=50)
    service = SchedulerService(store, ManualClock(T0), config, dispatch=None, publish=publisher)
    stop = asyncio.Event()
    running = asyncio.create_task(service.run(stop))
    running.add_done_callback(lambda _: events.append("stopped"))

    # The first batch's publish hangs; the second batch is claimed meanwhile, and its publish
    # waits for the first (one in flight at most).
    await publisher.until(lambda: store.claims >= 2)
    assert sorted(events) == ["claim 1", "claim 2", "publish 1 started"]

    # Stopped with a publish in flight: run() returns only once it went out.
    publisher.permits.release()
    publisher.permits.release()
    await publisher.until(lambda: "publish 3 started" in events)
    stop.set()
    # Not an event to await: this checks that run() does NOT end while publish 3 hangs.
    done, _ = await asyncio.wait({running}, timeout=0.2)
    assert not done
    publisher.permits.release()
    await asyncio.wait_for(running, 5)
    assert events[-2:] == ["publish 3 done", "stopped"]
    # Every envelope went out once, in claim order, one publish per claimed batch.
    assert [len(b) for b in publisher.batches] == [2, 2, 2]
    keys = [e.key for batch in publisher.batches for e in batch]
    assert sorted(keys) == sorted(occurrence_key(f"{n:032x}", T0) for n in range(6))
    assert len(set(keys)) == 6


class SlowClaims(MemoryStore):
    """A store whose claims take `took` on the scheduler's clock (a busy database)."""

    def __init__(self, clock: ManualClock, took: timedelta) -> None:
        super().__init__()
        self.clock, self.took = clock, took

    async def claim(self, plans: Sequence[ClaimPlan], **kwargs: object) -> Claimed[Fire]:
        self.clock.advance(self.took)
        return await super().claim(plans, **kwargs)  # type: ignore[arg-type]


async def test_slow_ticks_claim_further_ahead_and_quick_ones_bring_the_reach_back() -> None:
    clock = ManualClock(T0)
    store = SlowClaims(clock, 150 * MS)
    for n, due in enumerate([T0, T0 + 400 * MS, T0 + 20 * S + 300 * MS]):
        await store.create_job(job(n, Schedule(trigger=AtTrigger(at=due)), due))
    sink = Collector()
    config = SchedulerConfig(node_id="n1", lookahead_ms=200, max_idle_ms=1000)
    service = SchedulerService(store, clock, config, dispatch=sink)
    first = await service.run_once(T0)
    assert [f.scheduled_for for f in first.fires] == [T0]  # 200 ms ahead, as configured
    # That tick took 150 ms: the next reaches three times as far, 450 ms, and claims the job
    # due 400 ms on, leased for that much longer.
    second = await service.run_once(T0 + 10 * MS)
    assert second.scanned_to == T0 + 460 * MS
    assert [f.scheduled_for for f in second.fires] == [T0 + 400 * MS]
    assert second.fires[0].lease_until == T0 + 10 * MS + 450 * MS + 60 * S
    # Once the slow ticks are out of the last eight (nothing due: no claim, no time), the
    # reach is the look-ahead again, and the job due 300 ms on waits for its turn.
    reaches = [(await service.run_once(T0 + k * S)).scanned_to - T0 - k * S for k in range(1, 10)]
    assert reaches == [450 * MS] * 8 + [200 * MS]
    late = await service.run_once(T0 + 20 * S)
    assert late.fires == []
    assert late.scanned_to == T0 + 20 * S + 200 * MS


class LookLog(ScanLog):
    """A ScanLog that also keeps the horizon and cap of each herd look (`count_due`)."""

    def __init__(self) -> None:
        super().__init__()
        self.looks: list[tuple[datetime, int]] = []

    async def count_due(
        self,
        until: datetime,
        cap: int,
        *,
        not_before: datetime | None = None,
        partitions: Collection[int] | None = None,
    ) -> int:
        self.looks.append((until, cap))
        return await super().count_due(until, cap, not_before=not_before, partitions=partitions)


def herd_scheduler(store: MemoryStore, sink: Collector, clock: ManualClock) -> SchedulerService:
    config = SchedulerConfig(
        node_id="n1", batch_size=10, lookahead_ms=50, max_idle_ms=60_000, herd_lead_ms=600
    )
    return SchedulerService(store, clock, config, dispatch=sink)


async def test_a_herd_is_claimed_whole_its_lead_before_its_instant() -> None:
    """25 jobs due at one instant, batches of 10: 500 ms before the instant (inside the 600 ms
    herd lead, far outside the 50 ms look-ahead) the loop finds more than a batch due and
    claims all three batches at once, each fire leased from its instant for the TTL (ADR
    0036). The clock stands still: nothing but the herd look can have claimed them."""
    due = T0 + S
    store = MemoryStore()
    for n in range(25):
        await store.create_job(job(n, Schedule(trigger=AtTrigger(at=due)), due))
    sink = WatchedSink()
    async with looping(herd_scheduler(store, sink, ManualClock(due - 500 * MS))):
        await sink.until(lambda fires: len(fires) == 25, timeout_s=5)
    assert {f.scheduled_for for f in sink.fires} == {due}
    assert len({f.job_id for f in sink.fires}) == 25
    assert {f.lease_until for f in sink.fires} == {due + 50 * MS + 60 * S}


async def test_a_batch_or_less_at_one_instant_waits_for_the_usual_reach() -> None:
    """Ten jobs at one instant are one batch, no herd: the loop looks (a count of up to a
    batch and one, to the instant plus the look-ahead) and claims nothing 500 ms ahead; nor
    does it look at the same instant twice while its ticks go on."""
    due = T0 + S
    store = LookLog()
    for n in range(10):
        await store.create_job(job(n, Schedule(trigger=AtTrigger(at=due)), due))
    sink = WatchedSink()
    async with looping(herd_scheduler(store, sink, ManualClock(due - 500 * MS))):
        await store.until_scans(3)
    assert store.looks == [(due + 50 * MS, 11)]
    assert sink.fires == []
