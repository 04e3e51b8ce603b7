"""A scheduler that is behind shares each batch fairly among tenants, and within a tenant
claims higher priority first (scheduler/fair_scan.py), on every store, with the real
SchedulerService and a manual clock.

The seed's case, scaled to a test: tenant A has 3,000 one-shots due at the same instant,
tenant B 5 jobs every 200 ms; the scheduler claims 50 per tick and a tick takes 25 ms (the
clock is moved by that much per tick). In time order B would wait for A's whole backlog (60
ticks, 1.5 s); shared, every B occurrence is claimed no later than the tick after it came due,
and A drains at the rest of the capacity."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import AtTrigger, EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.tenant_limits import TenantLimits
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.base import ScheduleStore
from tickwork.store.memory import MemoryStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
TICK = timedelta(milliseconds=25)
TARGET = WebhookTarget(url="http://127.0.0.1:9/")
BATCH = 50


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> ScheduleStore:
    if request.param == "memory":
        return MemoryStore()
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "fair.db")
    return PostgresStore(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def store(new_store: ScheduleStore) -> AsyncIterator[ScheduleStore]:
    await new_store.open()
    try:
        yield new_store
    finally:
        await new_store.close()


def job(n: int, tenant: str, schedule: Schedule, at: datetime, priority: int = 5) -> Job:
    return Job(
        id=f"{n:032x}",
        name=f"{tenant}-{n}",
        tenant=tenant,
        schedule=schedule,
        target=TARGET,
        state=JobState.SCHEDULED,
        next_run_at=at,
        created_at=T0 - timedelta(minutes=1),
        updated_at=T0 - timedelta(minutes=1),
        priority=priority,
    )


def one_shot(at: datetime) -> Schedule:
    return Schedule(trigger=AtTrigger(at=at), misfire_grace_ms=3_600_000)


async def test_a_small_tenant_stays_on_time_while_a_big_backlog_drains(
    store: ScheduleStore,
) -> None:
    for tenant in ("a", "b"):
        await store.create_tenant(tenant, now=T0)
    for n in range(3000):
        await store.create_job(job(n, "a", one_shot(T0), T0))
    every = Schedule(trigger=EveryTrigger(interval_ms=200, anchor=T0))
    b_ids = [f"{n:032x}" for n in range(10_000, 10_005)]
    for n in range(10_000, 10_005):
        await store.create_job(job(n, "b", every, T0))
    clock = ManualClock(T0)
    config = SchedulerConfig(node_id="s", batch_size=BATCH)
    scheduler = SchedulerService(store, clock, config, dispatch=None)
    claimed_at: dict[str, datetime] = {}  # run key -> when its tick began
    a_per_tick = []
    while clock.now() < T0 + timedelta(seconds=2):
        result = await scheduler.run_once()
        for envelope in result.handed_off:
            claimed_at[envelope.key] = clock.now()
        a_per_tick.append(sum(1 for e in result.handed_off if e.job_id not in b_ids))
        clock.advance(TICK)
    a_runs = [k for k in claimed_at if k.split(":")[0] not in b_ids]
    assert len(a_runs) == 3000  # A drained, each once
    b_late = []
    for job_id in b_ids:
        runs = await store.list_runs(job_id, limit=100)
        instants = sorted(r.scheduled_for for r in runs)
        assert instants[: len(instants)] == [
            T0 + k * timedelta(milliseconds=200) for k in range(len(instants))
        ]
        assert len(instants) >= 10  # every occurrence up to 2 s, none skipped
        b_late += [claimed_at[r.key] - r.scheduled_for for r in runs]
    # Claimed by the tick at or before its instant (the look-ahead), or the one after.
    assert max(b_late) <= TICK
    # A took the capacity B left: at least 40 of 50 per tick while it had a backlog.
    assert min(a_per_tick[:55]) >= 40


async def test_within_a_tenant_higher_priority_is_claimed_first_when_behind(
    store: ScheduleStore,
) -> None:
    for n in range(300):
        await store.create_job(job(n, "default", one_shot(T0), T0))
    later = T0 + timedelta(milliseconds=1)
    urgent = {f"{n:032x}" for n in range(1000, 1020)}
    for n in range(1000, 1020):
        await store.create_job(job(n, "default", one_shot(later), later, priority=9))
    clock = ManualClock(T0 + timedelta(milliseconds=5))
    config = SchedulerConfig(node_id="s", batch_size=BATCH)
    scheduler = SchedulerService(store, clock, config, dispatch=None)
    first = await scheduler.run_once()
    # The tick's time-ordered scan comes back full of jobs already due: it is behind, and
    # shares the batch instead, the urgent ones first although they are due later.
    assert first.full_batch
    assert urgent <= {e.job_id for e in first.handed_off}
    assert len(first.handed_off) == BATCH


async def test_a_herd_not_yet_due_does_not_hold_back_fires_due_just_after_it(
    store: ScheduleStore,
) -> None:
    # Tenant A: 300 one-shots due in 100 ms (six batches); tenant B: 5 due 10 ms after them.
    # All are within the look-ahead. In time order, B would be claimed after A's whole herd,
    # six ticks on; a full batch counts as behind even before its instant, so the first tick
    # already shares the batch and takes B's five.
    herd_at = T0 + timedelta(milliseconds=100)
    after = herd_at + timedelta(milliseconds=10)
    await store.create_tenant("a", now=T0)
    await store.create_tenant("b", now=T0)
    for n in range(300):
        await store.create_job(job(n, "a", one_shot(herd_at), herd_at))
    b_ids = {f"{n:032x}" for n in range(1000, 1005)}
    for n in range(1000, 1005):
        await store.create_job(job(n, "b", one_shot(after), after))
    scheduler = SchedulerService(
        store, ManualClock(T0), SchedulerConfig(node_id="s", batch_size=BATCH), dispatch=None
    )
    first = await scheduler.run_once()
    claimed = {e.job_id for e in first.handed_off}
    assert b_ids <= claimed
    assert len(claimed) == BATCH  # and A's herd took the rest of the batch


async def test_on_time_priority_and_tenants_change_nothing(store: ScheduleStore) -> None:
    await store.create_tenant("a", now=T0)
    for n in range(20):
        await store.create_job(
            job(n, "a" if n % 2 else "default", one_shot(T0), T0, priority=1 + n % 9)
        )
    clock = ManualClock(T0)
    scheduler = SchedulerService(
        store, clock, SchedulerConfig(node_id="s", batch_size=BATCH), dispatch=None
    )
    result = await scheduler.run_once()
    assert len(result.handed_off) == 20
    assert not result.full_batch


async def test_a_tenant_over_its_fire_rate_is_paced_and_others_are_not(
    store: ScheduleStore,
) -> None:
    # Tenant A: max_fires_per_s 10, 40 one-shots due at T0 (fewer than a batch: the rate, not
    # the batch, holds them back). Tenant B: no limit, 5 jobs every 200 ms. A's fires go out
    # at its rate (plus the bucket's 200 ms of burst, at least one), recorded as throttled,
    # none lost; B's are claimed on time throughout.
    await store.create_tenant("a", now=T0, limits=TenantLimits(max_fires_per_s=10))
    await store.create_tenant("b", now=T0)
    a_ids = {f"{n:032x}" for n in range(40)}
    for n in range(40):
        await store.create_job(job(n, "a", one_shot(T0), T0))
    every = Schedule(trigger=EveryTrigger(interval_ms=200, anchor=T0))
    b_ids = [f"{n:032x}" for n in range(10_000, 10_005)]
    for n in range(10_000, 10_005):
        await store.create_job(job(n, "b", every, T0))
    clock = ManualClock(T0)
    config = SchedulerConfig(node_id="s", batch_size=BATCH)
    scheduler = SchedulerService(store, clock, config, dispatch=None)
    a_claimed_by: list[tuple[float, int]] = []  # (seconds after T0, A's fires so far)
    a_total = 0
    claimed_at: dict[str, datetime] = {}
    waits = []
    while clock.now() < T0 + timedelta(seconds=6):
        result = await scheduler.run_once()
        for envelope in result.handed_off:
            claimed_at[envelope.key] = clock.now()
        a_total += sum(1 for e in result.handed_off if e.job_id in a_ids)
        a_claimed_by.append(((clock.now() - T0).total_seconds(), a_total))
        if result.throttled:
            waits.append(scheduler.pace_wait_s())
        clock.advance(TICK)
    assert a_total == 40  # all of A, each once
    for elapsed, total in a_claimed_by:
        assert total <= 2 + 10 * elapsed + 1e-9  # never ahead of its rate
    assert a_claimed_by[80][1] >= 15  # and not far behind it either (2 s: 20 by its rate)
    assert waits  # a paced loop sleeps, never spins
    assert all(0 < w <= 1.0 for w in waits)
    a_runs = [r for job_id in a_ids for r in await store.list_runs(job_id)]
    assert len(a_runs) == 40
    assert all(r.coalesced == 0 for r in a_runs)
    assert sum(1 for r in a_runs if r.throttled_ms) >= 30  # held back by the rate
    b_late = []
    for job_id in b_ids:
        for run in await store.list_runs(job_id, limit=100):
            b_late.append(claimed_at[run.key] - run.scheduled_for)
    assert len(b_late) >= 5 * 29
    assert max(b_late) <= TICK
