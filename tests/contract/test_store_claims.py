"""The ScheduleStore contract, part ClaimStore: the due-scan, both claims (in process and
hand-off) and manual runs.

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import replace

import pytest

from tickwork.clock import to_us
from tickwork.domain.jobs import (
    AtTrigger,
    EveryTrigger,
    JobState,
    Schedule,
)
from tickwork.domain.runs import Envelope, Fire, RunOrigin, RunStatus, occurrence_key
from tickwork.store.base import ScheduleStore
from tickwork.store.sqlite import SqliteStore

from .conftest import StoreFactory, open_store
from .store_helpers import (
    SEC,
    T0,
    TARGET,
    claim,
    make_job,
    outcome,
    plan_for,
)


async def test_due_jobs_returns_only_schedulable_due_jobs_earliest_first(
    store: ScheduleStore,
) -> None:
    await store.create_job(make_job(1, next_run_at=T0 + 2 * SEC))
    await store.create_job(make_job(2, next_run_at=T0))
    await store.create_job(make_job(3, next_run_at=T0 + 5 * SEC))
    await store.create_job(make_job(4, next_run_at=T0 - SEC, state=JobState.PAUSED))
    await store.create_job(make_job(5, next_run_at=T0 - SEC, state=JobState.COMPLETED))
    due = await store.due_jobs(T0 + 2 * SEC, limit=10)
    assert [d.job_id for d in due] == [f"{2:032x}", f"{1:032x}"]
    assert due[0].next_run_at == T0
    assert isinstance(due[0].schedule.trigger, EveryTrigger)
    assert [d.job_id for d in await store.due_jobs(T0 + 9 * SEC, limit=1)] == [f"{2:032x}"]
    assert await store.next_due_at() == T0


async def test_count_due_counts_what_due_jobs_would_return_up_to_its_cap(
    store: ScheduleStore,
) -> None:
    """The herd look (ADR 0036): the due-scan's rows counted, not read, within the same
    bounds (schedulable, due by `until`, at or after the floor) and never past the cap."""
    for n in range(6):
        await store.create_job(make_job(n, next_run_at=T0 + n * SEC))
    await store.create_job(make_job(7, next_run_at=T0, state=JobState.PAUSED))
    await store.create_job(make_job(8, next_run_at=T0, state=JobState.COMPLETED))
    assert await store.count_due(T0 + 3 * SEC, 100) == 4
    assert await store.count_due(T0 + 3 * SEC, 3) == 3
    assert await store.count_due(T0 + 3 * SEC, 100, not_before=T0 + 2 * SEC) == 2
    assert await store.count_due(T0 - SEC, 100) == 0
    for until, cap in [(T0 + 3 * SEC, 100), (T0 + 9 * SEC, 5)]:
        assert await store.count_due(until, cap) == len(await store.due_jobs(until, cap))


async def test_next_due_at_starts_at_its_lower_bound(store: ScheduleStore) -> None:
    await store.create_job(make_job(1, next_run_at=T0))
    await store.create_job(make_job(2, next_run_at=T0 + 5 * SEC))
    assert await store.next_due_at(not_before=T0) == T0  # the bound itself is included
    assert await store.next_due_at(not_before=T0 + SEC) == T0 + 5 * SEC
    assert await store.next_due_at(not_before=T0 + 6 * SEC) is None


async def test_next_due_at_is_none_without_scheduled_jobs(store: ScheduleStore) -> None:
    assert await store.next_due_at() is None
    await store.create_job(make_job(1, state=JobState.PAUSED))
    assert await store.next_due_at() is None


async def test_claim_advances_fences_and_records_a_pending_run(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    fires = await claim(store, [plan_for(job, new_next=T0 + SEC, coalesced=2)])
    assert len(fires) == 1
    fire = fires[0]
    assert (fire.job_id, fire.scheduled_for, fire.fence_token, fire.attempt) == (job.id, T0, 1, 1)
    assert fire.key == occurrence_key(job.id, T0)
    assert fire.target == TARGET
    stored = await store.get_job(job.id)
    assert (stored.fence_token, stored.next_run_at, stored.state) == (
        1,
        T0 + SEC,
        JobState.SCHEDULED,
    )
    assert stored.last_fired_at == T0
    [run] = await store.list_runs(job.id)
    assert (run.id, run.status, run.origin, run.attempt, run.fence_token) == (
        fire.run_id,
        RunStatus.PENDING,
        RunOrigin.SCHEDULE,
        1,
        1,
    )
    assert run.coalesced == 2
    assert run.scheduled_for == T0


async def test_a_stale_plan_claims_nothing(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    stale_fence = replace(plan_for(job, new_next=T0 + SEC), expected_fence=7)
    stale_time = replace(plan_for(job, new_next=T0 + SEC), expected_next_run_at=T0 - SEC)
    assert await claim(store, [stale_fence, stale_time]) == []
    assert (await store.get_job(job.id)).fence_token == 0
    assert await store.list_runs(job.id) == []


async def test_the_same_plan_claims_once(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    plan = plan_for(job, new_next=T0 + SEC)
    assert len(await claim(store, [plan])) == 1
    assert await claim(store, [plan]) == []
    assert len(await store.list_runs(job.id)) == 1


async def test_paused_jobs_are_not_claimed(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    await store.update_job(replace(job, state=JobState.PAUSED))
    assert await claim(store, [plan_for(job, new_next=T0 + SEC)]) == []


async def test_claim_without_next_completes_the_job(store: ScheduleStore) -> None:
    job = make_job(1, schedule=Schedule(trigger=AtTrigger(at=T0)))
    await store.create_job(job)
    assert len(await claim(store, [plan_for(job, new_next=None)])) == 1
    stored = await store.get_job(job.id)
    assert stored.state is JobState.COMPLETED
    assert await store.due_jobs(T0 + 3600 * SEC, limit=10) == []


async def test_a_coalescing_claim_counts_as_one_fire(store: ScheduleStore) -> None:
    # docs/policies.md, max_runs: one run for several missed occurrences is one fire.
    job = await store.create_job(make_job(1))
    [fire] = await claim(
        store, [plan_for(job, fire=T0 + 5 * SEC, new_next=T0 + 6 * SEC, coalesced=5)]
    )
    stored = await store.get_job(job.id)
    assert (stored.fired_count, stored.last_fired_at) == (1, T0 + 5 * SEC)
    assert (await store.get_run(fire.run_id)).coalesced == 5


async def test_a_skip_plan_advances_without_a_run(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    skip = replace(plan_for(job, new_next=T0 + 5 * SEC), scheduled_for=None, coalesced=4)
    assert await claim(store, [skip]) == []
    stored = await store.get_job(job.id)
    assert (stored.next_run_at, stored.fence_token) == (T0 + 5 * SEC, 1)
    assert await store.list_runs(job.id) == []


async def test_an_occurrence_gets_one_run_even_if_claimed_again(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    await claim(store, [plan_for(job, new_next=T0 + SEC)])
    rearmed = await store.update_job(
        replace(await store.get_job(job.id), next_run_at=T0)
    )  # e.g. an edit moved it back
    assert await claim(store, [plan_for(rearmed, new_next=T0 + SEC)]) == []
    assert len(await store.list_runs(job.id)) == 1
    assert (await store.get_job(job.id)).next_run_at == T0 + SEC


@pytest.mark.parametrize("handing_off", [False, True], ids=["claim", "claim_hand_off"])
async def test_racing_claimers_fire_each_occurrence_once(
    make_store: StoreFactory, opened: list[ScheduleStore], handing_off: bool
) -> None:
    first = await open_store(make_store, opened)
    second = await open_store(make_store, opened)
    jobs = [make_job(n) for n in range(1, 101)]
    for job in jobs:
        await first.create_job(job)
    plans = [plan_for(job, new_next=T0 + SEC) for job in jobs]

    async def race(store: ScheduleStore, owner: str) -> list[Fire] | list[Envelope]:
        if handing_off:
            return await store.claim_hand_off(plans, owner=owner, now=T0)
        return await claim(store, plans, owner=owner)

    results = await asyncio.gather(
        *(race(store, f"node-{i}") for i, store in enumerate([first, second] * 3))
    )
    fired = [fire.job_id for fires in results for fire in fires]
    assert sorted(fired) == sorted(job.id for job in jobs)
    for job in jobs:
        assert len(await first.list_runs(job.id)) == 1


async def test_manual_runs_are_pending_and_leasable_at_once(store: ScheduleStore) -> None:
    job = make_job(1, next_run_at=T0 + 3600 * SEC)
    await store.create_job(job)
    run = await store.add_manual_run(job.id, now=T0)
    assert (run.origin, run.status, run.attempt, run.scheduled_for) == (
        RunOrigin.MANUAL,
        RunStatus.PENDING,
        0,
        T0,
    )
    assert run.key != occurrence_key(job.id, T0)
    [fire] = await store.lease_runs(now=T0, owner="a", lease_until=T0 + 60 * SEC, limit=10)
    assert (fire.run_id, fire.attempt) == (run.id, 1)
    assert (await store.get_job(job.id)).next_run_at == T0 + 3600 * SEC


async def test_a_manual_run_at_an_occurrences_instant_never_hides_it(store: ScheduleStore) -> None:
    """docs/policies.md, manual triggers: two triggers in one millisecond, at the very instant
    of the next occurrence, are two runs with keys of their own; the occurrence still fires,
    and neither trigger moves next_run_at or counts as a fire."""
    job = make_job(1, next_run_at=T0)
    await store.create_job(job)
    manual = [await store.add_manual_run(job.id, now=T0) for _ in range(2)]
    ms = to_us(T0) // 1000
    for run in manual:
        assert re.fullmatch(rf"{job.id}:{ms}:manual:[0-9a-f]+", run.key), run.key
    assert manual[0].key != manual[1].key
    stored = await store.get_job(job.id)
    assert (stored.next_run_at, stored.fired_count) == (T0, 0)
    [fire] = await claim(store, [plan_for(stored, new_next=T0 + SEC)])
    assert (fire.scheduled_for, fire.key) == (T0, occurrence_key(job.id, T0))
    origins = sorted(r.origin for r in await store.list_runs(job.id))
    assert origins == [RunOrigin.MANUAL, RunOrigin.MANUAL, RunOrigin.SCHEDULE]
    assert (await store.get_job(job.id)).fired_count == 1


async def test_a_hand_off_leaves_the_run_for_any_worker_at_its_instant(
    make_store: StoreFactory, opened: list[ScheduleStore]
) -> None:
    scheduler_side = await open_store(make_store, opened)
    worker_side = await open_store(make_store, opened)
    job = make_job(1, next_run_at=T0 + 5 * SEC)
    await scheduler_side.create_job(job)
    woken_here = scheduler_side.watch("runs")
    woken = worker_side.watch("runs")
    plan = plan_for(job, new_next=T0 + 6 * SEC, coalesced=3)
    [envelope] = await scheduler_side.claim_hand_off([plan], owner="sched", now=T0)

    [run] = await scheduler_side.list_runs(job.id)
    assert envelope == Envelope(
        run_id=run.id,
        job_id=job.id,
        key=occurrence_key(job.id, T0 + 5 * SEC),
        scheduled_for=T0 + 5 * SEC,
        fence_token=1,
        attempt=0,  # a hand-off counts from its first lease
    )
    assert (run.status, run.origin, run.attempt, run.fence_token, run.coalesced) == (
        RunStatus.PENDING,
        RunOrigin.SCHEDULE,
        0,
        1,
        3,
    )
    stored = await scheduler_side.get_job(job.id)
    assert (stored.fence_token, stored.next_run_at, stored.last_fired_at) == (
        1,
        T0 + 6 * SEC,
        T0 + 5 * SEC,
    )
    await asyncio.wait_for(woken_here.wait(), 5)
    if not isinstance(worker_side, SqliteStore):  # SQLite cannot tell another connection
        await asyncio.wait_for(woken.wait(), 5)
    # Unowned: the claimer holds no lease on it, so it has nothing to take back ...
    assert (
        await scheduler_side.take_back_own_leases(
            owner="sched", holding=(), now=T0, lease_until=T0 + 99 * SEC, limit=5
        )
        == []
    )
    # ... and it is free from its own instant on, not before.
    assert await worker_side.next_lease_at() == T0 + 5 * SEC
    assert await worker_side.leasable_runs(T0 + 4 * SEC) == 0
    early = await worker_side.lease_runs(
        now=T0 + 4 * SEC, owner="w", lease_until=T0 + 9 * SEC, limit=5
    )
    assert early == []
    [leased] = await worker_side.lease_runs(
        now=T0 + 5 * SEC, owner="w", lease_until=T0 + 9 * SEC, limit=5
    )
    assert (leased.run_id, leased.attempt, leased.fence_token, leased.target) == (
        envelope.run_id,
        1,
        envelope.fence_token + 1,
        TARGET,
    )
    assert await worker_side.finish_runs([outcome(leased)]) == 1


async def test_a_hand_off_claims_like_a_claim_and_hands_off_only_new_runs(
    store: ScheduleStore,
) -> None:
    stale, paused, skipped, done, fresh = (make_job(n) for n in range(1, 6))
    for job in (stale, paused, skipped, done, fresh):
        await store.create_job(job)
    await store.update_job(replace(paused, state=JobState.PAUSED))
    [first] = await store.claim_hand_off([plan_for(done, new_next=None)], owner="s", now=T0)

    handed = await store.claim_hand_off(
        [
            replace(plan_for(stale, new_next=T0 + SEC), expected_fence=7),
            replace(plan_for(stale, new_next=T0 + SEC), expected_next_run_at=T0 - SEC),
            plan_for(paused, new_next=T0 + SEC),
            replace(plan_for(skipped, new_next=T0 + 5 * SEC), scheduled_for=None, coalesced=4),
            plan_for(done, new_next=None),  # the same plan again: its job moved on
            plan_for(fresh, new_next=T0 + SEC),
        ],
        owner="s",
        now=T0,
    )

    assert [(e.job_id, e.fence_token, e.attempt) for e in handed] == [(fresh.id, 1, 0)]
    assert (first.job_id, first.fence_token) == (done.id, 1)
    assert (await store.get_job(done.id)).state is JobState.COMPLETED
    assert (await store.get_job(stale.id)).fence_token == 0
    assert await store.list_runs(stale.id) == []
    assert await store.list_runs(paused.id) == []
    skipped_now = await store.get_job(skipped.id)
    assert (skipped_now.next_run_at, skipped_now.fence_token) == (T0 + 5 * SEC, 1)
    assert await store.list_runs(skipped.id) == []
    assert await store.leasable_runs(T0) == 2
    assert await store.claim_hand_off([], owner="s", now=T0) == []


async def test_an_occurrence_handed_off_is_not_handed_off_again(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    await store.claim_hand_off([plan_for(job, new_next=T0 + SEC)], owner="s", now=T0)
    rearmed = await store.update_job(replace(await store.get_job(job.id), next_run_at=T0))
    assert (
        await store.claim_hand_off([plan_for(rearmed, new_next=T0 + SEC)], owner="s", now=T0) == []
    )
    assert len(await store.list_runs(job.id)) == 1


@pytest.mark.parametrize("hand_off", [False, True])
async def test_a_throttled_plan_records_its_throttled_ms_on_its_run_alone(
    store: ScheduleStore, hand_off: bool
) -> None:
    """ADR 0025: the claim writes how late the fire ceiling made an occurrence on its run, in
    a batch that mixes it with plain plans (a throttled plan is not plain); the others, and
    every plain batch, record nothing."""
    late, on_time, plain_only = [await store.create_job(make_job(n)) for n in range(1, 4)]
    throttled = replace(plan_for(late, new_next=T0 + SEC), throttled_ms=2500)
    batch = [throttled, plan_for(on_time, new_next=T0 + SEC)]
    if hand_off:
        assert len(await store.claim_hand_off(batch, owner="s", now=T0)) == 2
        await store.claim_hand_off([plan_for(plain_only, new_next=T0 + SEC)], owner="s", now=T0)
    else:
        assert len(await claim(store, batch)) == 2
        await claim(store, [plan_for(plain_only, new_next=T0 + SEC)])
    runs = {job_id: (await store.list_runs(job_id))[0] for job_id in (late.id, on_time.id)}
    assert runs[late.id].throttled_ms == 2500
    assert runs[on_time.id].throttled_ms is None
    assert (await store.list_runs(plain_only.id))[0].throttled_ms is None
    assert (await store.get_run(runs[late.id].id)).throttled_ms == 2500
