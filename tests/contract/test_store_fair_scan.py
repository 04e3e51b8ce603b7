"""The ScheduleStore contract, what a scheduler behind its work reads (scheduler/fairness.py):
due counts per (tenant, priority) level, capped; the due jobs of the levels asked for, up to a
limit each, earliest first; every tenant's limits; a job's priority and tenant in the due scan.
Alike on every backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

from tickwork.domain.jobs import DEFAULT_PRIORITY, JobState
from tickwork.domain.tenant_limits import TenantLimits
from tickwork.store.base import ScheduleStore

from .store_helpers import SEC, T0, make_job


async def seed(store: ScheduleStore) -> None:
    for tenant in ("a", "b"):
        await store.create_tenant(
            tenant, now=T0, limits=TenantLimits(weight=2 if tenant == "a" else None)
        )
    n = 0
    for k in range(30):  # tenant a: 30 due at T0 .. T0+29 s, priority 5, and 4 at priority 9
        n += 1
        await store.create_job(make_job(n, tenant="a", next_run_at=T0 + k * SEC))
    for k in range(4):
        n += 1
        await store.create_job(make_job(n, tenant="a", next_run_at=T0 + k * SEC, priority=9))
    for k in range(3):  # tenant b: 3 due, 1 later
        n += 1
        await store.create_job(make_job(n, tenant="b", next_run_at=T0 + k * SEC, priority=2))
    n += 1
    await store.create_job(make_job(n, tenant="b", next_run_at=T0 + 100 * SEC, priority=2))
    n += 1  # paused: never due
    await store.create_job(make_job(n, tenant="b", state=JobState.PAUSED, priority=2))


async def test_due_counts_are_per_level_capped_and_skip_what_is_not_due(
    store: ScheduleStore,
) -> None:
    await seed(store)
    until = T0 + 20 * SEC
    counts = await store.due_counts(until, ["a", "b", "nobody"], cap=10)
    assert counts == {("a", DEFAULT_PRIORITY): 10, ("a", 9): 4, ("b", 2): 3}
    assert await store.due_counts(until, ["b"], cap=2) == {("b", 2): 2}
    later = await store.due_counts(until, ["a"], cap=100, not_before=T0 + 10 * SEC)
    assert later == {("a", DEFAULT_PRIORITY): 11}
    assert await store.due_counts(until, [], cap=10) == {}


async def test_due_jobs_by_level_take_each_levels_earliest_up_to_its_limit(
    store: ScheduleStore,
) -> None:
    await seed(store)
    until = T0 + 20 * SEC
    found = await store.due_jobs_by_level(until, {("a", 9): 2, ("a", 5): 3, ("b", 2): 10})
    by_level: dict[tuple[str, int], list[float]] = {}
    for job in found:
        offset = (job.next_run_at - T0) / SEC
        by_level.setdefault((job.tenant, job.priority), []).append(offset)
    assert {level: sorted(offsets) for level, offsets in by_level.items()} == {
        ("a", 9): [0, 1],
        ("a", 5): [0, 1, 2],
        ("b", 2): [0, 1, 2],  # the one due later and the paused one are not due
    }
    assert await store.due_jobs_by_level(until, {("a", 9): 0}) == []


async def test_the_due_scan_carries_tenant_and_priority_and_tenants_their_limits(
    store: ScheduleStore,
) -> None:
    await seed(store)
    due = await store.due_jobs(T0, 100)
    assert {(d.tenant, d.priority) for d in due} == {("a", 5), ("a", 9), ("b", 2)}
    limits = await store.tenant_limits()
    assert limits["a"] == TenantLimits(weight=2)
    assert limits["b"] == TenantLimits()
    assert "default" in limits
    job = await store.get_job(f"{31:032x}")
    assert job.priority == 9
