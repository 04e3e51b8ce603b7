"""SchedulerService.run_once against the in-memory store with a manual clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from tickwork.clock import ManualClock
from tickwork.domain.jobs import AtTrigger, EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.memory import MemoryStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


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
    service, sink = await scheduler(store)
    result = await service.run_once(T0)
    assert [f.job_id for f in result.fires] == [f"{1:032x}"]
    assert sink.fires == result.fires
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
