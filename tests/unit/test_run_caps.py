"""max_concurrent_runs outside the lease statements (ADR 0024): the pure rules
(domain/concurrency.py), the admission cap across both pools (worker/admission.py) and the
executor of an in-process claim (`tickwork up`), whose fires no lease statement counted."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from tickwork.clock import ManualClock
from tickwork.domain.concurrency import caps_of, pick_within_caps, room_left
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.domain.tenant_limits import TenantLimits
from tickwork.store.base import ClaimPlan
from tickwork.store.memory import MemoryStore
from tickwork.store.run_caps import RunCaps
from tickwork.worker.admission import Admission, Lane, Pool, PoolLimits
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

from .test_executor_backlog import T0


def test_caps_come_from_the_tenants_that_have_the_limit() -> None:
    limits = [
        ("a", TenantLimits(max_concurrent_runs=2)),
        ("b", TenantLimits(max_jobs=5)),
        ("c", TenantLimits()),
    ]
    assert caps_of(limits) == {"a": 2}


def test_room_is_the_cap_less_what_runs_and_never_negative() -> None:
    assert room_left({"a": 3, "b": 1, "c": 2}, {"a": 1, "b": 4}) == {"a": 2, "b": 0, "c": 2}


def test_a_capped_tenant_gets_its_room_in_order_and_others_fill_the_limit() -> None:
    candidates = [(1, "a"), (2, "a"), (3, "b"), (4, "a"), (5, "c"), (6, "b")]
    assert pick_within_caps(candidates, {"a": 2, "c": 0}, limit=10) == [1, 2, 3, 6]
    assert pick_within_caps(candidates, {"a": 2, "c": 0}, limit=3) == [1, 2, 3]
    assert pick_within_caps(candidates, {}, limit=4) == [1, 2, 3, 4]


async def test_the_cache_reads_once_per_ttl_and_again_after_invalidate() -> None:
    clock = ManualClock(T0)
    reads: list[int] = []

    async def load() -> dict[str, int]:
        reads.append(1)
        return {"a": len(reads)}

    caps = RunCaps(load, ttl_s=1.0, monotonic=clock.monotonic_s)
    assert await caps.current() == {"a": 1}
    clock.advance(timedelta(seconds=0.5))
    assert await caps.current() == {"a": 1}
    clock.advance(timedelta(seconds=0.5))
    assert await caps.current() == {"a": 2}
    caps.invalidate()
    assert await caps.current() == {"a": 3}


def test_a_tenant_run_cap_spans_both_pools() -> None:
    adm: Admission[str] = Admission(
        {
            Pool.WEBHOOK: PoolLimits(slots=10, tenant_cap=10),
            Pool.TASK: PoolLimits(slots=10, tenant_cap=10),
        }
    )
    adm.set_run_caps({"a": 2})
    for n in range(3):
        adm.park(f"hook{n}", Lane(Pool.WEBHOOK, "a", "http://x:80"), instant=T0, retry=False)
        adm.park(f"task{n}", Lane(Pool.TASK, "a"), instant=T0, retry=False)
        adm.park(f"b{n}", Lane(Pool.TASK, "b"), instant=T0, retry=False)
    first = adm.take(Pool.WEBHOOK)
    assert first is not None
    tasks = []
    while (taken := adm.take(Pool.TASK)) is not None:
        tasks.append(taken)
    assert sorted(item for item, _ in tasks) == ["b0", "b1", "b2", "task0"]  # a: 1 + 1
    assert adm.take(Pool.WEBHOOK) is None
    assert adm.held_by_caps() == 4  # a's other two webhooks and two tasks
    adm.done(first[1])
    assert adm.take(Pool.WEBHOOK) is not None
    adm.set_run_caps({})
    assert adm.take(Pool.WEBHOOK) is not None  # the cap removed: a runs as before


class Peak:
    """A runner that holds every fire until `opened`, and records the most fires of each
    tenant running at once."""

    def __init__(self) -> None:
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.started: list[Fire] = []
        self.opened = asyncio.Event()
        self.changed = asyncio.Event()

    async def __call__(self, fire: Fire) -> Attempt:
        self.started.append(fire)
        self.running[fire.tenant] += 1
        self.peak[fire.tenant] = max(self.peak[fire.tenant], self.running[fire.tenant])
        self.changed.set()
        try:
            await self.opened.wait()
        finally:
            self.running[fire.tenant] -= 1
        return Attempt(ok=True, http_status=200)


async def test_an_in_process_claim_s_fires_run_within_the_tenant_cap() -> None:
    store = MemoryStore()
    clock = ManualClock(T0)
    await store.create_tenant("a", now=T0, limits=TenantLimits(max_concurrent_runs=2))
    await store.create_tenant("b", now=T0)
    plans = []
    for n in range(8):
        tenant = "a" if n < 5 else "b"
        job = Job(
            id=f"{tenant}{n}", name=f"{tenant}{n}", tenant=tenant,
            schedule=Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=T0)),
            target=WebhookTarget(url=f"http://{tenant}.example/hook"),
            state=JobState.SCHEDULED, next_run_at=T0, created_at=T0, updated_at=T0,
        )  # fmt: skip
        await store.create_job(job)
        plans.append(
            ClaimPlan(
                job_id=job.id,
                expected_fence=0,
                expected_next_run_at=T0,
                scheduled_for=T0,
                coalesced=0,
                new_next_run_at=None,
            )
        )
    # The scheduler of `tickwork up` claims for its own executor: every fire comes leased.
    fires = await store.claim(plans, owner="up", lease_until=T0 + timedelta(seconds=60), now=T0)
    assert len(fires) == 8
    runner = Peak()
    executor = Executor(store, clock, runner, ExecutorConfig(node_id="up"))
    await executor.refresh_run_caps()
    executor.submit(fires)
    async with asyncio.timeout(5):
        while len(runner.started) < 5:  # a's first two and all of b's
            runner.changed.clear()
            await runner.changed.wait()
    assert sorted(f.tenant for f in runner.started) == ["a", "a", "b", "b", "b"]
    runner.opened.set()
    await executor.drain()
    assert len(runner.started) == 8
    assert runner.peak == {"a": 2, "b": 3}


async def test_a_leaser_blocked_by_a_cap_backs_off_and_resumes_when_a_slot_frees() -> None:
    store = MemoryStore()
    clock = ManualClock(T0)
    await store.create_tenant("a", now=T0, limits=TenantLimits(max_concurrent_runs=1))
    job = Job(
        id="a1", name="a1", tenant="a", state=JobState.PAUSED, next_run_at=None,
        schedule=Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=T0)),
        target=WebhookTarget(url="http://a.example/hook"), created_at=T0, updated_at=T0,
    )  # fmt: skip
    await store.create_job(job)
    for _ in range(3):
        await store.add_manual_run(job.id, now=T0)
    runner = Peak()
    executor = Executor(store, clock, runner, ExecutorConfig(node_id="w1"))
    leaser = StoreLeaser(store, clock, executor, LeaserConfig(node_id="w1", pause_ms=20))
    ms = timedelta(milliseconds=1)
    first = await leaser.run_once()
    assert first.started == 1
    # The others are free but held back by the cap: each round waits longer, up to 100 ms.
    waits = [(await leaser.run_once()).next_lease_at for _ in range(4)]
    assert waits == [T0 + 40 * ms, T0 + 80 * ms, T0 + 100 * ms, T0 + 100 * ms]
    runner.opened.set()
    await executor.drain()  # the running one finishes: its outcome frees the slot
    again = await leaser.run_once()
    assert again.started == 1
    assert again.next_lease_at is not None
    assert again.next_lease_at <= T0  # it leased: the next round comes after the usual pause
    blocked = await leaser.run_once()  # the last one waits again, backing off from the start
    assert blocked.next_lease_at == T0 + 40 * ms
