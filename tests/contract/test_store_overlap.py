"""Overlap policies at claim time (docs/policies.md), on every store: what a claim does when
the job's previous run is still going, and what the finish of that run releases."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from tickwork.clock import to_us
from tickwork.domain.jobs import Job, JobState, OverlapPolicy
from tickwork.domain.runs import Fire, RunOutcome, RunStatus
from tickwork.store.base import CANCELLED_BY_OVERLAP, ClaimPlan, ScheduleStore
from tickwork.store.sqlite import SqliteStore

from .conftest import StoreFactory, open_store
from .store_helpers import SEC, T0, claim, make_job, outcome

FAR = T0 + 3600 * SEC  # later than every instant these tests use
SOON = T0 + 30 * SEC  # before the leases of `claim` (T0 + 60 s) end


async def ledger(store: ScheduleStore, job_id: str) -> list[dict[str, Any]]:
    """The job's rows of the occurrence ledger (tw_occurrences), oldest first, as columns."""
    found = await store.list_occurrences(job_id, T0 - 3600 * SEC, FAR + 3600 * SEC, limit=1000)
    return [
        {
            "job_id": e.job_id,
            "first_us": to_us(e.first),
            "last_us": to_us(e.last),
            "count": e.count,
            "reason": e.reason.value,
            "run_id": e.run_id,
            "recorded_us": to_us(e.recorded_at),
        }
        for e in sorted(found, key=lambda e: e.id or 0)
    ]


async def overlapping_job(store: ScheduleStore, policy: OverlapPolicy) -> Job:
    job = make_job(1)
    job = replace(job, schedule=replace(job.schedule, overlap=policy))
    await store.create_job(job)
    return job


async def plan_next(store: ScheduleStore, job: Job, policy: OverlapPolicy) -> ClaimPlan:
    """The plan for the job's next occurrence as it is stored now (every second)."""
    stored = await store.get_job(job.id)
    assert stored.next_run_at is not None
    return ClaimPlan(
        job_id=job.id,
        expected_fence=stored.fence_token,
        expected_next_run_at=stored.next_run_at,
        scheduled_for=stored.next_run_at,
        coalesced=0,
        new_next_run_at=stored.next_run_at + SEC,
        overlap=policy,
    )


def finished(
    fire: Fire, status: RunStatus = RunStatus.SUCCEEDED, retry_at: datetime | None = None
) -> RunOutcome:
    return outcome(fire, status=status, retry_at=retry_at)


async def hand_off_claim(store: ScheduleStore, plan: ClaimPlan) -> list[Any]:
    return await store.claim_hand_off([plan], owner="s", now=T0)


@pytest.mark.parametrize("policy", list(OverlapPolicy))
async def test_a_job_with_no_run_going_fires_whatever_its_policy(
    store: ScheduleStore, policy: OverlapPolicy
) -> None:
    job = await overlapping_job(store, policy)
    [fire] = await claim(store, [await plan_next(store, job, policy)])
    assert fire.scheduled_for == T0
    await store.finish_runs([finished(fire)])
    [second] = await claim(store, [await plan_next(store, job, policy)])
    assert second.scheduled_for == T0 + SEC
    assert await ledger(store, job.id) == []


async def test_allow_runs_side_by_side(store: ScheduleStore) -> None:
    job = await overlapping_job(store, OverlapPolicy.ALLOW)
    await claim(store, [await plan_next(store, job, OverlapPolicy.ALLOW)])
    assert len(await claim(store, [await plan_next(store, job, OverlapPolicy.ALLOW)])) == 1
    assert [r.status for r in await store.list_runs(job.id)] == [RunStatus.PENDING] * 2


@pytest.mark.parametrize("hand_off", [False, True], ids=["in-process", "hand-off"])
async def test_skip_advances_without_a_run_and_records_the_occurrence(
    store: ScheduleStore, hand_off: bool
) -> None:
    job = await overlapping_job(store, OverlapPolicy.SKIP)
    [first] = await claim(store, [await plan_next(store, job, OverlapPolicy.SKIP)])
    plan = await plan_next(store, job, OverlapPolicy.SKIP)
    now = T0 + SEC
    if hand_off:
        assert await store.claim_hand_off([plan], owner="s", now=now) == []
    else:
        assert await store.claim([plan], owner="a", lease_until=FAR, now=now) == []
    stored = await store.get_job(job.id)
    assert (stored.fence_token, stored.next_run_at) == (2, T0 + 2 * SEC)
    assert (stored.fired_count, stored.last_fired_at) == (1, T0)  # a skip is not a fire
    assert [r.id for r in await store.list_runs(job.id)] == [first.run_id]
    assert await ledger(store, job.id) == [
        {
            "job_id": job.id,
            "first_us": to_us(T0 + SEC),
            "last_us": to_us(T0 + SEC),
            "count": 1,
            "reason": "skipped_overlap",
            "run_id": first.run_id,
            "recorded_us": to_us(now),
        }
    ]
    # Once the run ends, the next occurrence fires.
    await store.finish_runs([finished(first)])
    [third] = await claim(store, [await plan_next(store, job, OverlapPolicy.SKIP)])
    assert third.scheduled_for == T0 + 2 * SEC


