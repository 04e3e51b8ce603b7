"""The paced lane over a real store (memory) and a manual clock: pace, order, the process cap,
fairness between backfills, that its runs leave the job's schedule alone, and its metrics."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

from tickwork.clock import ManualClock
from tickwork.domain.backfills import Backfill, BackfillKind, BackfillState
from tickwork.domain.jobs import CronTrigger, Job, JobState, OverlapPolicy, Schedule, WebhookTarget
from tickwork.domain.runs import RunOrigin, RunOutcome, RunStatus
from tickwork.scheduler.backfill_lane import BackfillLane, LaneConfig
from tickwork.store.memory import MemoryStore

T0 = datetime(2026, 3, 2, tzinfo=UTC)
TICK = timedelta(milliseconds=200)
DAY = timedelta(days=1)


def job(n: int, *, overlap: OverlapPolicy = OverlapPolicy.ALLOW) -> Job:
    return Job(
        id=f"{n:032x}",
        name=f"job-{n}",
        schedule=Schedule(trigger=CronTrigger(expr="* * * * *"), overlap=overlap),
        target=WebhookTarget(url="http://127.0.0.1:9/hook"),
        state=JobState.SCHEDULED,
        next_run_at=T0 + timedelta(minutes=1),
        created_at=T0 - DAY,
        updated_at=T0 - DAY,
    )


def backfill_of(j: Job, *, rate: float, total: int = 1440) -> Backfill:
    return Backfill(
        id=0,
        job_id=j.id,
        tenant=j.tenant,
        kind=BackfillKind.BACKFILL,
        from_at=T0 - DAY,
        to_at=T0,
        cursor_at=None,
        total=total,
        done=0,
        state=BackfillState.RUNNING,
        rate_per_s=rate,
        created_at=T0,
        updated_at=T0,
        paced_at=T0,
    )


async def setup(
    *, lane_rate: float = 50.0, overlap: OverlapPolicy = OverlapPolicy.ALLOW
) -> tuple[MemoryStore, ManualClock, BackfillLane, Job]:
    clock = ManualClock(T0)
    store = MemoryStore(clock=clock)
    j = job(1, overlap=overlap)
    await store.create_job(j)
    lane = BackfillLane(store, clock, LaneConfig(rate_per_s=lane_rate))
    return store, clock, lane, j


async def test_a_day_is_replayed_in_order_at_the_backfills_rate() -> None:
    store, clock, lane, j = await setup(lane_rate=1000)
    created = await store.create_backfill(backfill_of(j, rate=100))
    enqueued_by_second: list[int] = []
    for _ in range(100):  # 20 s of rounds, every 200 ms
        clock.advance(TICK)
        await lane.run_once()
        enqueued_by_second.append((await store.get_backfill(created.id)).done)
    # 100/s: 20 per round, never more than rate x elapsed.
    for rounds, done in enumerate(enqueued_by_second, 1):
        assert done <= 100 * rounds * 0.2 + 1e-9
    assert enqueued_by_second.index(1440) + 1 == 72  # 1,440 at 20 a round: done in 14.4 s
    stored = await store.get_backfill(created.id)
    assert (stored.state, stored.done, stored.cursor_at) == (
        BackfillState.COMPLETED,
        1440,
        T0 - timedelta(minutes=1),
    )
    runs = await store.list_runs(j.id, limit=5000)
    assert len(runs) == 1440
    assert {r.origin for r in runs} == {RunOrigin.BACKFILL}
    by_id = sorted(runs, key=lambda r: r.id)
    assert [r.scheduled_for for r in by_id] == [
        T0 - DAY + timedelta(minutes=m) for m in range(1440)
    ]
    assert len({r.key for r in runs}) == 1440
    after = await store.get_job(j.id)
    assert (after.next_run_at, after.fired_count, after.fence_token) == (j.next_run_at, 0, 0)


async def test_the_process_cap_bounds_every_backfill_together_and_shares_it() -> None:
    store, clock, lane, j = await setup(lane_rate=10)
    other = job(2)
    await store.create_job(other)
    a = await store.create_backfill(backfill_of(j, rate=1000))
    b = await store.create_backfill(backfill_of(other, rate=1000))
    for _ in range(50):  # 10 s
        clock.advance(TICK)
        await lane.run_once()
    done_a = (await store.get_backfill(a.id)).done
    done_b = (await store.get_backfill(b.id)).done
    assert 95 <= done_a + done_b <= 10 * 10 + 10  # 10/s for 10 s (plus one window)
    assert abs(done_a - done_b) <= 10  # taking turns, neither starves


async def test_replaying_the_range_again_adds_no_run() -> None:
    store, clock, lane, j = await setup(lane_rate=10_000)
    first = await store.create_backfill(backfill_of(j, rate=10_000))
    second = await store.create_backfill(backfill_of(j, rate=10_000))
    for _ in range(5):
        clock.advance(TICK)
        await lane.run_once()
    assert (await store.get_backfill(first.id)).state is BackfillState.COMPLETED
    assert (await store.get_backfill(second.id)).state is BackfillState.COMPLETED
    assert len(await store.list_runs(j.id, limit=5000)) == 1440


async def test_one_at_a_time_waits_for_each_run_to_finish() -> None:
    store, clock, lane, j = await setup(overlap=OverlapPolicy.SKIP)
    created = await store.create_backfill(replace(backfill_of(j, rate=100), total=3))
    for _ in range(3):
        clock.advance(TICK)
        await lane.run_once()
    assert (await store.get_backfill(created.id)).done == 1  # the first still pending
    for expected in (2, 3):
        [fire] = await store.lease_runs(
            now=clock.now(), owner="w", lease_until=clock.now() + DAY, limit=10
        )
        outcome = RunOutcome(
            run_id=fire.run_id,
            job_id=fire.job_id,
            attempt=fire.attempt,
            fence_token=fire.fence_token,
            status=RunStatus.SUCCEEDED,
            started_at=clock.now(),
            finished_at=clock.now(),
        )
        assert await store.finish_runs([outcome]) == 1
        clock.advance(TICK)
        await lane.run_once()
        assert (await store.get_backfill(created.id)).done == expected


async def test_a_cancelled_backfill_enqueues_no_more() -> None:
    store, clock, lane, j = await setup()
    created = await store.create_backfill(backfill_of(j, rate=10))
    clock.advance(TICK)
    await lane.run_once()
    done = (await store.get_backfill(created.id)).done
    await store.cancel_backfill(created.id, now=clock.now())
    for _ in range(10):
        clock.advance(TICK)
        await lane.run_once()
    assert (await store.get_backfill(created.id)).done == done
    assert len(await store.list_runs(j.id)) == done


async def test_an_edit_during_a_backfill_applies_to_what_is_not_enqueued_yet() -> None:
    store, clock, lane, j = await setup(lane_rate=1000)
    created = await store.create_backfill(backfill_of(j, rate=100))
    clock.advance(TICK)
    await lane.run_once()  # 20 occurrences: 00:00 .. 00:19 of the day
    stored = await store.get_job(j.id)
    every_ten = Schedule(trigger=CronTrigger(expr="*/10 * * * *"))
    await store.update_job(replace(stored, schedule=every_ten))
    for _ in range(20):
        clock.advance(TICK)
        await lane.run_once()
    runs = await store.list_runs(j.id, limit=5000)
    minutes = sorted(round((r.scheduled_for - (T0 - DAY)) / timedelta(minutes=1)) for r in runs)
    assert minutes == [*range(20), *range(20, 1440, 10)]
    done = await store.get_backfill(created.id)
    assert (done.state, done.done) == (BackfillState.COMPLETED, 20 + 142)
    assert done.total == 1440  # counted once, when the backfill was created


def enqueued(kind: BackfillKind) -> float:
    # Counters are process-wide: the tests read what moved, not the value.
    sample = REGISTRY.get_sample_value("tickwork_backfill_enqueued_total", {"kind": kind.value})
    return sample or 0.0


def running_gauge() -> float | None:
    return REGISTRY.get_sample_value("tickwork_backfills_running")


async def test_the_metrics_count_enqueued_runs_by_kind_and_the_running_backfills() -> None:
    store, clock, lane, j = await setup(lane_rate=10_000)
    other = job(2)
    await store.create_job(other)
    await store.create_backfill(backfill_of(j, rate=10_000))
    catchup = replace(backfill_of(other, rate=10_000, total=720), kind=BackfillKind.CATCHUP)
    await store.create_backfill(replace(catchup, from_at=T0 - DAY / 2))  # the last 720 minutes
    before = {kind: enqueued(kind) for kind in BackfillKind}
    clock.advance(TICK)
    await lane.run_once()
    assert running_gauge() == 2
    for _ in range(10):
        clock.advance(TICK)
        await lane.run_once()
    assert enqueued(BackfillKind.BACKFILL) - before[BackfillKind.BACKFILL] == 1440
    assert enqueued(BackfillKind.CATCHUP) - before[BackfillKind.CATCHUP] == 720
    clock.advance(TICK)
    await lane.run_once()
    assert running_gauge() == 0  # both completed

    # A second backfill of the same day inserts no run: the counter stays where it was.
    again = await store.create_backfill(backfill_of(j, rate=10_000))
    settled = enqueued(BackfillKind.BACKFILL)
    clock.advance(TICK)
    await lane.run_once()
    assert running_gauge() == 1
    for _ in range(10):
        clock.advance(TICK)
        await lane.run_once()
    assert (await store.get_backfill(again.id)).state is BackfillState.COMPLETED
    assert enqueued(BackfillKind.BACKFILL) == settled
