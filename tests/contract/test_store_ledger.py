"""The ScheduleStore contract, the occurrence ledger: the claims record the occurrences they
fold or skip, `update_job` records what a resume passed over, both read back by window, pruned
with history and deleted with the job.

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tickwork.domain.jobs import JobState
from tickwork.domain.occurrences import LedgerRange, LedgerReason
from tickwork.domain.runs import RunOrigin
from tickwork.errors import StaleJob
from tickwork.store.base import ScheduleStore

from .store_helpers import SEC, T0, claim, make_job, plan_for

BIG = 1000


async def test_a_coalescing_claim_records_the_folded_range_into_its_run(
    store: ScheduleStore,
) -> None:
    job = await store.create_job(make_job(1))
    plan = replace(
        plan_for(job, fire=T0 + 5 * SEC, new_next=T0 + 6 * SEC, coalesced=5),
        missed_first=T0,
        missed_last=T0 + 4 * SEC,
    )
    fires = await claim(store, [plan])
    assert len(fires) == 1
    found = await store.list_occurrences(job.id, T0, T0 + 10 * SEC, limit=BIG)
    assert [(e.first, e.last, e.count, e.reason, e.run_id) for e in found] == [
        (T0, T0 + 4 * SEC, 5, LedgerReason.COALESCED_INTO, fires[0].run_id)
    ]
    assert found[0].recorded_at == T0
    assert found[0].job_id == job.id


async def test_a_coalescing_hand_off_whose_run_existed_names_that_run(
    store: ScheduleStore,
) -> None:
    job = await store.create_job(make_job(1))
    first = await store.claim_hand_off([plan_for(job, new_next=T0)], owner="s", now=T0)
    again = replace(
        plan_for(await store.get_job(job.id), fire=T0, new_next=T0 + 2 * SEC, coalesced=1),
        missed_first=T0 - SEC,
        missed_last=T0 - SEC,
    )
    assert await store.claim_hand_off([again], owner="s", now=T0) == []  # the key existed
    found = await store.list_occurrences(job.id, T0 - SEC, T0, limit=BIG)
    assert [(e.reason, e.run_id) for e in found] == [(LedgerReason.COALESCED_INTO, first[0].run_id)]


async def test_a_misfire_skip_records_the_skipped_range_without_a_run(
    store: ScheduleStore,
) -> None:
    job = await store.create_job(make_job(1))
    skip = replace(
        plan_for(job, new_next=T0 + 4 * SEC, coalesced=3),
        scheduled_for=None,
        missed_first=T0,
        missed_last=T0 + 2 * SEC,
    )
    assert await claim(store, [skip]) == []
    found = await store.list_occurrences(job.id, T0, T0, limit=BIG)
    assert [(e.first, e.last, e.count, e.reason, e.run_id) for e in found] == [
        (T0, T0 + 2 * SEC, 3, LedgerReason.SKIPPED_MISFIRE, None)
    ]


async def test_an_on_time_claim_and_a_refused_one_record_nothing(store: ScheduleStore) -> None:
    job = await store.create_job(make_job(1))
    await claim(store, [plan_for(job, new_next=T0 + SEC)])
    stale = replace(plan_for(job, new_next=T0 + SEC, coalesced=2), missed_first=T0 - 2 * SEC)
    stale = replace(stale, missed_last=T0 - SEC)
    assert await claim(store, [stale]) == []  # the fence moved on: nothing applies
    assert await store.list_occurrences(job.id, T0 - 9 * SEC, T0 + 9 * SEC, limit=BIG) == []


def _paused_range(job_id: str, first_s: int, last_s: int) -> LedgerRange:
    return LedgerRange(
        job_id=job_id,
        first=T0 + first_s * SEC,
        last=T0 + last_s * SEC,
        count=last_s - first_s + 1,
        reason=LedgerReason.PAUSED,
        run_id=None,
        recorded_at=T0 + 100 * SEC,
    )


async def test_update_job_records_its_ledger_with_the_update_or_not_at_all(
    store: ScheduleStore,
) -> None:
    job = await store.create_job(make_job(1, state=JobState.PAUSED))
    resumed = replace(job, state=JobState.SCHEDULED, next_run_at=T0 + 10 * SEC)
    await store.update_job(resumed, ledger=[_paused_range(job.id, 0, 9)])
    found = await store.list_occurrences(job.id, T0, T0 + 60 * SEC, limit=BIG)
    assert [(e.first, e.last, e.count, e.reason) for e in found] == [
        (T0, T0 + 9 * SEC, 10, LedgerReason.PAUSED)
    ]
    await claim(store, [plan_for(await store.get_job(job.id), new_next=T0 + 11 * SEC)])
    stale = replace(resumed, state=JobState.PAUSED)  # read before the claim: its fence is old
    with pytest.raises(StaleJob):
        await store.update_job(stale, ledger=[_paused_range(job.id, 20, 29)])
    assert len(await store.list_occurrences(job.id, T0, T0 + 60 * SEC, limit=BIG)) == 1


async def test_list_occurrences_returns_the_ranges_overlapping_the_window_in_order(
    store: ScheduleStore,
) -> None:
    job = await store.create_job(make_job(1))
    other = await store.create_job(make_job(2))
    for first_s, last_s in ((20, 29), (0, 9), (40, 49)):
        job = await store.update_job(job, ledger=[_paused_range(job.id, first_s, last_s)])
    await store.update_job(other, ledger=[_paused_range(other.id, 0, 100)])

    async def window(lo: int, hi: int, limit: int = BIG) -> list[int]:
        found = await store.list_occurrences(job.id, T0 + lo * SEC, T0 + hi * SEC, limit=limit)
        return [round((e.first - T0) / SEC) for e in found]

    assert await window(0, 100) == [0, 20, 40]
    assert await window(9, 20) == [0, 20]  # both ends touch a range
    assert await window(10, 19) == []
    assert await window(25, 45) == [20, 40]
    assert await window(0, 100, limit=2) == [0, 20]


async def test_runs_scheduled_between_reads_every_origin_by_nominal_instant(
    store: ScheduleStore,
) -> None:
    job = await store.create_job(make_job(1))
    await claim(store, [plan_for(job, new_next=T0 + SEC)])
    job = await store.get_job(job.id)
    await claim(store, [plan_for(job, new_next=T0 + 2 * SEC)])
    manual = await store.add_manual_run(job.id, now=T0 + 5 * SEC)
    runs = await store.runs_scheduled_between(job.id, T0, T0 + 5 * SEC, limit=BIG)
    assert [(r.scheduled_for, r.origin) for r in runs] == [
        (T0, RunOrigin.SCHEDULE),
        (T0 + SEC, RunOrigin.SCHEDULE),
        (T0 + 5 * SEC, RunOrigin.MANUAL),
    ]
    assert runs[-1].id == manual.id
    assert len(await store.runs_scheduled_between(job.id, T0 + SEC, T0 + 4 * SEC, limit=BIG)) == 1
    assert len(await store.runs_scheduled_between(job.id, T0, T0 + 9 * SEC, limit=2)) == 2


async def test_prune_history_deletes_ranges_recorded_before_the_cutoff_in_batches(
    store: ScheduleStore,
) -> None:
    job = await store.create_job(make_job(1))
    old = [replace(_paused_range(job.id, n * 10, n * 10 + 1), recorded_at=T0) for n in range(3)]
    job = await store.update_job(job, ledger=old)
    job = await store.update_job(job, ledger=[_paused_range(job.id, 50, 51)])  # at T0 + 100 s
    assert await store.prune_history(finished_before=T0 + SEC, limit=2) == 2
    assert await store.prune_history(finished_before=T0 + SEC, limit=2) == 1
    assert await store.prune_history(finished_before=T0 + SEC, limit=2) == 0
    left = await store.list_occurrences(job.id, T0, T0 + 99 * SEC, limit=BIG)
    assert [e.first for e in left] == [T0 + 50 * SEC]


async def test_deleting_a_job_deletes_its_ledger(store: ScheduleStore) -> None:
    job = await store.create_job(make_job(1))
    await store.update_job(job, ledger=[_paused_range(job.id, 0, 9)])
    await store.delete_job(job.id)
    await store.create_job(make_job(1))  # the same id again starts with an empty ledger
    assert await store.list_occurrences(job.id, T0, T0 + 60 * SEC, limit=BIG) == []