async def test_skip_counts_a_run_between_retries_and_a_manual_run_as_going(
    store: ScheduleStore,
) -> None:
    job = await overlapping_job(store, OverlapPolicy.SKIP)
    [first] = await claim(store, [await plan_next(store, job, OverlapPolicy.SKIP)])
    await store.finish_runs([finished(first, RunStatus.PENDING, retry_at=FAR)])
    assert await claim(store, [await plan_next(store, job, OverlapPolicy.SKIP)]) == []
    manual_job = replace(make_job(2), schedule=job.schedule)
    await store.create_job(manual_job)
    manual = await store.add_manual_run(manual_job.id, now=T0)
    assert await claim(store, [await plan_next(store, manual_job, OverlapPolicy.SKIP)]) == []
    assert [r["run_id"] for r in await ledger(store, manual_job.id)] == [manual.id]


@pytest.mark.parametrize("hand_off", [False, True], ids=["in-process", "hand-off"])
async def test_buffer_one_holds_one_back_until_the_running_run_ends(
    store: ScheduleStore, hand_off: bool
) -> None:
    policy = OverlapPolicy.BUFFER_ONE
    job = await overlapping_job(store, policy)
    [first] = await claim(store, [await plan_next(store, job, policy)])
    plan = await plan_next(store, job, policy)
    # The second occurrence's run is inserted, but held: no fire, no envelope.
    if hand_off:
        assert await hand_off_claim(store, plan) == []
    else:
        assert await claim(store, [plan]) == []
    held = next(r for r in await store.list_runs(job.id) if r.id != first.run_id)
    assert (held.scheduled_for, held.status, held.attempt) == (T0 + SEC, RunStatus.PENDING, 0)
    assert (await store.get_job(job.id)).fired_count == 2
    # Not leasable, not counted, no lease end to wait for.
    assert await store.leasable_runs(SOON) == 0
    assert await store.oldest_leasable_at(SOON) is None
    assert await store.next_lease_at() == first.lease_until
    assert await store.lease_runs(now=SOON, owner="w", lease_until=FAR, limit=10) == []
    # A third occurrence finds one held already: it is skipped, naming the held run.
    assert await claim(store, [await plan_next(store, job, policy)]) == []
    [skip] = await ledger(store, job.id)
    assert (skip["reason"], skip["run_id"], skip["first_us"]) == (
        "skipped_overlap",
        held.id,
        to_us(T0 + 2 * SEC),
    )
    # The running run ends: the held one is leasable from that instant on, even behind a queue
    # (it was never published, so no message of it can be in flight).
    done = finished(first)
    assert await store.finish_runs([done]) == 1
    assert await store.leasable_runs(SOON) == 1
    assert await store.oldest_leasable_at(SOON) == done.finished_at
    [fire] = await store.lease_runs(
        now=done.finished_at, owner="w", lease_until=FAR, limit=10, hand_offs_by=T0 - 60 * SEC
    )
    assert (fire.run_id, fire.scheduled_for, fire.attempt) == (held.id, T0 + SEC, 1)


async def test_releasing_a_held_run_wakes_the_workers(
    make_store: StoreFactory, opened: list[ScheduleStore]
) -> None:
    """Table-queue workers wait on the store's "runs" topic: the finish that releases a held
    buffer_one run must wake them (and the workers of other processes where the store can
    tell them), or the run would wait for their next lease scan."""
    store = await open_store(make_store, opened)
    worker_side = await open_store(make_store, opened)
    policy = OverlapPolicy.BUFFER_ONE
    job = await overlapping_job(store, policy)
    [first] = await claim(store, [await plan_next(store, job, policy)])
    assert await claim(store, [await plan_next(store, job, policy)]) == []  # held
    woken_here, woken = store.watch("runs"), worker_side.watch("runs")
    assert await store.finish_runs([finished(first)]) == 1
    await asyncio.wait_for(woken_here.wait(), 5)
    if not isinstance(worker_side, SqliteStore):  # SQLite cannot tell another connection
        await asyncio.wait_for(woken.wait(), 5)
    assert await worker_side.leasable_runs(SOON) == 1


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.PENDING])
async def test_buffer_one_releases_on_a_dead_letter_not_on_a_retry(
    store: ScheduleStore, status: RunStatus
) -> None:
    policy = OverlapPolicy.BUFFER_ONE
    job = await overlapping_job(store, policy)
    [first] = await claim(store, [await plan_next(store, job, policy)])
    assert await claim(store, [await plan_next(store, job, policy)]) == []
    retry_at = FAR if status is RunStatus.PENDING else None
    await store.finish_runs([finished(first, status, retry_at=retry_at)])
    assert await store.leasable_runs(SOON) == (1 if status is RunStatus.FAILED else 0)


