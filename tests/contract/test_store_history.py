"""The ScheduleStore contract, part HistoryStore: run history, dead letters, retention and stats.

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from tickwork.domain.jobs import (
    JobState,
)
from tickwork.domain.runs import AttemptStatus, RunState, RunStatus, run_state
from tickwork.errors import NotFound
from tickwork.store.base import ScheduleStore
from tickwork.store.postgres import PostgresStore

from .store_helpers import (
    SEC,
    T0,
    claim,
    make_job,
    outcome,
    plan_for,
)


async def test_runs_list_newest_first_with_keyset_pages(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    current = job
    for i in range(5):
        await claim(store, [plan_for(current, new_next=T0 + (i + 1) * SEC)])
        current = await store.get_job(job.id)
    runs = await store.list_runs(job.id, limit=3)
    assert [r.scheduled_for for r in runs] == [T0 + 4 * SEC, T0 + 3 * SEC, T0 + 2 * SEC]
    older = await store.list_runs(job.id, limit=3, before_id=runs[-1].id)
    assert [r.scheduled_for for r in older] == [T0 + SEC, T0]


async def test_stats_count_jobs_by_state_and_pending_runs(store: ScheduleStore) -> None:
    await store.create_job(make_job(1))
    await store.create_job(make_job(2, state=JobState.PAUSED))
    await store.add_manual_run(f"{1:032x}", now=T0)
    stats = await store.stats()
    assert stats.jobs_by_state == {"scheduled": 1, "paused": 1}
    assert stats.runs_pending == 1


async def test_failures_are_dead_lettered_then_redriven_or_purged(store: ScheduleStore) -> None:
    jobs = [make_job(n) for n in (1, 2, 3)]
    for job in jobs:
        await store.create_job(job)
    fires = await claim(store, [plan_for(j, new_next=T0 + SEC) for j in jobs])
    failed = [outcome(f, status=RunStatus.FAILED) for f in fires]
    assert await store.finish_runs(failed) == 3
    dead = await store.list_dead_letters(limit=10)
    assert [r.id for r in dead] == sorted((f.run_id for f in fires), reverse=True)
    assert all(r.status is RunStatus.FAILED and r.dead_lettered_at for r in dead)
    assert [r.id for r in await store.list_dead_letters(limit=1, before_id=dead[0].id)] == [
        dead[1].id
    ]
    assert [r.job_id for r in await store.list_dead_letters(job_id=jobs[0].id)] == [jobs[0].id]

    assert await store.redrive([fires[0].run_id], now=T0 + 5 * SEC) == 1
    assert await store.redrive([fires[0].run_id], now=T0 + 5 * SEC) == 0  # no longer dead
    [again] = await store.lease_runs(
        now=T0 + 5 * SEC, owner="b", lease_until=T0 + 99 * SEC, limit=5
    )
    assert (again.run_id, again.attempt) == (fires[0].run_id, 2)

    assert await store.purge_dead_letters([fires[1].run_id]) == 1
    assert [r.id for r in await store.list_dead_letters()] == [fires[2].run_id]
    purged = await store.get_run(fires[1].run_id)
    assert (purged.status, purged.dead_lettered_at) == (RunStatus.FAILED, None)
    assert await store.purge_dead_letters(None) == 1
    assert await store.list_dead_letters() == []


async def test_redrive_all_reenqueues_every_dead_letter(store: ScheduleStore) -> None:
    jobs = [make_job(n) for n in (1, 2)]
    for job in jobs:
        await store.create_job(job)
    fires = await claim(store, [plan_for(j, new_next=T0 + SEC) for j in jobs])
    await store.finish_runs([outcome(f, status=RunStatus.FAILED) for f in fires])
    assert await store.redrive(None, now=T0) == 2
    leased = await store.lease_runs(now=T0, owner="b", lease_until=T0 + 9 * SEC, limit=5)
    assert sorted(f.run_id for f in leased) == sorted(f.run_id for f in fires)


async def test_history_is_pruned_by_age_but_dead_letters_stay(store: ScheduleStore) -> None:
    jobs = [make_job(n) for n in (1, 2)]
    for job in jobs:
        await store.create_job(job)
    ok, bad = await claim(store, [plan_for(j, new_next=T0 + SEC) for j in jobs])
    await store.finish_runs([outcome(ok), outcome(bad, status=RunStatus.FAILED)])
    assert await store.prune_history(finished_before=T0, limit=100) == 0  # nothing that old
    cutoff = T0 + 3600 * SEC
    # ok's run, which holds its success (ADR 0033); the dead letter keeps its run and its
    # attempt (the DLQ's why)
    assert await store.prune_history(finished_before=cutoff, limit=100) == 1
    with pytest.raises(NotFound):
        await store.get_run(ok.run_id)
    assert [r.id for r in await store.list_dead_letters()] == [bad.run_id]
    assert [a.run_id for a in await store.list_attempts(bad.run_id)] == [bad.run_id]
    assert await store.prune_history(finished_before=cutoff, limit=100) == 0
    # Purged, it is history like any other: its attempt and its run go.
    assert await store.purge_dead_letters([bad.run_id]) == 1
    assert await store.prune_history(finished_before=cutoff, limit=100) == 2
    with pytest.raises(NotFound):
        await store.get_run(bad.run_id)


async def test_history_maintenance_is_safe_to_call_on_every_backend(store: ScheduleStore) -> None:
    """SQLite and memory have nothing to maintain; PostgreSQL creates its first partitions."""
    retention = timedelta(days=30)
    first = await store.maintain_history(now=T0, retention=retention)
    again = await store.maintain_history(now=T0, retention=retention)
    assert first.dropped == ()
    assert (again.created, again.dropped) == ((), ())
    assert first.created == (
        ("tw_attempts_p20260301", "tw_attempts_p20260302", "tw_attempts_p20260303",
         "tw_attempts_p20260304") if isinstance(store, PostgresStore) else ()
    )  # fmt: skip


async def test_unknown_runs_raise_not_found(store: ScheduleStore) -> None:
    with pytest.raises(NotFound):
        await store.get_run(424242)
    with pytest.raises(NotFound):
        await store.list_attempts(424242)


async def test_the_state_shown_follows_the_stored_run_through_its_life(
    store: ScheduleStore,
) -> None:
    jobs = [make_job(n) for n in (1, 2)]
    for job in jobs:
        await store.create_job(job)
    ok, bad = await store.claim_hand_off(
        [plan_for(j, new_next=T0 + SEC) for j in jobs], owner="s", now=T0
    )
    later = T0 + 10 * SEC

    async def states() -> list[RunState]:
        return [run_state(await store.get_run(e.run_id), later) for e in (ok, bad)]

    assert await states() == [RunState.PENDING, RunState.PENDING]  # handed off, not leased
    fires = await store.lease_runs(now=T0, owner="w1", lease_until=T0 + 30 * SEC, limit=5)
    assert await states() == [RunState.RUNNING, RunState.RUNNING]
    by_run = {f.run_id: f for f in fires}
    await store.finish_runs(
        [outcome(by_run[ok.run_id]), outcome(by_run[bad.run_id], status=RunStatus.FAILED)]
    )
    assert await states() == [RunState.SUCCEEDED, RunState.DEAD_LETTERED]
    await store.redrive([bad.run_id], now=T0 + 5 * SEC)
    assert await states() == [RunState.SUCCEEDED, RunState.RETRYING]  # one more attempt due
    [again] = await store.lease_runs(
        now=T0 + 5 * SEC, owner="w2", lease_until=T0 + 30 * SEC, limit=5
    )
    await store.finish_runs([outcome(again, status=RunStatus.FAILED)])
    await store.purge_dead_letters([bad.run_id])
    assert await states() == [RunState.SUCCEEDED, RunState.FAILED]
    statuses = [a.status for a in await store.list_attempts(bad.run_id)]
    assert statuses == [AttemptStatus.FAILED, AttemptStatus.FAILED]  # a redrive is no lost lease
