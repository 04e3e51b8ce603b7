"""The ScheduleStore contract, part LeaseStore: leases (the table queue), leases by fence,
take-backs, heartbeats and outcomes.

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from tickwork.domain.jobs import Job
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import (
    LOST_ERROR,
    RELEASED_ERROR,
    AttemptStatus,
    Fire,
    RunState,
    RunStatus,
    run_state,
    unrecorded_lost_attempt,
)
from tickwork.domain.tenant_limits import TenantLimits
from tickwork.store.base import ScheduleStore

from .conftest import StoreFactory, open_store
from .store_helpers import (
    ALERT,
    SEC,
    SECRET_A,
    SECRET_B,
    SECRET_T,
    T0,
    TARGET,
    claim,
    hand_off,
    make_job,
    outcome,
    plan_for,
)


async def test_finish_applies_only_with_the_current_fence_and_once(store: ScheduleStore) -> None:
    jobs = [make_job(1), make_job(2)]
    for job in jobs:
        await store.create_job(job)
    ok, failed = await claim(store, [plan_for(j, new_next=T0 + SEC) for j in jobs])
    assert await store.finish_runs([outcome(ok, fence=99)]) == 0
    assert await store.finish_runs([outcome(ok), outcome(failed, status=RunStatus.FAILED)]) == 2
    assert await store.finish_runs([outcome(ok)]) == 0
    [run] = await store.list_runs(ok.job_id)
    assert (run.status, run.http_status, run.error) == (RunStatus.SUCCEEDED, 200, None)
    assert run.started_at == T0 + timedelta(milliseconds=3)
    assert run.finished_at == T0 + timedelta(milliseconds=40)
    [run] = await store.list_runs(failed.job_id)
    assert (run.status, run.http_status, run.error) == (RunStatus.FAILED, 503, "HTTP 503")
    assert (await store.stats()).runs_pending == 0


async def test_expired_leases_are_leased_again_with_a_new_fence(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])  # lease until T0 + 60 s
    early = await store.lease_runs(
        now=T0 + 59 * SEC, owner="b", lease_until=T0 + 120 * SEC, limit=10
    )
    assert early == []
    [again] = await store.lease_runs(
        now=T0 + 61 * SEC, owner="b", lease_until=T0 + 120 * SEC, limit=10
    )
    assert (again.run_id, again.key, again.scheduled_for) == (
        fire.run_id,
        fire.key,
        fire.scheduled_for,
    )
    assert (again.fence_token, again.attempt) == (fire.fence_token + 1, 2)
    assert again.target == TARGET
    assert await store.finish_runs([outcome(fire)]) == 0  # the zombie's write is rejected
    assert await store.finish_runs([outcome(again)]) == 1
    assert (
        await store.lease_runs(now=T0 + 999 * SEC, owner="c", lease_until=T0 + 1999 * SEC, limit=10)
        == []
    )


async def test_heartbeats_extend_only_current_leases(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])  # lease until T0 + 60 s
    stale = (fire.run_id, fire.fence_token + 1)
    assert await store.extend_leases([stale], lease_until=T0 + 300 * SEC) == 0
    assert (
        await store.extend_leases([(fire.run_id, fire.fence_token)], lease_until=T0 + 300 * SEC)
        == 1
    )
    assert (
        await store.lease_runs(now=T0 + 200 * SEC, owner="b", lease_until=T0 + 999 * SEC, limit=5)
        == []
    )
    assert (
        len(
            await store.lease_runs(
                now=T0 + 301 * SEC, owner="b", lease_until=T0 + 999 * SEC, limit=5
            )
        )
        == 1
    )
    await store.finish_runs([outcome(fire, fence=fire.fence_token + 1)])
    assert await store.extend_leases([(fire.run_id, fire.fence_token + 1)], lease_until=T0) == 0


async def test_a_lease_named_twice_is_extended_and_counted_once(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])
    lease = (fire.run_id, fire.fence_token)
    assert await store.extend_leases([lease, lease], lease_until=T0 + 300 * SEC) == 1


async def test_of_two_outcomes_of_one_lease_in_a_batch_the_last_applies(
    store: ScheduleStore,
) -> None:
    job = make_job(1)
    await store.create_job(job)
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])
    retry = outcome(fire, status=RunStatus.PENDING, retry_at=T0 + 60 * SEC)
    applied = await store.finish_runs([retry, outcome(fire)])
    assert (applied, applied.run_ids) == (1, {fire.run_id})
    assert (await store.get_run(fire.run_id)).status is RunStatus.SUCCEEDED
    assert [a.status for a in await store.list_attempts(fire.run_id)] == [RunStatus.SUCCEEDED]


async def test_a_retry_releases_the_run_until_its_instant(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])
    retry_at = T0 + 30 * SEC
    assert (
        await store.finish_runs([outcome(fire, status=RunStatus.PENDING, retry_at=retry_at)]) == 1
    )
    run = await store.get_run(fire.run_id)
    assert (run.status, run.last_error, run.dead_lettered_at) == (
        RunStatus.PENDING,
        "HTTP 503",
        None,
    )
    assert await store.next_lease_at() == retry_at
    early = await store.lease_runs(
        now=retry_at - SEC, owner="b", lease_until=T0 + 99 * SEC, limit=5
    )
    assert early == []
    [again] = await store.lease_runs(now=retry_at, owner="b", lease_until=T0 + 99 * SEC, limit=5)
    assert (again.attempt, again.fence_token, again.key) == (2, fire.fence_token + 1, fire.key)
    assert await store.finish_runs([outcome(again)]) == 1
    attempts = await store.list_attempts(fire.run_id)
    assert [(a.attempt, a.status, a.http_status, a.worker) for a in attempts] == [
        (1, RunStatus.PENDING, 503, "w1"),
        (2, RunStatus.SUCCEEDED, 200, "w1"),
    ]
    assert (await store.get_run(fire.run_id)).status is RunStatus.SUCCEEDED


async def test_a_stale_outcome_leaves_no_attempt_behind(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])
    assert await store.finish_runs([outcome(fire, fence=fire.fence_token + 5)]) == 0
    assert await store.list_attempts(fire.run_id) == []


async def test_retry_policies_travel_with_the_fire(store: ScheduleStore) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay_ms=250, max_delay_ms=1000, multiplier=3.0)
    job = make_job(1, retry=policy)
    await store.create_job(job)
    assert (await store.get_job(job.id)).retry == policy
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])
    assert fire.retry == policy
    await store.finish_runs([outcome(fire, status=RunStatus.PENDING, retry_at=T0)])
    [again] = await store.lease_runs(now=T0, owner="b", lease_until=T0 + SEC, limit=5)
    assert again.retry == policy


async def test_a_run_is_leased_by_id_only_with_the_published_fence(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    plan = plan_for(job, new_next=T0 + SEC)
    [fire] = await store.claim_hand_off([plan], owner="s", now=T0)
    until = T0 + 30 * SEC
    leased = await store.lease_run(
        fire.run_id, fire.fence_token, owner="w1", lease_until=until, now=T0
    )
    assert leased is not None
    assert (leased.attempt, leased.fence_token, leased.target) == (1, fire.fence_token + 1, TARGET)
    # the same envelope delivered twice: its fence has moved on
    assert (
        await store.lease_run(fire.run_id, fire.fence_token, owner="w2", lease_until=until, now=T0)
        is None
    )
    assert await store.finish_runs([outcome(leased)]) == 1
    assert (
        await store.lease_run(
            fire.run_id, leased.fence_token, owner="w2", lease_until=until, now=T0
        )
        is None
    )


async def test_fires_carry_their_tenant_secrets_and_alert_from_every_lease(
    store: ScheduleStore,
) -> None:
    await store.set_tenant_secrets("acme", [SECRET_T], now=T0)
    acme = make_job(1, tenant="acme", on_failure=ALERT)
    own = make_job(2, tenant="acme", target=replace(TARGET, secrets=(SECRET_A,)))
    plain = make_job(3, tenant="nobody")
    for job in (acme, own, plain):
        await store.create_job(job)
    fires = await claim(store, [plan_for(j, new_next=T0 + SEC) for j in (acme, own, plain)])
    by_job = {f.job_id: f for f in fires}
    assert by_job[acme.id].tenant_secrets == (SECRET_T,)
    assert by_job[acme.id].on_failure == ALERT
    assert by_job[own.id].target == own.target  # the job's own secrets, too
    assert by_job[own.id].on_failure is None
    assert by_job[plain.id].tenant_secrets == ()
    # A rotation reaches the next lease of the same run.
    await store.set_tenant_secrets("acme", [SECRET_B], now=T0)
    fire = by_job[acme.id]
    await store.finish_runs([outcome(fire, status=RunStatus.PENDING, retry_at=T0)])
    [again] = await store.lease_runs(now=T0, owner="b", lease_until=T0 + SEC, limit=5)
    assert (again.run_id, again.tenant_secrets, again.on_failure) == (
        fire.run_id,
        (SECRET_B,),
        ALERT,
    )
    # ... and the lease by id (a queue message) carries them as well.
    await store.finish_runs([outcome(again, status=RunStatus.PENDING, retry_at=T0)])
    by_id = await store.lease_run(
        again.run_id, again.fence_token, owner="d", lease_until=T0 + SEC, now=T0
    )
    assert by_id is not None
    assert (by_id.tenant_secrets, by_id.on_failure) == ((SECRET_B,), ALERT)
    # ... and so does the batched lease of a queue consumer.
    await store.finish_runs([outcome(by_id, status=RunStatus.PENDING, retry_at=T0)])
    [batched] = await store.lease_fenced_runs(
        [(by_id.run_id, by_id.fence_token)], owner="e", lease_until=T0 + SEC, now=T0
    )
    assert (batched.tenant_secrets, batched.on_failure) == ((SECRET_B,), ALERT)


async def test_finish_reports_which_runs_applied(store: ScheduleStore) -> None:
    jobs = [make_job(n) for n in (1, 2)]
    for job in jobs:
        await store.create_job(job)
    first, second = await claim(store, [plan_for(j, new_next=T0 + SEC) for j in jobs])
    applied = await store.finish_runs(
        [outcome(first, status=RunStatus.FAILED), outcome(second, fence=second.fence_token + 9)]
    )
    assert applied == 1
    assert applied.run_ids == {first.run_id}


async def test_a_batch_is_leased_by_fence_and_only_what_is_still_due_is_leased(
    store: ScheduleStore,
) -> None:
    fresh, finished, superseded, also_fresh = await hand_off(store, 4)
    until = T0 + 30 * SEC
    # `finished` ran to success already; its latest fence is the one a retry message would carry
    [done] = await store.lease_fenced_runs(
        [(finished.run_id, finished.fence_token)], owner="w0", lease_until=until, now=T0
    )
    assert await store.finish_runs([outcome(done)]) == 1
    # another worker took `superseded` meanwhile: the envelope's fence is stale
    [theirs] = await store.lease_fenced_runs(
        [(superseded.run_id, superseded.fence_token)], owner="w2", lease_until=until, now=T0
    )

    leased = await store.lease_fenced_runs(
        [
            (fresh.run_id, fresh.fence_token),
            (done.run_id, done.fence_token),
            (superseded.run_id, superseded.fence_token),
            (fresh.run_id, fresh.fence_token),  # the same message twice in one fetch
            (also_fresh.run_id, also_fresh.fence_token),
            (987654, 1),  # a run that is gone (its job was deleted)
        ],
        owner="w1",
        lease_until=until,
        now=T0,
    )

    assert sorted((f.run_id, f.attempt, f.fence_token, f.target) for f in leased) == [
        (fresh.run_id, 1, fresh.fence_token + 1, TARGET),
        (also_fresh.run_id, 1, also_fresh.fence_token + 1, TARGET),
    ]
    assert all(f.lease_until == until for f in leased)
    assert (await store.get_run(done.run_id)).status is RunStatus.SUCCEEDED
    # the stale envelope left w2's lease alone: w2's heartbeat and outcome still apply
    assert await store.extend_leases([(theirs.run_id, theirs.fence_token)], lease_until=until) == 1
    assert await store.finish_runs([outcome(theirs), *(outcome(f) for f in leased)]) == 3


async def test_an_owner_takes_back_its_live_leases_it_does_not_hold_at_their_fence(
    store: ScheduleStore,
) -> None:
    # What a lease_runs call whose reply was lost leaves behind: runs leased to w1 at fences
    # w1 never learned. Only those may come back; nothing else w1's name is (or was) on.
    mine, held, theirs, expired, finished, released = await hand_off(store, 6)
    until = T0 + 30 * SEC
    leased = await store.lease_fenced_runs(
        [(f.run_id, f.fence_token) for f in (mine, held, finished, released)],
        owner="w1",
        lease_until=until,
        now=T0,
    )
    by_id = {f.run_id: f for f in leased}
    await store.lease_fenced_runs(
        [(expired.run_id, expired.fence_token)], owner="w1", lease_until=T0 + 5 * SEC, now=T0
    )
    await store.lease_fenced_runs(
        [(theirs.run_id, theirs.fence_token)], owner="w2", lease_until=until, now=T0
    )
    assert await store.finish_runs([outcome(by_id[finished.run_id])]) == 1
    retry = outcome(by_id[released.run_id], status=RunStatus.PENDING, retry_at=T0 + 60 * SEC)
    assert await store.finish_runs([retry]) == 1  # released: pending, no owner

    now, later = T0 + 5 * SEC, T0 + 90 * SEC  # `expired`'s lease ends exactly now: not live
    back = await store.take_back_own_leases(
        owner="w1", holding={held.run_id, 987654}, now=now, lease_until=later, limit=10
    )

    lost = by_id[mine.run_id]
    assert [(f.run_id, f.fence_token, f.attempt, f.lease_until, f.target) for f in back] == [
        (mine.run_id, lost.fence_token, lost.attempt, later, TARGET)
    ]
    # The new lease holds past the old one: nobody else may lease the run meanwhile ...
    free = await store.lease_runs(now=T0 + 60 * SEC, owner="w3", lease_until=later, limit=10)
    assert mine.run_id not in {f.run_id for f in free}
    assert {f.run_id for f in free} == {held.run_id, theirs.run_id, expired.run_id, released.run_id}
    # ... and the fence did not move: the outcome of the fire taken back applies.
    assert await store.finish_runs([outcome(back[0])]) == 1
    assert (
        await store.take_back_own_leases(
            owner="w1", holding=(), now=now, lease_until=later, limit=10
        )
        == []
    )


async def test_taking_back_own_leases_stops_at_the_limit_soonest_expiring_first(
    store: ScheduleStore,
) -> None:
    fires = await hand_off(store, 3)
    for n, fire in enumerate(fires):  # leases ending at +30 s, +20 s, +10 s
        await store.lease_fenced_runs(
            [(fire.run_id, fire.fence_token)],
            owner="w1",
            lease_until=T0 + (30 - 10 * n) * SEC,
            now=T0,
        )
    back = await store.take_back_own_leases(
        owner="w1", holding=[], now=T0, lease_until=T0 + 60 * SEC, limit=2
    )
    assert sorted(f.run_id for f in back) == sorted(f.run_id for f in fires[1:])
    # The two taken back now end at +60 s: the third, at +30 s, is the soonest.
    [last] = await store.take_back_own_leases(
        owner="w1", holding=[], now=T0, lease_until=T0 + 60 * SEC, limit=1
    )
    assert last.run_id == fires[0].run_id


async def test_leasing_an_empty_batch_leases_nothing(store: ScheduleStore) -> None:
    await hand_off(store, 1)
    assert await store.lease_fenced_runs([], owner="w1", lease_until=T0 + SEC, now=T0) == []
    assert await store.leasable_runs(T0) == 1


async def test_leasable_runs_counts_free_due_runs_only(store: ScheduleStore) -> None:
    first, *_ = await hand_off(store, 3, at=T0 + 5 * SEC)
    assert await store.leasable_runs(T0 + 4 * SEC) == 0  # not due yet
    assert await store.leasable_runs(T0 + 5 * SEC) == 3

    [leased] = await store.lease_fenced_runs(
        [(first.run_id, first.fence_token)], owner="w1", lease_until=T0 + 30 * SEC, now=T0
    )
    assert await store.leasable_runs(T0 + 5 * SEC) == 2
    await store.finish_runs([outcome(leased)])
    assert await store.leasable_runs(T0 + 5 * SEC) == 2
    assert await store.leasable_runs(T0 + 31 * SEC) == 2  # finished runs never come back


async def test_workers_leasing_overlapping_batches_each_get_a_run_at_most_once(
    make_store: StoreFactory, opened: list[ScheduleStore]
) -> None:
    one = await open_store(make_store, opened)
    other = await open_store(make_store, opened)
    fires = await hand_off(one, 40)
    pairs = [(f.run_id, f.fence_token) for f in fires]
    until = T0 + 30 * SEC

    # A redelivered batch reaches two workers, in opposite orders: no deadlock, no double lease.
    mine, theirs = await asyncio.gather(
        one.lease_fenced_runs(pairs, owner="w1", lease_until=until, now=T0),
        other.lease_fenced_runs(pairs[::-1], owner="w2", lease_until=until, now=T0),
    )

    mine_ids = {f.run_id for f in mine}
    theirs_ids = {f.run_id for f in theirs}
    assert mine_ids.isdisjoint(theirs_ids)
    assert mine_ids | theirs_ids == {f.run_id for f in fires}


async def test_a_stale_outcome_batched_with_the_current_one_records_one_attempt(
    store: ScheduleStore,
) -> None:
    # Found by the chaos harness: a worker kept an outcome it could not write while the
    # database was full, its lease ran out, it leased the run again (fence + 1) and ran it;
    # both outcomes then went out in one batch. Only the current one may reach the history.
    job = make_job(1)
    await store.create_job(job)
    [fire] = await claim(store, [plan_for(job, new_next=T0 + SEC)])
    stale = outcome(fire)
    await store.finish_runs([outcome(fire, status=RunStatus.PENDING, retry_at=T0)])
    [again] = await store.lease_runs(now=T0, owner="w1", lease_until=T0 + SEC, limit=5)
    assert again.fence_token > fire.fence_token
    applied = await store.finish_runs([stale, outcome(again), outcome(again)])
    assert (applied, applied.run_ids) == (1, {fire.run_id})
    attempts = await store.list_attempts(fire.run_id)
    assert [(a.fence_token, a.status) for a in attempts] == [
        (fire.fence_token, RunStatus.PENDING),
        (again.fence_token, RunStatus.SUCCEEDED),
    ]


async def test_the_oldest_leasable_run_says_how_long_the_queue_waited(
    store: ScheduleStore,
) -> None:
    assert await store.oldest_leasable_at(T0) is None
    first, second = await hand_off(store, 2)  # leasable from their instants
    later = T0 + 10 * SEC
    assert await store.oldest_leasable_at(later) == min(first.scheduled_for, second.scheduled_for)
    await store.lease_runs(now=later, owner="w", lease_until=later + 60 * SEC, limit=10)
    assert await store.oldest_leasable_at(later) is None  # both leased: nothing waits


async def test_only_never_leased_hand_offs_wait_for_their_own_horizon(
    store: ScheduleStore,
) -> None:
    # Behind an external queue a worker leases from the store with two horizons: a hand-off no
    # worker has leased yet may still have its message in flight, so it waits for the earlier
    # `hand_offs_by`; every other free run is the store's alone to deliver and waits for
    # nothing but `now`.
    in_flight, released, redriven, once_leased = await hand_off(store, 4)
    leased = {
        f.run_id: f
        for f in await store.lease_fenced_runs(
            [(e.run_id, e.fence_token) for e in (released, redriven, once_leased)],
            owner="dead",
            lease_until=T0 + 2 * SEC,
            now=T0,
        )
    }
    job = make_job(5)
    await store.create_job(job)
    [claimed] = await store.claim(
        [plan_for(job, new_next=T0 + SEC)], owner="dead", lease_until=T0 + 2 * SEC, now=T0
    )
    retry = outcome(leased[released.run_id], status=RunStatus.PENDING, retry_at=T0 + SEC)
    dead = outcome(leased[redriven.run_id], status=RunStatus.FAILED)
    assert await store.finish_runs([retry, dead]) == 2
    assert await store.redrive([redriven.run_id], now=T0 + SEC) == 1
    manual = await store.add_manual_run(in_flight.job_id, now=T0)
    now = T0 + 3 * SEC

    def lease(limit: int, hand_offs_by: datetime = T0 - SEC) -> Awaitable[list[Fire]]:
        return store.lease_runs(
            now=now, hand_offs_by=hand_offs_by, owner="w", lease_until=now + 5 * SEC, limit=limit
        )

    # Soonest-free first: the manual run (free at T0), then the retry and the redrive
    # (T0 + 1 s), then the leases of a worker that died (T0 + 2 s: an in-process claim's and
    # a hand-off's that the dead worker had leased).
    assert [f.run_id for f in await lease(1)] == [manual.id]
    assert {f.run_id for f in await lease(2)} == {released.run_id, redriven.run_id}
    assert {f.run_id for f in await lease(10)} == {claimed.run_id, once_leased.run_id}
    # The hand-off whose message may be in flight is left for the queue, until its own horizon.
    assert await lease(10, hand_offs_by=T0 - timedelta(microseconds=1)) == []
    [late] = await lease(10, hand_offs_by=T0)
    assert (late.run_id, late.attempt, late.fence_token) == (
        in_flight.run_id,
        1,
        in_flight.fence_token + 1,
    )


async def test_without_a_hand_off_horizon_every_free_run_is_leased_by_now(
    store: ScheduleStore,
) -> None:
    first, second = await hand_off(store, 2)
    taken = await store.lease_runs(now=T0, owner="w", lease_until=T0 + SEC, limit=10)
    assert sorted(f.run_id for f in taken) == sorted([first.run_id, second.run_id])


async def test_next_lease_at_after_an_instant_skips_the_leases_that_end_by_then(
    store: ScheduleStore,
) -> None:
    _, late = await hand_off(store, 2)
    await store.lease_fenced_runs(
        [(late.run_id, late.fence_token)], owner="w", lease_until=T0 + 7 * SEC, now=T0
    )
    assert await store.next_lease_at() == T0
    assert await store.next_lease_at(after=T0 - SEC) == T0
    assert await store.next_lease_at(after=T0) == T0 + 7 * SEC
    assert await store.next_lease_at(after=T0 + 7 * SEC) is None


# -- what a lease records: the attempt's start, and the attempt it replaces when lost --------


async def test_every_lease_records_its_instant_as_the_start_of_the_attempt(
    store: ScheduleStore,
) -> None:
    a, b, c = await hand_off(store, 3)
    until = T0 + 30 * SEC
    by_id = await store.lease_run(
        b.run_id, b.fence_token, owner="w2", lease_until=until, now=T0 + 3 * SEC
    )
    [batched] = await store.lease_fenced_runs(
        [(c.run_id, c.fence_token)], owner="w3", lease_until=until, now=T0 + 4 * SEC
    )
    assert run_state(await store.get_run(a.run_id), T0 + 4 * SEC) is RunState.PENDING
    [by_scan] = await store.lease_runs(now=T0 + 5 * SEC, owner="w1", lease_until=until, limit=5)
    assert by_id is not None
    assert by_scan.run_id == a.run_id  # the only one left
    leased = [await store.get_run(f.run_id) for f in (by_id, batched, by_scan)]
    assert [(r.started_at, r.lease_owner, r.lease_until, r.finished_at) for r in leased] == [
        (T0 + 3 * SEC, "w2", until, None),
        (T0 + 4 * SEC, "w3", until, None),
        (T0 + 5 * SEC, "w1", until, None),
    ]
    assert [run_state(r, T0 + 6 * SEC) for r in leased] == [RunState.RUNNING] * 3


async def test_a_run_claimed_ahead_of_its_instant_starts_at_its_instant(
    store: ScheduleStore,
) -> None:
    # The scheduler claims up to a few hundred ms early and the in-process executor waits for
    # the instant: the attempt does not start before the run's own instant.
    due = T0 + SEC
    job = make_job(9, next_run_at=due)
    await store.create_job(job)
    [claimed] = await claim(store, [plan_for(job, new_next=due + SEC)])  # at T0
    assert (await store.get_run(claimed.run_id)).started_at == due
    on_time = make_job(10, next_run_at=T0 - SEC)
    await store.create_job(on_time)
    [late] = await claim(store, [plan_for(on_time, new_next=due)])
    assert (await store.get_run(late.run_id)).started_at == T0  # its claim's instant


async def test_a_retried_run_shows_the_attempt_in_progress_once_leased_again(
    store: ScheduleStore,
) -> None:
    [sent] = await hand_off(store, 1)
    [fire] = await store.lease_runs(now=T0, owner="w1", lease_until=T0 + 30 * SEC, limit=1)
    retry_at = T0 + 10 * SEC
    await store.finish_runs([outcome(fire, status=RunStatus.PENDING, retry_at=retry_at)])
    waiting = await store.get_run(sent.run_id)
    assert (waiting.lease_owner, waiting.lease_until, waiting.error) == (None, retry_at, "HTTP 503")
    assert run_state(waiting, retry_at - SEC) is RunState.RETRYING
    [again] = await store.lease_runs(now=retry_at, owner="w2", lease_until=T0 + 60 * SEC, limit=1)
    running = await store.get_run(sent.run_id)
    # The previous attempt's finish and result are gone from the run (its history keeps them);
    # last_error still says why the run is on its second attempt.
    assert (running.started_at, running.finished_at, running.http_status, running.error) == (
        retry_at,
        None,
        None,
        None,
    )
    assert (running.last_error, running.lease_owner) == ("HTTP 503", "w2")
    assert run_state(running, retry_at) is RunState.RUNNING
    # A released lease (the retry's outcome cleared its owner) leaves no lost attempt.
    assert [a.status for a in await store.list_attempts(sent.run_id)] == [AttemptStatus.RETRIED]
    assert again.attempt == 2


async def test_an_expired_lease_leased_again_leaves_a_lost_attempt_before_the_next(
    store: ScheduleStore,
) -> None:
    [sent] = await hand_off(store, 1)
    [dead] = await store.lease_runs(now=T0 + SEC, owner="w-dead", lease_until=T0 + 6 * SEC, limit=1)
    # Read after the lease expired and before anyone leased the run again: the lost attempt
    # is shown from the run, not yet recorded.
    expired = await store.get_run(sent.run_id)
    assert run_state(expired, T0 + 7 * SEC) is RunState.RETRYING
    assert await store.list_attempts(sent.run_id) == []
    shown = unrecorded_lost_attempt(expired, T0 + 7 * SEC)
    assert unrecorded_lost_attempt(expired, T0 + 5 * SEC) is None  # still live then

    [again] = await store.lease_runs(
        now=T0 + 7 * SEC, owner="w-live", lease_until=T0 + 12 * SEC, limit=1
    )
    assert (again.attempt, again.fence_token) == (2, dead.fence_token + 1)
    [lost] = await store.list_attempts(sent.run_id)
    assert (
        lost.attempt,
        lost.fence_token,
        lost.worker,
        lost.started_at,
        lost.finished_at,
        lost.status,
        lost.http_status,
        lost.error,
    ) == (
        1,
        dead.fence_token,
        "w-dead",
        T0 + SEC,
        T0 + 6 * SEC,
        AttemptStatus.LOST,
        None,
        LOST_ERROR,
    )
    assert shown == replace(lost, id=0)  # what was shown is what was recorded

    assert await store.finish_runs([outcome(dead)]) == 0  # the dead worker's fence moved on
    assert await store.finish_runs([replace(outcome(again), worker="w-live")]) == 1
    history = await store.list_attempts(sent.run_id)
    assert [(a.attempt, a.status, a.worker) for a in history] == [
        (1, AttemptStatus.LOST, "w-dead"),
        (2, AttemptStatus.SUCCEEDED, "w-live"),
    ]
    done = await store.get_run(sent.run_id)
    assert run_state(done, T0 + 99 * SEC) is RunState.SUCCEEDED
    assert (done.lease_owner, done.lease_until) == (None, None)


async def test_a_lost_attempt_is_recorded_by_every_lease_statement(store: ScheduleStore) -> None:
    # In-process claims lease at the claim (no start recorded: the claim's instant is the
    # run's creation); the lease by fence takes a run still owned by its previous lease.
    job = make_job(1)
    await store.create_job(job)
    [claimed] = await claim(store, [plan_for(job, new_next=T0 + SEC)])  # node-a until T0 + 60 s
    assert (await store.get_run(claimed.run_id)).started_at == T0
    [by_scan] = await store.lease_runs(
        now=T0 + 61 * SEC, owner="w1", lease_until=T0 + 70 * SEC, limit=1
    )
    by_fence = await store.lease_run(
        by_scan.run_id,
        by_scan.fence_token,
        owner="w2",
        lease_until=T0 + 90 * SEC,
        now=T0 + 80 * SEC,
    )
    assert by_fence is not None
    [batched] = await store.lease_fenced_runs(
        [(by_fence.run_id, by_fence.fence_token)],
        owner="w3",
        lease_until=T0 + 200 * SEC,
        now=T0 + 100 * SEC,
    )
    history = await store.list_attempts(claimed.run_id)
    assert [(a.attempt, a.fence_token, a.worker, a.started_at, a.finished_at) for a in history] == [
        (1, claimed.fence_token, "node-a", T0, T0 + 60 * SEC),
        (2, by_scan.fence_token, "w1", T0 + 61 * SEC, T0 + 70 * SEC),
        (3, by_fence.fence_token, "w2", T0 + 80 * SEC, T0 + 90 * SEC),
    ]
    assert {a.status for a in history} == {AttemptStatus.LOST}
    assert batched.attempt == 4


async def test_taking_back_own_leases_records_no_attempt_and_keeps_the_start(
    store: ScheduleStore,
) -> None:
    [sent] = await hand_off(store, 1)
    [fire] = await store.lease_fenced_runs(
        [(sent.run_id, sent.fence_token)], owner="w1", lease_until=T0 + 30 * SEC, now=T0 + SEC
    )
    [back] = await store.take_back_own_leases(
        owner="w1", holding=[], now=T0 + 10 * SEC, lease_until=T0 + 40 * SEC, limit=5
    )
    assert (back.run_id, back.fence_token, back.attempt) == (fire.run_id, fire.fence_token, 1)
    run = await store.get_run(sent.run_id)
    assert (run.started_at, run.lease_owner, run.lease_until) == (T0 + SEC, "w1", T0 + 40 * SEC)
    assert await store.list_attempts(sent.run_id) == []


async def test_every_lease_and_claim_carries_the_jobs_tenant(store: ScheduleStore) -> None:
    # The executor's per-tenant cap keys on Fire.tenant (ADR 0023): it must come with the
    # lease, whichever statement made it.
    await store.create_tenant("acme", now=T0)
    jobs = [make_job(n, tenant="acme" if n % 2 else "default") for n in range(1, 5)]
    for job in jobs:
        await store.create_job(job)
    until = T0 + 30 * SEC
    [claimed] = await claim(store, [plan_for(jobs[0], new_next=T0 + SEC)])
    sent = await store.claim_hand_off(
        [plan_for(j, new_next=T0 + SEC) for j in jobs[1:]], owner="s", now=T0
    )
    by_job = {e.job_id: e for e in sent}
    [fenced] = await store.lease_fenced_runs(
        [(by_job[jobs[1].id].run_id, by_job[jobs[1].id].fence_token)],
        owner="w",
        lease_until=until,
        now=T0,
    )
    scanned = await store.lease_runs(now=T0, owner="w", lease_until=until, limit=10)
    tenants = {f.job_id: f.tenant for f in [claimed, fenced, *scanned]}
    assert tenants == {j.id: j.tenant for j in jobs}


async def test_runs_free_since_fresh_from_are_leased_before_a_backlog(
    store: ScheduleStore,
) -> None:
    # Five runs free since T0 (a backlog claimed late) and two free since T0 + 10 s (coming
    # due now): with fresh_from, a lease of three takes the two fresh ones first, then the
    # oldest of the backlog; without it, strictly soonest-free first.
    backlog = await hand_off(store, 5, at=T0)
    fresh_jobs = [make_job(n, next_run_at=T0 + 10 * SEC) for n in (6, 7)]
    for job in fresh_jobs:
        await store.create_job(job)
    plans = [plan_for(job, new_next=T0 + 20 * SEC) for job in fresh_jobs]
    fresh = await store.claim_hand_off(plans, owner="s", now=T0)
    now = T0 + 10 * SEC
    leased = await store.lease_runs(
        now=now, owner="w", lease_until=now + 60 * SEC, limit=3, fresh_from=now - SEC
    )
    taken = {f.run_id for f in leased}
    assert len(taken) == 3
    assert {e.run_id for e in fresh} <= taken  # both fresh ones, and one of the backlog
    rest = await store.lease_runs(now=now, owner="w", lease_until=now + 60 * SEC, limit=10)
    assert {f.run_id for f in rest} | taken == {e.run_id for e in backlog + list(fresh)}
    assert len(rest) == 4


async def handed_off(store: ScheduleStore, jobs: list[Job], *, next_at: datetime) -> dict[str, int]:
    """Create `jobs` and hand their next occurrences off at T0: each job's run id, by job id."""
    for job in jobs:
        await store.create_job(job)
    plans = [plan_for(job, new_next=next_at) for job in jobs]
    return {e.job_id: e.run_id for e in await store.claim_hand_off(plans, owner="s", now=T0)}


