"""BackfillStore: backfills are created, read, advanced by compare-and-set on their cursor
(one statement or transaction with their runs) and cancelled, alike on every backend."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime

import pytest

from tests.contract.conftest import StoreFactory, open_store
from tests.contract.store_helpers import SEC, T0, claim, make_job, outcome, plan_for
from tickwork.domain.backfills import (
    Backfill,
    BackfillKind,
    BackfillSlice,
    BackfillState,
)
from tickwork.domain.jobs import Job, OverlapPolicy
from tickwork.domain.runs import RunOrigin, RunStatus, occurrence_key
from tickwork.errors import NotFound
from tickwork.store.base import ScheduleStore


@pytest.fixture
async def job(store: ScheduleStore) -> Job:
    """A stored job (make_job(1)), most tests' one."""
    made = make_job(1)
    await store.create_job(made)
    return made


@pytest.fixture
async def backfill(store: ScheduleStore, job: Job) -> Backfill:
    """A running backfill of `job`, stored."""
    return await store.create_backfill(new_backfill(job.id))


def new_backfill(
    job_id: str, *, total: int = 10, kind: BackfillKind = BackfillKind.BACKFILL
) -> Backfill:
    return Backfill(
        id=0,
        job_id=job_id,
        tenant="default",
        kind=kind,
        from_at=T0 - 100 * SEC,
        to_at=T0,
        cursor_at=None,
        total=total,
        done=0,
        state=BackfillState.RUNNING,
        rate_per_s=2.5,
        created_at=T0,
        updated_at=T0,
        paced_at=T0,
    )


def slice_of(
    backfill: Backfill,
    occurrences: list[datetime],
    *,
    expected: datetime | None = None,
    completes: bool = False,
    one_at_a_time: bool = False,
) -> BackfillSlice:
    return BackfillSlice(
        backfill_id=backfill.id,
        job_id=backfill.job_id,
        origin=backfill.kind.origin,
        expected_cursor=expected,
        occurrences=tuple(occurrences),
        completes=completes,
        paced_at=T0 + SEC,
        one_at_a_time=one_at_a_time,
    )


async def test_a_backfill_is_stored_as_given_with_an_id_and_listed_newest_first(
    store: ScheduleStore, job: Job
) -> None:
    first = await store.create_backfill(new_backfill(job.id))
    second = await store.create_backfill(new_backfill(job.id, kind=BackfillKind.CATCHUP))
    assert 0 < first.id < second.id
    assert first == replace(new_backfill(job.id), id=first.id)
    assert await store.get_backfill(first.id) == first
    assert [b.id for b in await store.list_backfills(job.id)] == [second.id, first.id]
    assert [b.id for b in await store.list_backfills(job.id, limit=1)] == [second.id]
    assert await store.list_backfills("f" * 32) == []
    with pytest.raises(NotFound):
        await store.get_backfill(second.id + 1000)


async def test_running_backfills_come_with_their_jobs_schedule_oldest_first(
    store: ScheduleStore, job: Job
) -> None:
    a = await store.create_backfill(new_backfill(job.id))
    b = await store.create_backfill(new_backfill(job.id))
    await store.cancel_backfill(a.id, now=T0)
    c = await store.create_backfill(new_backfill(job.id))
    running = await store.running_backfills(limit=10)
    assert [r.backfill.id for r in running] == [b.id, c.id]
    assert all(r.schedule == job.schedule for r in running)
    assert [r.backfill.id for r in await store.running_backfills(limit=1)] == [b.id]


