"""The ScheduleStore contract, part ClaimStore: partitions, their leases and epochs, nodes.

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py and
ADR 0015. Lease expiry is by the store's clock (the database's, or the memory store's system
clock), so these tests use leases of a minute (live) or of 0 ms (expired at once).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from tickwork.domain.partitions import DEFAULT_PARTITIONS, DueHead, partition_of
from tickwork.domain.runs import RunStatus
from tickwork.scheduler.service import NO_EPOCH
from tickwork.store.base import NodeAnnouncement, ScheduleStore

from .store_helpers import SEC, T0, make_job, plan_for

MINUTE_MS = 60_000


def ids_in(partition: int, count: int, start: int = 0) -> list[int]:
    """`count` job numbers whose ids (make_job's) fall in `partition`."""
    found: list[int] = []
    n = start
    while len(found) < count:
        if partition_of(f"{n:032x}", DEFAULT_PARTITIONS) == partition:
            found.append(n)
        n += 1
    return found


def node(name: str) -> NodeAnnouncement:
    return NodeAnnouncement(
        id=name,
        role="scheduler",
        host="h",
        pid=7,
        version="t",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        info={"fires_last_minute": 3},
    )


async def take(store: ScheduleStore, owner: str, *partitions: int) -> dict[int, int]:
    view = await store.update_partition_leases(
        owner, renew={}, release=(), acquire=partitions, ttl_ms=MINUTE_MS
    )
    return {le.partition: le.epoch for le in view.leases if le.owner == owner}


async def test_jobs_fall_in_partitions_and_scans_read_only_those_asked_for(
    store: ScheduleStore,
) -> None:
    assert store.partition_count() == DEFAULT_PARTITIONS
    a, b = ids_in(3, 2), ids_in(40, 1)
    for n in [*a, *b]:
        await store.create_job(make_job(n, next_run_at=T0 + n * SEC / 1000))
    everything = await store.due_jobs(T0 + 60 * SEC, 10)
    assert {(d.job_id, d.partition) for d in everything} == {
        *((f"{n:032x}", 3) for n in a),
        (f"{b[0]:032x}", 40),
    }
    only_3 = await store.due_jobs(T0 + 60 * SEC, 10, partitions=[3])
    assert [d.job_id for d in only_3] == [f"{n:032x}" for n in a]  # earliest first
    assert await store.due_jobs(T0 + 60 * SEC, 10, partitions=[]) == []
    assert await store.count_due(T0 + 60 * SEC, 10, partitions=[3]) == len(a)
    assert await store.count_due(T0 + 60 * SEC, 10, partitions=[3, 40]) == len(a) + 1
    assert await store.count_due(T0 + 60 * SEC, 10, partitions=[]) == 0
    assert await store.next_due_at(partitions=[40]) == T0 + b[0] * SEC / 1000
    assert await store.next_due_at(partitions=[5]) is None


async def test_a_lease_is_taken_once_renewed_at_its_epoch_and_released(
    store: ScheduleStore,
) -> None:
    changed = store.watch("cluster")
    assert await take(store, "s1", 0, 1) == {0: 1, 1: 1}
    assert changed.is_set()
    assert await take(store, "s2", 1, 2) == {2: 1}  # 1 is s1's, live
    stale = await store.update_partition_leases(
        "s1", renew={0: 1, 1: 7}, release=(), acquire=(), ttl_ms=MINUTE_MS
    )  # epoch 7 was never s1's: that lease is simply not renewed
    held = {le.partition: (le.owner, le.epoch) for le in stale.leases if le.owner}
    assert held == {0: ("s1", 1), 1: ("s1", 1), 2: ("s2", 1)}
    changed.clear()
    after = await store.update_partition_leases(
        "s1", renew={}, release=[1, 2], acquire=(), ttl_ms=MINUTE_MS
    )  # 2 is not s1's to release
    assert changed.is_set()
    assert {le.partition: le.owner for le in after.leases if le.partition < 3} == {
        0: "s1",
        1: None,
        2: "s2",
    }
    assert await take(store, "s2", 1) == {1: 2, 2: 1}  # a new owner: the epoch goes up


async def test_an_expired_lease_may_be_taken_at_a_new_epoch(store: ScheduleStore) -> None:
    await store.update_partition_leases("s1", renew={}, release=(), acquire=[9], ttl_ms=0)
    assert await take(store, "s2", 9) == {9: 2}  # s1's lease ended at once


async def test_a_claim_needs_the_current_epoch_and_records_it(store: ScheduleStore) -> None:
    [n] = ids_in(7, 1)
    job = make_job(n)
    await store.create_job(job)
    held = await take(store, "s1", 7)
    plan = replace(plan_for(job, new_next=T0 + SEC), epoch=held[7])
    stale = await store.claim(
        [replace(plan, epoch=held[7] - 1)], owner="s1", lease_until=T0 + 60 * SEC, now=T0
    )
    assert (list(stale), stale.refused) == ([], 1)
    theirs = await store.claim([plan], owner="s2", lease_until=T0 + 60 * SEC, now=T0)
    assert (list(theirs), theirs.refused) == ([], 1)  # s2 does not hold partition 7
    assert (await store.get_job(job.id)).fence_token == 0  # nothing moved
    [fire] = await store.claim([plan], owner="s1", lease_until=T0 + 60 * SEC, now=T0)
    run = await store.get_run(fire.run_id)
    assert (run.status, run.claim_epoch) == (RunStatus.PENDING, held[7])


async def test_a_hand_off_is_refused_the_same_way(store: ScheduleStore) -> None:
    [n] = ids_in(11, 1)
    job = make_job(n)
    await store.create_job(job)
    held = await take(store, "s1", 11)
    plan = replace(plan_for(job, new_next=T0 + SEC), epoch=held[11] + 1)
    refused = await store.claim_hand_off([plan], owner="s1", now=T0)
    assert (list(refused), refused.refused) == ([], 1)
    [envelope] = await store.claim_hand_off([replace(plan, epoch=held[11])], owner="s1", now=T0)
    assert (await store.get_run(envelope.run_id)).claim_epoch == held[11]


async def test_overdue_work_of_any_partition_may_be_taken_over(store: ScheduleStore) -> None:
    [n] = ids_in(20, 1)
    job = make_job(n)
    await store.create_job(job)
    held = await take(store, "owner", 20)
    plan = replace(plan_for(job, new_next=T0 + 5 * SEC), epoch=NO_EPOCH)
    lease = T0 + 60 * SEC
    early = await store.claim([plan], owner="rescuer", lease_until=lease, now=T0 + SEC / 2)
    assert (list(early), early.refused) == ([], 1)  # overdue by the default grace: not more
    [fire] = await store.claim([plan], owner="rescuer", lease_until=lease, now=T0 + SEC)
    assert (await store.get_run(fire.run_id)).claim_epoch == held[20]  # the owner's epoch
    assert (await store.get_job(job.id)).fence_token == 1


async def test_plans_without_an_epoch_are_not_checked(store: ScheduleStore) -> None:
    [n] = ids_in(30, 1)
    job = make_job(n)
    await store.create_job(job)
    await take(store, "someone", 30)
    [fire] = await store.claim(
        [plan_for(job, new_next=T0 + SEC)], owner="tool", lease_until=T0 + 60 * SEC, now=T0
    )
    assert fire.job_id == job.id


async def test_nodes_announce_themselves_and_leave_with_their_partitions(
    store: ScheduleStore,
) -> None:
    changed = store.watch("cluster")
    [me] = [n for n in await store.heartbeat_node(node("s1"), ttl_ms=MINUTE_MS) if n.id == "s1"]
    assert changed.is_set()  # a new member
    assert (me.role, me.pid, me.info) == ("scheduler", 7, {"fires_last_minute": 3})
    assert me.expires_at > me.heartbeat_at
    await store.heartbeat_node(node("s1"), ttl_ms=MINUTE_MS)  # a renewal: still one row
    await store.heartbeat_node(replace(node("s1"), role="worker"), ttl_ms=MINUTE_MS)
    assert [(n.id, n.role) for n in await store.list_nodes()] == [
        ("s1", "scheduler"),
        ("s1", "worker"),
    ]  # one process in two roles (tickwork up) is listed as both
    await store.heartbeat_node(node("gone"), ttl_ms=0)
    assert [n.id for n in await store.list_nodes()] == ["s1", "s1"]
    assert [n.id for n in await store.list_nodes(include_gone=True)] == ["gone", "s1", "s1"]
    await take(store, "s1", 4, 5)
    changed.clear()
    await store.leave("s1")
    assert changed.is_set()
    assert [n.id for n in await store.list_nodes()] == []
    view = await store.partition_leases()
    assert all(le.owner is None for le in view.leases if le.partition in (4, 5))


@pytest.mark.parametrize("count", [1, 64])
async def test_every_partition_has_a_lease_row(store: ScheduleStore, count: int) -> None:
    view = await store.partition_leases()
    assert len(view.leases) == DEFAULT_PARTITIONS
    assert [le.partition for le in view.leases][:count] == list(range(count))


async def test_partition_heads_are_each_partitions_oldest_unclaimed_due_job(
    store: ScheduleStore,
) -> None:
    early, later = ids_in(3, 2)
    [future] = ids_in(40, 1)
    await store.create_job(make_job(early, next_run_at=T0 - 2 * SEC))
    await store.create_job(make_job(later, next_run_at=T0 - SEC))
    await store.create_job(make_job(future, next_run_at=T0 + SEC))
    heads = await store.partition_heads(T0)
    assert heads == {3: DueHead(job_id=f"{early:032x}", due_at=T0 - 2 * SEC)}
    assert await store.partition_heads(T0, [40, 5]) == {}  # other partitions only
    job = await store.get_job(f"{early:032x}")
    await store.claim(
        [plan_for(job, new_next=T0 + 60 * SEC)], owner="s", lease_until=T0 + SEC, now=T0
    )
    # Claimed: the head moves on to the next unclaimed job.
    assert await store.partition_heads(T0) == {3: DueHead(job_id=f"{later:032x}", due_at=T0 - SEC)}
    assert await store.partition_heads(T0 + SEC, [40]) == {
        40: DueHead(job_id=f"{future:032x}", due_at=T0 + SEC)
    }


async def test_a_head_among_jobs_due_at_one_instant_stays_until_claimed(
    store: ScheduleStore,
) -> None:
    """A burst: many jobs of one partition due at the same instant. Reading the heads again
    without a claim gives the same head (a takeover reads "nobody is claiming here"); a claim
    of the head gives another one (the owner is making progress)."""
    for n in ids_in(7, 5):
        await store.create_job(make_job(n, next_run_at=T0 - SEC))
    first = (await store.partition_heads(T0))[7]
    assert (await store.partition_heads(T0))[7] == first
    job = await store.get_job(first.job_id)
    await store.claim(
        [plan_for(job, new_next=T0 + 60 * SEC)], owner="s", lease_until=T0 + SEC, now=T0
    )
    after = (await store.partition_heads(T0))[7]
    assert after.job_id != first.job_id
    assert after.due_at == T0 - SEC
