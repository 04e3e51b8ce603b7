"""The job -> tenant cache the executor's tenant cap keys on (worker/job_tenants.py): a
single-tenant store costs no read per job, several tenants one read per job and TTL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, TaskTarget
from tickwork.store.memory import MemoryStore
from tickwork.worker.job_tenants import UNKNOWN_TENANT, JobTenants

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class CountingStore(MemoryStore):
    """The memory store, counting the reads the cache makes."""

    def __init__(self) -> None:
        super().__init__()
        self.job_reads = 0
        self.list_reads = 0

    async def get_job(self, job_id: str) -> Job:
        self.job_reads += 1
        return await super().get_job(job_id)

    async def list_tenants(self):  # type: ignore[no-untyped-def]
        self.list_reads += 1
        return await super().list_tenants()


async def add_job(store: MemoryStore, job_id: str, tenant: str = "default") -> None:
    job = Job(
        id=job_id, name=job_id, tenant=tenant, target=TaskTarget(name="t"),
        schedule=Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0)),
        state=JobState.PAUSED, next_run_at=None, created_at=T0, updated_at=T0,
    )  # fmt: skip
    await store.create_job(job)


async def test_with_one_tenant_every_job_is_its_and_no_job_is_read() -> None:
    store, clock = CountingStore(), ManualClock(T0)
    tenants = JobTenants(store, clock, tenants_ttl_s=5)
    for n in range(3):
        await add_job(store, f"j{n}")
    assert tenants.known("j0") is None  # nothing read yet
    assert await tenants.learn(["j0", "j1", "j2"]) == dict.fromkeys(["j0", "j1", "j2"], "default")
    assert tenants.known("any other job") == "default"
    assert (store.list_reads, store.job_reads) == (1, 0)


async def test_with_several_tenants_each_job_is_read_once_per_ttl() -> None:
    store, clock = CountingStore(), ManualClock(T0)
    tenants = JobTenants(store, clock, tenants_ttl_s=5, jobs_ttl_s=60)
    await store.create_tenant("a", now=T0)
    await add_job(store, "ja", "a")
    await add_job(store, "jd")
    assert await tenants.learn(["ja", "jd", "gone"]) == {
        "ja": "a",
        "jd": "default",
        "gone": UNKNOWN_TENANT,  # its fire still runs, as an unknown tenant's
    }
    assert (tenants.known("ja"), tenants.known("jd"), tenants.known("gone")) == (
        "a",
        "default",
        None,
    )
    assert store.job_reads == 3
    clock.advance(timedelta(seconds=59))
    assert await tenants.learn(["ja"]) == {"ja": "a"}
    assert store.job_reads == 3  # still known
    clock.advance(timedelta(seconds=1))
    assert tenants.known("ja") is None
    await tenants.learn(["ja"])
    assert store.job_reads == 4


async def test_a_second_tenant_is_noticed_when_the_tenant_list_is_read_again() -> None:
    store, clock = CountingStore(), ManualClock(T0)
    tenants = JobTenants(store, clock, tenants_ttl_s=5)
    await tenants.learn([])
    assert tenants.known("any") == "default"
    await store.create_tenant("b", now=T0)
    await add_job(store, "jb", "b")
    assert not tenants.stale()
    clock.advance(timedelta(seconds=5))
    assert tenants.stale()
    assert await tenants.learn(["jb"]) == {"jb": "b"}
    assert tenants.known("unread") is None  # several tenants now: jobs are read one by one
    assert store.list_reads == 2