async def test_a_slice_advances_the_cursor_and_inserts_leasable_runs_of_its_origin(
    store: ScheduleStore,
) -> None:
    job = make_job(1, next_run_at=T0 + 3600 * SEC)
    await store.create_job(job)
    backfill = await store.create_backfill(new_backfill(job.id))
    woken = store.watch("runs")
    times = [T0 - 100 * SEC, T0 - 99 * SEC, T0 - 98 * SEC]
    assert await store.advance_backfill(slice_of(backfill, times), now=T0) == 3
    assert woken.is_set()
    stored = await store.get_backfill(backfill.id)
    assert (stored.cursor_at, stored.done, stored.state) == (times[-1], 3, BackfillState.RUNNING)
    assert (stored.paced_at, stored.updated_at) == (T0 + SEC, T0)
    runs = sorted(await store.list_runs(job.id), key=lambda r: r.scheduled_for)
    assert [r.scheduled_for for r in runs] == times
    assert {r.origin for r in runs} == {RunOrigin.BACKFILL}
    assert [r.key for r in runs] == [occurrence_key(job.id, t, RunOrigin.BACKFILL) for t in times]
    assert {(r.status, r.attempt) for r in runs} == {(RunStatus.PENDING, 0)}
    fires = await store.lease_runs(now=T0, owner="w", lease_until=T0 + 60 * SEC, limit=10)
    assert sorted(f.scheduled_for for f in fires) == times
    # The job's own schedule is untouched: next_run_at, fence and fired_count.
    after = await store.get_job(job.id)
    assert (after.next_run_at, after.fence_token, after.fired_count) == (
        job.next_run_at,
        job.fence_token,
        job.fired_count,
    )


async def test_a_stale_cursor_changes_nothing(
    store: ScheduleStore, job: Job, backfill: Backfill
) -> None:
    first = slice_of(backfill, [T0 - 100 * SEC])
    assert await store.advance_backfill(first, now=T0) == 1
    # The same slice again (another process planned it from the same cursor): refused.
    assert await store.advance_backfill(first, now=T0) is None
    later = slice_of(backfill, [T0 - 99 * SEC], expected=T0 - 50 * SEC)
    assert await store.advance_backfill(later, now=T0) is None
    stored = await store.get_backfill(backfill.id)
    assert (stored.cursor_at, stored.done) == (T0 - 100 * SEC, 1)
    assert len(await store.list_runs(job.id)) == 1


async def test_racing_slices_from_one_cursor_enqueue_it_once(
    make_store: StoreFactory, opened: list[ScheduleStore]
) -> None:
    stores = [await open_store(make_store, opened) for _ in range(3)]
    job = make_job(1)
    await stores[0].create_job(job)
    backfill = await stores[0].create_backfill(new_backfill(job.id))
    times = [T0 - (100 - i) * SEC for i in range(20)]
    results = await asyncio.gather(
        *(s.advance_backfill(slice_of(backfill, times), now=T0) for s in stores)
    )
    assert sorted(results, key=lambda r: -1 if r is None else r) == [None, None, 20]
    assert len(await stores[0].list_runs(job.id)) == 20
    assert (await stores[0].get_backfill(backfill.id)).done == 20


async def test_replaying_a_range_never_duplicates_a_run(store: ScheduleStore, job: Job) -> None:
    times = [T0 - 100 * SEC, T0 - 99 * SEC]
    first = await store.create_backfill(new_backfill(job.id))
    assert await store.advance_backfill(slice_of(first, times, completes=True), now=T0) == 2
    again = await store.create_backfill(new_backfill(job.id))
    assert await store.advance_backfill(slice_of(again, times, completes=True), now=T0) == 0
    assert len(await store.list_runs(job.id)) == 2
    assert (await store.get_backfill(again.id)).done == 2


async def test_a_backfill_run_never_hides_the_scheduled_occurrence(store: ScheduleStore) -> None:
    job = make_job(1, next_run_at=T0)
    await store.create_job(job)
    backfill = await store.create_backfill(new_backfill(job.id))
    assert await store.advance_backfill(slice_of(backfill, [T0]), now=T0) == 1
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])
    assert fire.key == occurrence_key(job.id, T0)
    origins = sorted(r.origin for r in await store.list_runs(job.id))
    assert origins == [RunOrigin.BACKFILL, RunOrigin.SCHEDULE]
    assert (await store.get_job(job.id)).fired_count == 1


