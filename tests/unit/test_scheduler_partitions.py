"""The scheduler with partitions: it claims what it holds, takes over only overdue work, and
its claims under a lost epoch are refused by the store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.partitions import NodeIdentity, partition_of
from tickwork.scheduler.partitions import KeeperConfig, PartitionKeeper
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.memory import MemoryStore

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
P = 4
SEC = timedelta(seconds=1)


def job_in(partition: int, start: int = 0) -> Job:
    n = next(n for n in range(start, 10_000) if partition_of(f"{n:032x}", P) == partition)
    return Job(
        id=f"{n:032x}",
        name=f"j{n}",
        schedule=Schedule(trigger=EveryTrigger(interval_ms=3_600_000, anchor=T0)),
        target=WebhookTarget(url="http://127.0.0.1:9/"),
        state=JobState.SCHEDULED,
        next_run_at=T0,
        created_at=T0,
        updated_at=T0,
    )


def service(
    store: MemoryStore, clock: ManualClock, name: str, batch_size: int = 1000
) -> SchedulerService:
    """A hand-off scheduler with a partition keeper of its own."""
    identity = NodeIdentity(host="h", pid=1, version="t", started_at=T0)
    keeper = PartitionKeeper(store, clock, KeeperConfig(node_id=name), identity)
    config = SchedulerConfig(
        node_id=name, lookahead_ms=0, takeover_grace_ms=1_000, batch_size=batch_size
    )
    return SchedulerService(store, clock, config, dispatch=None, keeper=keeper)


async def two_schedulers(
    store: MemoryStore, clock: ManualClock, batch_size: int = 1000
) -> tuple[SchedulerService, SchedulerService]:
    """ "a" holding partitions 0 and 1, "b" holding 2 and 3, after their keepers' rounds."""
    a, b = service(store, clock, "a", batch_size), service(store, clock, "b", batch_size)
    for s in (a, b, a, b):  # a takes all, b none; a gives up half; b takes it
        assert s.keeper is not None
        await s.keeper.run_once()
    assert a.keeper is not None
    assert b.keeper is not None
    assert (set(a.keeper.held_now()), set(b.keeper.held_now())) == ({0, 1}, {2, 3})
    return a, b


async def test_a_scheduler_claims_only_the_partitions_it_holds() -> None:
    clock = ManualClock(T0)
    store = MemoryStore(clock=clock, partitions=P)
    mine, theirs = job_in(0), job_in(2)
    for j in (mine, theirs):
        await store.create_job(j)
    a, _ = await two_schedulers(store, clock)
    tick = await a.run_once()
    assert [e.job_id for e in tick.handed_off] == [mine.id]
    assert (await store.get_job(theirs.id)).fence_token == 0


async def test_work_held_elsewhere_is_taken_over_only_once_overdue() -> None:
    clock = ManualClock(T0)
    store = MemoryStore(clock=clock, partitions=P)
    orphan = job_in(0)
    await store.create_job(orphan)
    _, rescuer = await two_schedulers(store, clock)  # a holds partition 0, then never claims
    clock.advance(SEC / 2)
    assert (await rescuer.take_over()).claimed == 0  # within the grace: the owner's to claim
    clock.advance(SEC)
    taken = await rescuer.take_over()
    assert [e.job_id for e in taken.handed_off] == [orphan.id]
    assert taken.refused == 0


async def test_a_live_owner_behind_in_a_burst_is_left_to_catch_up() -> None:
    """a's partition 0 has a backlog far past the grace, but a claims from it all the while:
    b must not race it for those rows (each would be a conflict)."""
    clock = ManualClock(T0)
    store = MemoryStore(clock=clock, partitions=P)
    backlog = []
    start = 0
    for _ in range(12):
        j = job_in(0, start)
        start = int(j.id, 16) + 1
        backlog.append(j)
        await store.create_job(j)
    owner, rescuer = await two_schedulers(store, clock, batch_size=1)
    assert owner.keeper is not None
    assert rescuer.keeper is not None
    clock.advance(3 * SEC)
    claimed_by_owner = 0
    for _ in range(10):
        for keeper in (owner.keeper, rescuer.keeper):
            await keeper.run_once()  # both alive: leases renewed
        assert (await rescuer.take_over()).claimed == 0
        claimed_by_owner += (await owner.run_once()).claimed
        clock.advance(SEC / 4)
    assert claimed_by_owner == 10
    # The owner stops (dies): after the grace with no head moving, b takes the rest.
    clock.advance(SEC / 4)
    assert (await rescuer.take_over()).claimed == 0
    clock.advance(SEC)
    taken = await rescuer.take_over()
    assert taken.claimed == 1  # batch_size 1
    assert (await rescuer.take_over()).claimed == 1  # stays stalled under b's own claims


async def test_claims_under_an_epoch_lost_meanwhile_are_refused() -> None:
    clock = ManualClock(T0)
    store = MemoryStore(clock=clock, partitions=P)
    j = job_in(1)
    await store.create_job(j)
    zombie, _ = await two_schedulers(store, clock)
    # The zombie's lease is released behind its back and taken by another scheduler.
    await store.update_partition_leases("a", renew={}, release=[1], acquire=(), ttl_ms=60_000)
    await store.update_partition_leases("new", renew={}, release=(), acquire=[1], ttl_ms=60_000)
    tick = await zombie.run_once()  # it still believes it holds partition 1 at epoch 1
    assert (tick.claimed, tick.refused) == (0, 1)
    assert (await store.get_job(j.id)).fence_token == 0