async def test_runs_due_since_a_herds_instant_go_before_the_herd_then_the_look_ahead(
    store: ScheduleStore,
) -> None:
    # The worker's now is 80 ms after a herd's instant H (five runs free at H, all within the
    # fresh range), with a run that came due at H + 50 ms, one coming due in the look-ahead at
    # H + 150 ms and an older backlog at H - 5 s. With due_by, the runs due since fresh_from go
    # newest first (the one due after the herd before it), then the look-ahead, then the
    # backlog; without it, the fresh ones soonest first (the herd ahead of what followed it).
    herd_at = T0 + 10 * SEC
    ms = timedelta(milliseconds=1)
    backlog = await hand_off(store, 2, at=herd_at - 5 * SEC)
    herd = [make_job(n, next_run_at=herd_at) for n in range(10, 15)]
    after = make_job(20, next_run_at=herd_at + 50 * ms)
    ahead = make_job(21, next_run_at=herd_at + 150 * ms)
    claimed = await handed_off(store, [*herd, after, ahead], next_at=herd_at + 60 * SEC)
    now = herd_at + 80 * ms
    window = {"now": now + 200 * ms, "fresh_from": now - 100 * ms}
    until = now + 60 * SEC

    # Which runs a lease takes shows the ranges' order (a batch comes back in any order).
    def lease(limit: int) -> Awaitable[list[Fire]]:
        return store.lease_runs(owner="w", lease_until=until, limit=limit, due_by=now, **window)

    herd_runs = {claimed[j.id] for j in herd}
    first = {f.run_id for f in await lease(2)}
    assert claimed[after.id] in first  # due after the herd's instant: before the herd
    assert len(first & herd_runs) == 1
    second = {f.run_id for f in await lease(5)}
    assert second == (herd_runs - first) | {claimed[ahead.id]}  # the herd, then the look-ahead
    third = {f.run_id for f in await lease(1)}
    assert third <= {e.run_id for e in backlog}
    assert len(third) == 1


