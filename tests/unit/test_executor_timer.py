"""Fires wait for their instant behind one loop timer, on uvloop as the processes run it: none
starts early, waiting for an instant does not spin the loop, and a fire whose instant comes
while a runner goes through a herd of fires that never suspend is not held back by them.

uvloop's timers have millisecond resolution and read a cached loop time, so a timer for less
than a millisecond fires at once while the clock still says "not yet". Re-armed for the
remaining fraction each time, the executor woke ~76 times per fire at 2,000 fires/s."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import uvloop

from tickwork.clock import SystemClock
from tickwork.domain.jobs import WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.store.memory import MemoryStore
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig

FIRES = 40
SPACING = timedelta(milliseconds=3)
# Per fire the executor reads the clock a handful of times (submit, release, start, finish);
# the spinning timer read it dozens of times.
MAX_CLOCK_READS_PER_FIRE = 12


class CountingClock(SystemClock):
    def __init__(self) -> None:
        self.reads = 0

    def now(self) -> datetime:
        self.reads += 1
        return super().now()


def fire_at(run_id: int, at: datetime, tenant: str = "default") -> Fire:
    return Fire(
        run_id=run_id, job_id=f"{run_id:032x}", key=f"k{run_id}", scheduled_for=at,
        fence_token=1, attempt=1, target=WebhookTarget(url="http://127.0.0.1:9/"),
        lease_until=at + timedelta(minutes=1), tenant=tenant,
    )  # fmt: skip


def test_fires_start_on_time_without_spinning_the_loop() -> None:
    clock = CountingClock()
    started: dict[int, datetime] = {}

    async def record(fire: Fire) -> Attempt:
        started[fire.run_id] = datetime.now(UTC)
        return Attempt(ok=True, http_status=200)

    async def scenario() -> list[Fire]:
        executor = Executor(MemoryStore(), clock, record, ExecutorConfig(node_id="w1"))
        first = datetime.now(UTC) + timedelta(milliseconds=20)
        fires = [fire_at(n, first + n * SPACING) for n in range(FIRES)]
        executor.submit(fires)
        await executor.drain()
        return fires

    fires = uvloop.run(scenario())

    assert sorted(started) == [fire.run_id for fire in fires]
    for fire in fires:
        assert started[fire.run_id] >= fire.scheduled_for, f"run {fire.run_id} started early"
    assert clock.reads <= MAX_CLOCK_READS_PER_FIRE * FIRES, f"{clock.reads} clock reads"


HERD = 2_000
HERD_FIRE_S = 50e-6  # CPU per fire of the herd, without suspending: a no-op task's order
B_DELAY = timedelta(milliseconds=10)  # b's instant, from the herd's first fire (~100 ms long)


def test_a_fire_due_during_a_herd_of_fires_that_never_suspend_starts_at_its_instant() -> None:
    # Tenant a's herd is due now: a runner goes from one of its fires to the next without
    # returning to the loop (~100 ms of CPU in all), so the loop timer of tenant b's fire, due
    # 10 ms after the herd's first fire, cannot run until the herd is done. The runners must
    # notice it between fires.
    started: list[tuple[float, str]] = []
    b_due_s: list[float] = []
    executor = Executor(
        MemoryStore(), SystemClock(), lambda f: spin(f), ExecutorConfig(node_id="w1")
    )

    async def spin(fire: Fire) -> Attempt:
        now = time.perf_counter()
        started.append((now, fire.tenant))
        if not b_due_s:  # the herd's first fire: b is leased now, due in B_DELAY
            b_due_s.append(now + B_DELAY.total_seconds())
            executor.submit([fire_at(HERD, datetime.now(UTC) + B_DELAY, "b")])
        if fire.tenant == "a":
            while time.perf_counter() < now + HERD_FIRE_S:
                pass
        return Attempt(ok=True, http_status=200)

    async def scenario() -> None:
        executor.submit([fire_at(n, datetime.now(UTC), "a") for n in range(HERD)])
        await executor.drain()

    uvloop.run(scenario())

    [b_started] = [at for at, tenant in started if tenant == "b"]
    assert b_started >= b_due_s[0] - 0.002  # the clock decides, not the loop timer
    # Between its instant and its start, at most the fire in progress and the one taken next.
    a_before_b = [at for at, tenant in started if tenant == "a" and b_due_s[0] <= at < b_started]
    a_after_b = [at for at, tenant in started if tenant == "a" and at > b_started]
    assert a_after_b, "b waited for the whole herd"
    assert len(a_before_b) <= 2, f"{len(a_before_b)} fires of the herd started first"