@pytest.mark.parametrize("hand_off", [False, True], ids=["in-process", "hand-off"])
async def test_cancel_previous_cancels_the_run_going_and_fires_the_new_one(
    store: ScheduleStore, hand_off: bool
) -> None:
    policy = OverlapPolicy.CANCEL_PREVIOUS
    job = await overlapping_job(store, policy)
    [first] = await claim(store, [await plan_next(store, job, policy)])
    now = T0 + SEC
    plan = await plan_next(store, job, policy)
    if hand_off:
        [new] = await store.claim_hand_off([plan], owner="s", now=now)
    else:
        [new] = await store.claim([plan], owner="a", lease_until=FAR, now=now)
    assert new.scheduled_for == T0 + SEC
    cancelled = await store.get_run(first.run_id)
    assert (cancelled.status, cancelled.finished_at, cancelled.error) == (
        RunStatus.CANCELLED,
        now,
        CANCELLED_BY_OVERLAP,
    )
    assert cancelled.fence_token == first.fence_token + 1
    [attempt] = await store.list_attempts(first.run_id)
    assert (attempt.status, attempt.attempt, attempt.fence_token, attempt.worker) == (
        RunStatus.CANCELLED,
        1,
        first.fence_token,
        "node-a",
    )
    assert attempt.error == CANCELLED_BY_OVERLAP
    # The holder's heartbeat is refused (it learns which pair) and so is its outcome.
    extended = await store.extend_leases([(first.run_id, first.fence_token)], lease_until=FAR)
    assert (extended, extended.leases) == (0, frozenset())
    assert await store.finish_runs([finished(first)]) == 0
    assert (await store.get_run(first.run_id)).status is RunStatus.CANCELLED
    assert (await store.get_job(job.id)).fired_count == 2
    assert await ledger(store, job.id) == []


async def test_cancel_previous_cancels_every_run_going(store: ScheduleStore) -> None:
    # Two manual runs still going (a trigger applies no policy): the next occurrence cancels both.
    policy = OverlapPolicy.CANCEL_PREVIOUS
    job = await overlapping_job(store, policy)
    manual = [await store.add_manual_run(job.id, now=T0) for _ in range(2)]
    [new] = await claim(store, [await plan_next(store, job, policy)])
    statuses = {r.id: r.status for r in await store.list_runs(job.id)}
    assert statuses == {
        manual[0].id: RunStatus.CANCELLED,
        manual[1].id: RunStatus.CANCELLED,
        new.run_id: RunStatus.PENDING,
    }


async def test_cancel_previous_cancels_a_run_never_leased_without_an_attempt(
    store: ScheduleStore,
) -> None:
    policy = OverlapPolicy.CANCEL_PREVIOUS
    job = await overlapping_job(store, policy)
    [first] = await hand_off_claim(store, await plan_next(store, job, policy))
    [second] = await hand_off_claim(store, await plan_next(store, job, policy))
    assert (await store.get_run(first.run_id)).status is RunStatus.CANCELLED
    assert await store.list_attempts(first.run_id) == []
    assert await store.lease_fenced_runs([(first.run_id, first.fence_token)], owner="w",
                                         lease_until=FAR, now=T0) == []  # fmt: skip
    [fire] = await store.lease_fenced_runs(
        [(second.run_id, second.fence_token)], owner="w", lease_until=FAR, now=T0
    )
    assert fire.scheduled_for == T0 + SEC


async def test_extend_leases_names_the_leases_it_extended(store: ScheduleStore) -> None:
    jobs = [make_job(n) for n in (1, 2)]
    for job in jobs:
        await store.create_job(job)
    fires = await claim(store, [await plan_next(store, j, OverlapPolicy.ALLOW) for j in jobs])
    a, b = sorted(fires, key=lambda f: f.job_id)
    await store.finish_runs([finished(b)])
    pairs = [(a.run_id, a.fence_token), (b.run_id, b.fence_token), (a.run_id, a.fence_token)]
    extended = await store.extend_leases(pairs, lease_until=FAR)
    assert (extended, extended.leases) == (1, frozenset({(a.run_id, a.fence_token)}))