async def test_ahead_first_leases_the_look_aheads_runs_before_a_herd_due_now(
    store: ScheduleStore,
) -> None:
    # The worker's now is 20 ms after a herd's instant H (four runs free at H), with runs of
    # others coming due at H + 50 ms and H + 150 ms, inside the look-ahead. A lease of two
    # with ahead_first=1 takes the soonest of those, then the herd; ahead_first larger than the
    # look-ahead's runs leases each run once, the rest of the room going to the herd.
    herd_at = T0 + 10 * SEC
    ms = timedelta(milliseconds=1)
    herd = [make_job(n, next_run_at=herd_at) for n in range(10, 14)]
    soon = make_job(20, next_run_at=herd_at + 50 * ms)
    later = make_job(21, next_run_at=herd_at + 150 * ms)
    claimed = await handed_off(store, [*herd, soon, later], next_at=herd_at + 60 * SEC)
    now = herd_at + 20 * ms
    window = {"now": now + 200 * ms, "fresh_from": now - 100 * ms, "due_by": now}
    until = now + 60 * SEC
    herd_runs = {claimed[j.id] for j in herd}

    def lease(limit: int, ahead_first: int) -> Awaitable[list[Fire]]:
        return store.lease_runs(
            owner="w", lease_until=until, limit=limit, ahead_first=ahead_first, **window
        )

    first = {f.run_id for f in await lease(2, 1)}
    assert claimed[soon.id] in first  # coming due in 30 ms: not behind the herd
    assert len(first & herd_runs) == 1
    rest = [f.run_id for f in await lease(10, 5)]
    assert sorted(rest) == sorted((herd_runs - first) | {claimed[later.id]})  # each once