async def test_the_last_slice_completes_it_and_a_completed_one_moves_no_more(
    store: ScheduleStore, job: Job, backfill: Backfill
) -> None:
    done = slice_of(backfill, [T0 - 100 * SEC], completes=True)
    assert await store.advance_backfill(done, now=T0) == 1
    stored = await store.get_backfill(backfill.id)
    assert stored.state is BackfillState.COMPLETED
    assert await store.running_backfills(limit=10) == []
    more = slice_of(backfill, [T0 - 99 * SEC], expected=T0 - 100 * SEC)
    assert await store.advance_backfill(more, now=T0) is None


async def test_an_empty_slice_may_complete_it(store: ScheduleStore, job: Job) -> None:
    backfill = await store.create_backfill(new_backfill(job.id, total=0))
    assert await store.advance_backfill(slice_of(backfill, [], completes=True), now=T0) == 0
    stored = await store.get_backfill(backfill.id)
    assert (stored.state, stored.cursor_at, stored.done) == (BackfillState.COMPLETED, None, 0)


async def test_one_at_a_time_waits_for_the_jobs_pending_run(store: ScheduleStore) -> None:
    schedule = replace(make_job(1).schedule, overlap=OverlapPolicy.SKIP)
    job = make_job(1, schedule=schedule)
    await store.create_job(job)
    backfill = await store.create_backfill(new_backfill(job.id))
    first = slice_of(backfill, [T0 - 100 * SEC], one_at_a_time=True)
    assert await store.advance_backfill(first, now=T0) == 1
    second = slice_of(backfill, [T0 - 99 * SEC], expected=T0 - 100 * SEC, one_at_a_time=True)
    assert await store.advance_backfill(second, now=T0) is None  # the first is still pending
    [fire] = await store.lease_runs(now=T0, owner="w", lease_until=T0 + 60 * SEC, limit=10)
    assert await store.advance_backfill(second, now=T0) is None  # leased: still not finished
    assert await store.finish_runs([outcome(fire)]) == 1
    assert await store.advance_backfill(second, now=T0) == 1


@pytest.mark.parametrize(
    "policy", [OverlapPolicy.SKIP, OverlapPolicy.BUFFER_ONE, OverlapPolicy.CANCEL_PREVIOUS]
)
async def test_one_at_a_time_waits_for_a_scheduled_run_and_never_cancels_or_holds(
    store: ScheduleStore, policy: OverlapPolicy
) -> None:
    """docs/policies.md, backfill "wait your turn": the backfill waits for the scheduled run
    going instead of applying the job's policy to it, and its own run is never held back."""
    job = make_job(1, schedule=replace(make_job(1).schedule, overlap=policy))
    await store.create_job(job)
    plan = replace(plan_for(job, new_next=T0 + 3600 * SEC), overlap=policy)
    [scheduled] = await store.claim_hand_off([plan], owner="s", now=T0)
    backfill = await store.create_backfill(new_backfill(job.id))
    turn = slice_of(backfill, [T0 - 100 * SEC], one_at_a_time=True)
    assert await store.advance_backfill(turn, now=T0) is None
    assert (await store.get_run(scheduled.run_id)).status is RunStatus.PENDING  # not cancelled
    [fire] = await store.lease_runs(now=T0, owner="w", lease_until=T0 + 60 * SEC, limit=10)
    assert await store.finish_runs([outcome(fire)]) == 1
    assert await store.advance_backfill(turn, now=T0) == 1
    [replay] = await store.lease_runs(now=T0, owner="w", lease_until=T0 + 60 * SEC, limit=10)
    assert (replay.scheduled_for, replay.key) == (
        T0 - 100 * SEC,
        occurrence_key(job.id, T0 - 100 * SEC, RunOrigin.BACKFILL),
    )
    assert await store.list_occurrences(job.id, T0 - 3600 * SEC, T0 + 3600 * SEC, limit=9) == []