async def test_a_skipped_fire_does_not_complete_a_job_at_its_max_runs(
    store: ScheduleStore,
) -> None:
    job = await overlapping_job(store, OverlapPolicy.SKIP)
    [first] = await claim(store, [await plan_next(store, job, OverlapPolicy.SKIP)])
    # The plan of what would be the job's last fire (max_runs), skipped: the job goes on.
    last = replace(
        await plan_next(store, job, OverlapPolicy.SKIP),
        new_next_run_at=None,
        next_if_skipped=T0 + 2 * SEC,
    )
    assert await claim(store, [last]) == []
    stored = await store.get_job(job.id)
    assert (stored.state, stored.next_run_at, stored.fired_count) == (
        JobState.SCHEDULED,
        T0 + 2 * SEC,
        1,
    )
    # Once nothing is going, the same plan fires and completes the job.
    await store.finish_runs([finished(first)])
    final = replace(
        await plan_next(store, job, OverlapPolicy.SKIP), new_next_run_at=None, next_if_skipped=FAR
    )
    assert len(await claim(store, [final])) == 1
    stored = await store.get_job(job.id)
    assert (stored.state, stored.fired_count) == (JobState.COMPLETED, 2)


async def test_skips_in_a_row_for_one_run_are_one_ledger_row(store: ScheduleStore) -> None:
    policy = OverlapPolicy.SKIP
    job = await overlapping_job(store, policy)
    [first] = await claim(store, [await plan_next(store, job, policy)])
    for _ in range(3):  # T0 + 1 s .. T0 + 3 s, while the first run goes on
        assert await claim(store, [await plan_next(store, job, policy)]) == []
    await store.finish_runs([finished(first)])
    [second] = await claim(store, [await plan_next(store, job, policy)])  # T0 + 4 s
    assert await claim(store, [await plan_next(store, job, policy)]) == []  # T0 + 5 s
    found = [
        (r["first_us"], r["last_us"], r["count"], r["run_id"]) for r in await ledger(store, job.id)
    ]
    assert found == [
        (to_us(T0 + SEC), to_us(T0 + 3 * SEC), 3, first.run_id),
        (to_us(T0 + 5 * SEC), to_us(T0 + 5 * SEC), 1, second.run_id),
    ]


async def test_a_run_created_while_the_job_was_allow_is_not_seen_by_a_later_policy(
    store: ScheduleStore,
) -> None:
    """Only runs created under a policy enter the index the policies probe (docs/policies.md):
    an `allow` job's runs cost that index nothing, and a policy applies from its first run."""
    job = await overlapping_job(store, OverlapPolicy.ALLOW)
    [before] = await claim(store, [await plan_next(store, job, OverlapPolicy.ALLOW)])
    # The policy changes to skip while that run is still going: it is not seen, so this fires.
    [first] = await claim(store, [await plan_next(store, job, OverlapPolicy.SKIP)])
    assert first.scheduled_for == T0 + SEC
    # The run created under skip is seen: the next occurrence is skipped for it.
    assert await claim(store, [await plan_next(store, job, OverlapPolicy.SKIP)]) == []
    [row] = await ledger(store, job.id)
    assert (row["reason"], row["run_id"]) == ("skipped_overlap", first.run_id)
    assert before.run_id != first.run_id


@pytest.mark.parametrize("hand_off", [False, True], ids=["in-process", "hand-off"])
async def test_a_batch_mixing_plain_plans_and_a_policy_plan_applies_each(
    store: ScheduleStore, hand_off: bool
) -> None:
    # The SQL stores claim a batch of plain plans with a leaner statement: one plan that needs
    # the policy work must carry the whole batch to the full statement, and plain plans in it
    # must fire as they would alone.
    job = await overlapping_job(store, OverlapPolicy.SKIP)
    [first] = await claim(store, [await plan_next(store, job, OverlapPolicy.SKIP)])
    plain = make_job(2)
    await store.create_job(plain)
    plans = [
        await plan_next(store, plain, OverlapPolicy.ALLOW),
        await plan_next(store, job, OverlapPolicy.SKIP),
    ]
    assert plans[0].plain
    assert not plans[1].plain
    if hand_off:
        fired = await store.claim_hand_off(plans, owner="s", now=T0 + SEC)
    else:
        fired = await store.claim(plans, owner="a", lease_until=FAR, now=T0 + SEC)
    assert [f.job_id for f in fired] == [plain.id]
    assert [e["reason"] for e in await ledger(store, job.id)] == ["skipped_overlap"]
    assert (await store.get_job(plain.id)).next_run_at == T0 + SEC
    assert [r.id for r in await store.list_runs(job.id)] == [first.run_id]