@pytest.mark.parametrize("capped", [False, True], ids=["uncapped", "capped"])
async def test_after_leases_only_the_runs_free_after_it(store: ScheduleStore, capped: bool) -> None:
    # A worker holds a herd due at H (leased ahead of H: its room is full) and leases beyond
    # its room with after=H: of a backlog, the rest of the herd and runs of others due at
    # H + 50 ms and H + 150 ms, it takes only the latter, soonest first, in every lease form
    # (while some tenant has max_concurrent_runs, the leases take their capped forms).
    if capped:
        await store.create_tenant("capped", now=T0, limits=TenantLimits(max_concurrent_runs=9))
    herd_at = T0 + 10 * SEC
    ms = timedelta(milliseconds=1)
    backlog = await hand_off(store, 2, at=herd_at - 5 * SEC)
    herd = [make_job(n, next_run_at=herd_at) for n in range(10, 14)]
    soon = make_job(20, next_run_at=herd_at + 50 * ms)
    later = make_job(21, next_run_at=herd_at + 150 * ms)
    claimed = await handed_off(store, [*herd, soon, later], next_at=herd_at + 60 * SEC)
    until = herd_at + 60 * SEC

    def lease(now: datetime, limit: int, **ranges: datetime) -> Awaitable[list[Fire]]:
        return store.lease_runs(
            now=now, owner="w", lease_until=until, limit=limit, after=herd_at, **ranges
        )

    before = herd_at - 100 * ms  # the worker's now; its look-ahead reaches H + 100 ms
    assert [f.run_id for f in await lease(before + 200 * ms, 10)] == [claimed[soon.id]]
    now = herd_at + 20 * ms
    fresh = {"fresh_from": now - 100 * ms, "due_by": now}
    assert [f.run_id for f in await lease(now + 200 * ms, 10, **fresh)] == [claimed[later.id]]
    assert await lease(now + 200 * ms, 10) == []
    # Without it, the same lease takes the backlog and the herd: they were left, not leased.
    rest = await store.lease_runs(now=now, owner="w", lease_until=until, limit=10)
    expected = {e.run_id for e in backlog} | {claimed[j.id] for j in herd}
    assert {f.run_id for f in rest} == expected


