"""DeadLetterService for a tenant-scoped caller: one tenant's dead letters, listed, redriven and
purged (paged by tenant), and another tenant's jobs and runs as if they did not exist."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import CronTrigger, Schedule, WebhookTarget
from tickwork.domain.runs import RunOutcome, RunStatus
from tickwork.errors import NotFound
from tickwork.services.dead_letters import DeadLetterService, NotDeadLettered
from tickwork.services.jobs import JobService, JobSpec
from tickwork.store.memory import MemoryStore

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    await store.open()
    yield store
    await store.close()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


async def job_of(store: MemoryStore, clock: ManualClock, tenant: str) -> str:
    spec = JobSpec(
        name="nightly",
        tenant=tenant,
        schedule=Schedule(trigger=CronTrigger(expr="0 2 * * *")),
        target=WebhookTarget(url="https://example.com/hook"),
    )
    return (await JobService(store, clock).create(spec)).id


async def dead_letter(store: MemoryStore, job_id: str, n: int) -> int:
    """A manual run of the job that failed for good; returns its id."""
    now = NOW + timedelta(seconds=n)
    run = await store.add_manual_run(job_id, now=now)
    [fire] = [
        f
        for f in await store.lease_runs(now=now, owner="w", lease_until=now, limit=100)
        if f.run_id == run.id
    ]
    failed = RunOutcome(
        run_id=run.id,
        job_id=job_id,
        attempt=fire.attempt,
        fence_token=fire.fence_token,
        status=RunStatus.FAILED,
        started_at=now,
        finished_at=now,
        error="connection refused",
    )
    assert await store.finish_runs([failed]) == 1
    return run.id


@pytest.fixture
async def queue(store: MemoryStore, clock: ManualClock) -> dict[str, list[int]]:
    """Five dead letters of acme's two jobs, two of globex's one: run ids by tenant, newest
    first."""
    for tenant in ("acme", "globex"):
        await store.create_tenant(tenant, now=NOW)  # jobs name existing tenants
    acme = [await job_of(store, clock, "acme") for _ in range(2)]
    globex = await job_of(store, clock, "globex")
    runs: dict[str, list[int]] = {"acme": [], "globex": []}
    for n in range(7):
        tenant = "globex" if n in (2, 5) else "acme"
        job_id = globex if tenant == "globex" else acme[n % 2]
        runs[tenant].insert(0, await dead_letter(store, job_id, n))
    return runs


async def test_a_tenant_lists_only_its_own_dead_letters(
    store: MemoryStore, clock: ManualClock, queue: dict[str, list[int]]
) -> None:
    dead = DeadLetterService(store, clock)
    assert [r.id for r in await dead.list(tenant="acme")] == queue["acme"]
    assert [r.id for r in await dead.list(tenant="globex", limit=1)] == queue["globex"][:1]
    assert [r.id for r in await dead.list(tenant="initech")] == []
    assert len(await dead.list()) == 7


@pytest.mark.parametrize("act", ["redrive", "purge"])
async def test_a_tenants_dead_letters_are_walked_page_by_page(
    store: MemoryStore, clock: ManualClock, queue: dict[str, list[int]], act: str
) -> None:
    dead = DeadLetterService(store, clock, page=2)
    assert await getattr(dead, act)(tenant="acme") == 5
    assert [r.id for r in await dead.list()] == queue["globex"]
    assert await getattr(dead, act)(tenant="acme") == 0


async def test_another_tenants_job_is_not_found(
    store: MemoryStore, clock: ManualClock, queue: dict[str, list[int]]
) -> None:
    dead = DeadLetterService(store, clock)
    [globex_run, _] = queue["globex"]
    globex_job = (await store.get_run(globex_run)).job_id
    with pytest.raises(NotFound):
        await dead.list(job_id=globex_job, tenant="acme")
    for act in (dead.redrive, dead.purge):
        with pytest.raises(NotFound):
            await act(globex_job, tenant="acme")
    assert [r.id for r in await dead.list(job_id=globex_job, tenant="globex")] == queue["globex"]
    assert await dead.redrive(globex_job, tenant="globex") == 2


async def test_one_run_of_another_tenant_is_not_a_dead_letter_to_it(
    store: MemoryStore, clock: ManualClock, queue: dict[str, list[int]]
) -> None:
    dead = DeadLetterService(store, clock)
    globex_run = queue["globex"][0]
    for act in (dead.redrive_one, dead.purge_one):
        with pytest.raises(NotDeadLettered):
            await act(globex_run, tenant="acme")
        with pytest.raises(NotDeadLettered):
            await act(987_654, tenant="acme")  # no such run: the same answer
    assert len(await dead.list(tenant="globex")) == 2  # untouched
    await dead.purge_one(globex_run, tenant="globex")
    await dead.redrive_one(queue["acme"][0], tenant="acme")
    left = sorted([*queue["acme"][1:], queue["globex"][1]], reverse=True)
    assert [r.id for r in await dead.list()] == left