async def test_cancel_stops_a_running_backfill_and_keeps_a_finished_one(
    store: ScheduleStore, job: Job, backfill: Backfill
) -> None:
    assert await store.advance_backfill(slice_of(backfill, [T0 - 100 * SEC]), now=T0) == 1
    cancelled = await store.cancel_backfill(backfill.id, now=T0 + SEC)
    assert (cancelled.state, cancelled.updated_at, cancelled.done) == (
        BackfillState.CANCELLED,
        T0 + SEC,
        1,
    )
    assert await store.cancel_backfill(backfill.id, now=T0 + 2 * SEC) == cancelled
    later = slice_of(backfill, [T0 - 99 * SEC], expected=T0 - 100 * SEC)
    assert await store.advance_backfill(later, now=T0) is None
    assert len(await store.list_runs(job.id)) == 1  # what it enqueued stays
    with pytest.raises(NotFound):
        await store.cancel_backfill(backfill.id + 1000, now=T0)


async def test_deleting_the_job_deletes_its_backfills(
    store: ScheduleStore, job: Job, backfill: Backfill
) -> None:
    await store.delete_job(job.id)
    with pytest.raises(NotFound):
        await store.get_backfill(backfill.id)
    assert await store.running_backfills(limit=10) == []
    await store.create_job(job)
    later = await store.create_backfill(new_backfill(job.id))
    assert later.id > backfill.id  # ids are never reused


async def test_catchup_runs_have_their_own_origin_and_keys(store: ScheduleStore, job: Job) -> None:
    catchup = await store.create_backfill(new_backfill(job.id, kind=BackfillKind.CATCHUP))
    backfill = await store.create_backfill(new_backfill(job.id))
    assert await store.advance_backfill(slice_of(catchup, [T0 - 100 * SEC]), now=T0) == 1
    assert await store.advance_backfill(slice_of(backfill, [T0 - 100 * SEC]), now=T0) == 1
    origins = sorted(r.origin for r in await store.list_runs(job.id))
    assert origins == [RunOrigin.BACKFILL, RunOrigin.CATCHUP]


async def test_finished_backfills_are_pruned_by_age_in_batches_and_running_ones_stay(
    store: ScheduleStore, job: Job
) -> None:

    async def stored(state: BackfillState, updated_at: datetime) -> int:
        made = replace(new_backfill(job.id), state=state, updated_at=updated_at)
        return (await store.create_backfill(made)).id

    cutoff = T0 + 10 * SEC
    old = [
        await stored(BackfillState.COMPLETED, T0 + 3 * SEC),
        await stored(BackfillState.CANCELLED, T0 + 1 * SEC),
        await stored(BackfillState.COMPLETED, T0 + 2 * SEC),
    ]
    kept = [
        await stored(BackfillState.RUNNING, T0),  # old, but the lane still needs it
        await stored(BackfillState.COMPLETED, cutoff),  # at the cutoff: not before it
        await stored(BackfillState.CANCELLED, cutoff + SEC),
    ]
    assert await store.prune_backfills(before=T0, limit=10) == 0  # nothing finished that early
    assert await store.prune_backfills(before=cutoff, limit=2) == 2
    # oldest first: the cancelled one (T0+1s) and the completed one at T0+2s went
    left = {b.id for b in await store.list_backfills(job.id)}
    assert left == {old[0], *kept}
    assert await store.prune_backfills(before=cutoff, limit=2) == 1
    assert await store.prune_backfills(before=cutoff, limit=2) == 0
    assert {b.id for b in await store.list_backfills(job.id)} == set(kept)
    for gone in old:
        with pytest.raises(NotFound):
            await store.get_backfill(gone)
    [running] = await store.running_backfills(limit=10)
    assert running.backfill.id == kept[0]