async def test_without_due_by_the_fresh_runs_go_soonest_first(store: ScheduleStore) -> None:
    herd_at = T0 + 10 * SEC
    ms = timedelta(milliseconds=1)
    herd = [make_job(n, next_run_at=herd_at) for n in range(10, 13)]
    after = make_job(20, next_run_at=herd_at + 50 * ms)
    claimed = await handed_off(store, [*herd, after], next_at=herd_at + 60 * SEC)
    now = herd_at + 80 * ms
    leased = await store.lease_runs(
        now=now, owner="w", lease_until=now + 60 * SEC, limit=3, fresh_from=now - 100 * ms
    )
    assert len(leased) == 3  # the herd first: the one due after it is left for later
    assert claimed[after.id] not in {f.run_id for f in leased}


async def test_the_leases_of_a_gone_owner_end_at_once_and_nothing_else_moves(
    store: ScheduleStore,
) -> None:
    # ADR 0035: w1 is gone. Its live leases end now, so w3 leases those runs at once, at a new
    # fence, with w1's attempt recorded as lost; w2's lease, w1's finished run and a run w1
    # retried (pending, no owner) are untouched.
    live, other_owner, finished, retried = await hand_off(store, 4)
    until = T0 + 30 * SEC
    by_id = {
        f.run_id: f
        for f in await store.lease_fenced_runs(
            [(f.run_id, f.fence_token) for f in (live, finished, retried)],
            owner="w1",
            lease_until=until,
            now=T0,
        )
    }
    await store.lease_fenced_runs(
        [(other_owner.run_id, other_owner.fence_token)], owner="w2", lease_until=until, now=T0
    )
    assert await store.finish_runs([outcome(by_id[finished.run_id])]) == 1
    retry = outcome(by_id[retried.run_id], status=RunStatus.PENDING, retry_at=T0 + 60 * SEC)
    assert await store.finish_runs([retry]) == 1

    now = T0 + 2 * SEC
    assert await store.release_leases({"w1", "nobody"}, now=now) == 1
    assert await store.release_leases(set(), now=now) == 0
    taken = await store.lease_runs(now=now, owner="w3", lease_until=until, limit=10)
    assert [(f.run_id, f.fence_token) for f in taken] == [
        (live.run_id, by_id[live.run_id].fence_token + 1)
    ]
    # w1's outcome, late, is refused: the fence moved on.
    assert await store.finish_runs([outcome(by_id[live.run_id])]) == 0
    attempts = await store.list_attempts(live.run_id)
    # The history says why w1's attempt was lost, and when: at the release.
    assert [(a.worker, a.status, a.error, a.finished_at) for a in attempts] == [
        ("w1", AttemptStatus.LOST, RELEASED_ERROR, now)
    ]
    assert await store.release_leases({"w1"}, now=now) == 0  # w3 holds it now
    # w3's lease then runs out unreleased: its lost attempt is an expiry, not a release.
    again = await store.lease_runs(now=until, owner="w4", lease_until=until + SEC, limit=10)
    assert live.run_id in {f.run_id for f in again}  # (w2's lease ran out at `until` too)
    attempts = await store.list_attempts(live.run_id)
    assert [(a.worker, a.error) for a in attempts] == [("w1", RELEASED_ERROR), ("w3", LOST_ERROR)]
