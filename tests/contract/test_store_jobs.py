"""The ScheduleStore contract, part JobStore: jobs and tenants (create, read, list, edit,
delete; signing secrets).

Run against every backend (memory, SQLite, PostgreSQL); see tickwork/store/base.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tickwork.domain.jobs import (
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    JobState,
    MisfirePolicy,
    Schedule,
)
from tickwork.errors import NotFound, StaleJob
from tickwork.store.base import JobQuery, ScheduleStore

from .store_helpers import (
    ALERT,
    SEC,
    SECRET_A,
    SECRET_B,
    T0,
    TARGET,
    claim,
    make_job,
    outcome,
    plan_for,
)


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule(trigger=CronTrigger(expr="0 2 * * *", timezone="Europe/Berlin")),
        Schedule(
            trigger=EveryTrigger(interval_ms=1500, anchor=T0),
            start_at=T0,
            end_at=T0 + 3600 * SEC,
            misfire=MisfirePolicy.FIRE_ALL,
            misfire_grace_ms=250,
        ),
        Schedule(trigger=AtTrigger(at=T0 + SEC), misfire=MisfirePolicy.SKIP),
    ],
    ids=["cron", "every", "at"],
)
async def test_create_then_get_round_trips_every_field(
    store: ScheduleStore, schedule: Schedule
) -> None:
    job = make_job(1, schedule=schedule, tenant="acme", last_fired_at=T0 - SEC)
    await store.create_job(job)
    assert await store.get_job(job.id) == job


async def test_missing_jobs_raise_not_found(store: ScheduleStore) -> None:
    with pytest.raises(NotFound):
        await store.get_job("nope")
    with pytest.raises(NotFound):
        await store.delete_job("nope")
    with pytest.raises(NotFound):
        await store.update_job(make_job(404))
    with pytest.raises(NotFound):
        await store.list_runs("nope")
    with pytest.raises(NotFound):
        await store.add_manual_run("nope", now=T0)


async def test_list_filters_and_paginates_in_id_order(store: ScheduleStore) -> None:
    for n in range(1, 8):
        await store.create_job(
            make_job(
                n,
                name=("etl-" if n % 2 else "web-") + str(n),
                tenant="acme" if n <= 4 else "other",
                state=JobState.PAUSED if n == 3 else JobState.SCHEDULED,
            )
        )
    page = await store.list_jobs(JobQuery(limit=3))
    assert [j.name for j in page] == ["etl-1", "web-2", "etl-3"]
    page2 = await store.list_jobs(JobQuery(limit=3, after_id=page[-1].id))
    assert [j.name for j in page2] == ["web-4", "etl-5", "web-6"]
    assert [j.name for j in await store.list_jobs(JobQuery(name_prefix="etl-"))] == [
        "etl-1",
        "etl-3",
        "etl-5",
        "etl-7",
    ]
    assert [j.name for j in await store.list_jobs(JobQuery(state=JobState.PAUSED))] == ["etl-3"]
    acme = await store.list_jobs(JobQuery(tenant="acme", name_prefix="web"))
    assert [j.name for j in acme] == ["web-2", "web-4"]


async def test_an_update_never_undoes_a_claim_it_did_not_see(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    await claim(store, [plan_for(job, new_next=T0 + SEC)])
    with pytest.raises(StaleJob):
        await store.update_job(replace(job, state=JobState.PAUSED))  # read before the claim
    assert (await store.get_job(job.id)).state is JobState.SCHEDULED
    current = await store.get_job(job.id)
    edited = replace(current, name="renamed", next_run_at=T0 + 10 * SEC, updated_at=T0 + SEC)
    stored = await store.update_job(edited)
    assert stored.name == "renamed"
    assert stored.next_run_at == T0 + 10 * SEC
    assert stored.fence_token == 1
    assert await store.get_job(job.id) == stored


async def test_delete_removes_the_job_and_its_runs(store: ScheduleStore) -> None:
    job = make_job(1)
    await store.create_job(job)
    await claim(store, [plan_for(job, new_next=T0 + SEC)])
    await store.delete_job(job.id)
    with pytest.raises(NotFound):
        await store.get_job(job.id)
    with pytest.raises(NotFound):
        await store.list_runs(job.id)


async def test_delete_takes_the_runs_attempts_along(store: ScheduleStore) -> None:
    # Found by the stateful test: the SQL stores kept the attempts of a deleted job's runs, so
    # list_attempts of a run that no longer exists listed them instead of raising NotFound.
    job, other = make_job(1), make_job(2)
    for j in (job, other):
        await store.create_job(j)
    fires = await claim(store, [plan_for(j, new_next=T0 + SEC) for j in (job, other)])
    assert await store.finish_runs([outcome(f) for f in fires]) == 2
    [mine] = [f for f in fires if f.job_id == job.id]
    [theirs] = [f for f in fires if f.job_id == other.id]
    await store.delete_job(job.id)
    with pytest.raises(NotFound):
        await store.get_run(mine.run_id)
    with pytest.raises(NotFound):
        await store.list_attempts(mine.run_id)
    assert len(await store.list_attempts(theirs.run_id)) == 1  # other jobs keep theirs


async def test_an_update_keeps_what_is_not_editable(store: ScheduleStore) -> None:
    job = make_job(1, last_fired_at=T0 - SEC)
    await store.create_job(job)
    sent = replace(job, name="renamed", created_at=T0 + SEC, last_fired_at=T0, updated_at=T0 + SEC)
    stored = await store.update_job(sent)
    assert stored == replace(sent, created_at=job.created_at, last_fired_at=job.last_fired_at)
    assert await store.get_job(job.id) == stored


async def test_job_secrets_and_alert_round_trip_and_can_be_changed(store: ScheduleStore) -> None:
    job = make_job(
        1, target=replace(TARGET, secrets=(SECRET_A, SECRET_B)), on_failure=ALERT, tenant="acme"
    )
    await store.create_job(job)
    assert await store.get_job(job.id) == job
    [listed] = await store.list_jobs(JobQuery(tenant="acme"))
    assert listed.target == job.target
    assert listed.on_failure == ALERT
    cleared = replace(job, target=replace(TARGET, secrets=()), on_failure=None)
    assert await store.update_job(cleared) == cleared
    assert await store.get_job(job.id) == cleared


async def test_tenant_secrets_are_set_replaced_and_cleared(store: ScheduleStore) -> None:
    assert await store.get_tenant("acme") is None
    first = await store.set_tenant_secrets("acme", [SECRET_A], now=T0)
    assert (first.tenant, first.webhook_secrets, first.created_at, first.updated_at) == (
        "acme",
        (SECRET_A,),
        T0,
        T0,
    )
    rotated = await store.set_tenant_secrets("acme", [SECRET_A, SECRET_B], now=T0 + SEC)
    assert rotated.webhook_secrets == (SECRET_A, SECRET_B)
    assert (rotated.created_at, rotated.updated_at) == (T0, T0 + SEC)
    assert await store.get_tenant("acme") == rotated
    assert await store.get_tenant("other") is None  # tenants do not share settings
    cleared = await store.set_tenant_secrets("acme", [], now=T0 + 2 * SEC)
    assert cleared.webhook_secrets == ()
    assert await store.get_tenant("acme") == cleared  # the row stays, for other settings
