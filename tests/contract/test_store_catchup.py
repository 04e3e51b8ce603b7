"""The ScheduleStore contract, misfire fire_all's catch-up: a late claim creates ONE catch-up
backfill for the missed occurrences within the job's catchup_window, in the same statement or
transaction as the job's advance, and records the older ones as skipped_misfire, alike on every
backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tickwork.domain.backfills import DEFAULT_BACKFILL_RATE, BackfillKind, BackfillState
from tickwork.domain.jobs import EveryTrigger, Job, MisfirePolicy, Schedule
from tickwork.domain.occurrences import LedgerReason
from tickwork.domain.runs import RunOrigin
from tickwork.scheduler.planning import plan_claim
from tickwork.store.base import ClaimPlan, DueJob, ScheduleStore

from .store_helpers import SEC, T0, make_job

US = timedelta(microseconds=1)
NOW = T0 + 10.5 * SEC  # every second, down since T0: T0 .. T0+10 are due
BIG = 1000


def fire_all_job(n: int, *, window: timedelta = 5 * SEC) -> Job:
    schedule = Schedule(
        trigger=EveryTrigger(interval_ms=1000, anchor=T0),
        misfire=MisfirePolicy.FIRE_ALL,
        catchup_window_ms=window // timedelta(milliseconds=1),
    )
    return make_job(n, schedule=schedule)


def planned(job: Job) -> ClaimPlan:
    assert job.next_run_at is not None
    due = DueJob(
        job_id=job.id,
        fence_token=job.fence_token,
        next_run_at=job.next_run_at,
        schedule=job.schedule,
    )
    return plan_claim(due, NOW)


async def claimed(store: ScheduleStore, plans: list[ClaimPlan], hand_off: bool) -> int:
    """Claim in process or for other processes; how many runs came back."""
    if hand_off:
        return len(await store.claim_hand_off(plans, owner="s", now=NOW))
    return len(await store.claim(plans, owner="s", lease_until=NOW + 60 * SEC, now=NOW))


@pytest.mark.parametrize("hand_off", [False, True], ids=["claim", "claim_hand_off"])
async def test_a_late_fire_all_claim_creates_one_catch_up_and_skips_the_older_ones(
    store: ScheduleStore, hand_off: bool
) -> None:
    job = await store.create_job(fire_all_job(1))
    plan = planned(job)
    assert await claimed(store, [plan], hand_off) == 1
    # The latest occurrence fired on time, folding nothing; the job moved past now.
    [run] = await store.list_runs(job.id, limit=BIG)
    assert (run.scheduled_for, run.origin, run.coalesced) == (T0 + 10 * SEC, RunOrigin.SCHEDULE, 0)
    after = await store.get_job(job.id)
    assert (after.next_run_at, after.fired_count) == (T0 + 11 * SEC, 1)
    # Older than NOW - PT5S (T0+5.5): T0 .. T0+5, skipped, though the claim fired.
    found = await store.list_occurrences(job.id, T0, NOW, limit=BIG)
    assert [(e.first, e.last, e.count, e.reason, e.run_id) for e in found] == [
        (T0, T0 + 5 * SEC, 6, LedgerReason.SKIPPED_MISFIRE, None)
    ]
    # Within it: T0+6 .. T0+9, one catch-up [T0+6, T0+9 + 1 us), running, not begun.
    [catchup] = await store.list_backfills(job.id)
    assert (catchup.kind, catchup.state, catchup.tenant) == (
        BackfillKind.CATCHUP,
        BackfillState.RUNNING,
        job.tenant,
    )
    assert (catchup.from_at, catchup.to_at, catchup.total) == (T0 + 6 * SEC, T0 + 9 * SEC + US, 4)
    assert (catchup.cursor_at, catchup.done, catchup.rate_per_s) == (None, 0, DEFAULT_BACKFILL_RATE)
    assert (catchup.created_at, catchup.paced_at) == (NOW, NOW)
    assert [r.backfill.id for r in await store.running_backfills(limit=10)] == [catchup.id]


@pytest.mark.parametrize("hand_off", [False, True], ids=["claim", "claim_hand_off"])
async def test_a_batch_keeps_each_plans_catch_up_and_ledger_to_its_own_job(
    store: ScheduleStore, hand_off: bool
) -> None:
    """On-time plans beside late ones (their optional columns are NULL in a batch that uses
    them) create nothing; each late one gets its own catch-up."""
    on_time = await store.create_job(make_job(1, next_run_at=NOW))
    late_a = await store.create_job(fire_all_job(2))
    late_b = await store.create_job(fire_all_job(3, window=60 * SEC))  # all ten caught up
    plans = [
        planned(late_a),
        ClaimPlan(
            job_id=on_time.id,
            expected_fence=0,
            expected_next_run_at=NOW,
            scheduled_for=NOW,
            coalesced=0,
            new_next_run_at=NOW + SEC,
        ),
        planned(late_b),
    ]
    assert await claimed(store, plans, hand_off) == 3
    assert await store.list_backfills(on_time.id) == []
    assert await store.list_occurrences(on_time.id, T0, NOW + SEC, limit=BIG) == []
    [a] = await store.list_backfills(late_a.id)
    [b] = await store.list_backfills(late_b.id)
    assert (a.from_at, a.total) == (T0 + 6 * SEC, 4)
    assert (b.from_at, b.to_at, b.total) == (T0, T0 + 9 * SEC + US, 10)
    assert await store.list_occurrences(late_b.id, T0, NOW, limit=BIG) == []
    assert len(await store.list_occurrences(late_a.id, T0, NOW, limit=BIG)) == 1


async def test_a_catch_up_comes_with_its_claim_or_not_at_all(store: ScheduleStore) -> None:
    """A plan the store drops (the job moved on since it was read) creates no catch-up."""
    job = await store.create_job(fire_all_job(1))
    plan = planned(job)
    assert await claimed(store, [plan], hand_off=False) == 1
    assert await claimed(store, [plan], hand_off=False) == 0  # stale: its fence is old
    assert len(await store.list_backfills(job.id)) == 1
    assert len(await store.list_occurrences(job.id, T0, NOW, limit=BIG)) == 1


async def test_an_on_time_fire_all_claim_creates_no_catch_up(store: ScheduleStore) -> None:
    job = await store.create_job(fire_all_job(1))
    due = DueJob(job_id=job.id, fence_token=0, next_run_at=T0, schedule=job.schedule)
    assert await claimed(store, [plan_claim(due, T0 + 0.5 * SEC)], hand_off=True) == 1
    assert await store.list_backfills(job.id) == []
    assert await store.list_occurrences(job.id, T0, NOW, limit=BIG) == []
