"""A tenant's destination lists at fire time: the worker reads them through the store (a short
cache, an injected clock) and refuses a fire the lists refuse, for good (no retry), with an
error naming the tenant and the list. Real stores (SQLite, PostgreSQL), a real executor and a
real webhook receiver on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tickwork.clock import ManualClock, SystemClock
from tickwork.domain.egress import EgressRules, parse_rules
from tickwork.domain.jobs import AlertTarget, Job, WebhookTarget
from tickwork.domain.runs import Fire, RunStatus
from tickwork.store.base import ScheduleStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore
from tickwork.worker.alerts import AlertSender
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.webhook import WebhookRunner
from tickwork.worker.leaser import LeaserConfig, StoreLeaser
from tickwork.worker.tenant_lists import TenantLists

from ..support.receiver import Receiver
from .test_signing_and_alerts import FAST_ALERTS, LOOPBACK, make_job, settled, trigger

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TTL_S = 1.5


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> ScheduleStore:
    # Sync, so that it may ask for the async pg_dsn fixture only when it is needed.
    if request.param == "sqlite":
        return SqliteStore(tmp_path / "t.db")
    return PostgresStore(request.getfixturevalue("pg_dsn"))


@pytest.fixture
async def store(new_store: ScheduleStore) -> AsyncIterator[ScheduleStore]:
    db = new_store
    await db.open()
    yield db
    await db.close()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


def fire_of(job_id: str, url: str) -> Fire:
    return Fire(
        run_id=1,
        job_id=job_id,
        key=f"{job_id}:0",
        scheduled_for=T0,
        fence_token=1,
        attempt=1,
        target=WebhookTarget(url=url),
        lease_until=T0 + timedelta(seconds=30),
    )


async def test_a_refused_fire_fails_for_good_and_its_alert_is_refused_too(
    store: ScheduleStore, receiver: Receiver
) -> None:
    await store.create_tenant("acme", now=T0)
    await store.set_tenant_egress("acme", parse_rules([], ["127.0.0.1"]), now=T0)
    lists = TenantLists(store, SystemClock(), ttl_s=TTL_S)
    async with WebhookRunner(policy=LOOPBACK, tenant_lists=lists) as runner:
        executor = Executor(
            store,
            SystemClock(),
            runner,
            ExecutorConfig(node_id="t"),
            alerts=AlertSender(runner, FAST_ALERTS),
        )
        leaser = StoreLeaser(
            store, SystemClock(), executor, LeaserConfig(node_id="t", scan_interval_ms=60_000)
        )
        stop = asyncio.Event()
        running = asyncio.gather(executor.run(stop), leaser.run(stop))
        alert = AlertTarget(url=receiver.url("/alert"))
        refused = make_job(1, receiver.url("/hook"), tenant="acme", on_failure=alert)
        allowed = make_job(2, receiver.url("/other"))  # tenant `default`: no lists
        refused_run = await trigger(store, refused)
        allowed_run = await trigger(store, allowed)
        assert await settled(store, refused_run) is RunStatus.FAILED
        assert await settled(store, allowed_run) is RunStatus.SUCCEEDED
        stop.set()
        await running  # drains outcomes and alerts
    run = await store.get_run(refused_run)
    assert run.last_error is not None
    assert "destination lists" in run.last_error
    assert "'127.0.0.1' on the deny list of tenant 'acme'" in run.last_error
    assert len(await store.list_attempts(refused_run)) == 1  # not retried
    assert receiver.for_path("/hook") == []
    assert receiver.for_path("/alert") == []  # the alert's URL is on the same deny list
    assert len(receiver.for_path("/other")) == 1


async def test_a_change_of_the_lists_reaches_the_worker_within_the_ttl(
    store: ScheduleStore, receiver: Receiver
) -> None:
    await store.create_tenant("acme", now=T0)
    job = make_job(3, receiver.url("/hook"), tenant="acme")
    await store.create_job(job)
    clock = ManualClock(T0)
    lists = TenantLists(store, clock, ttl_s=TTL_S)
    url = receiver.url("/hook")
    assert await lists.refusal(job.id, url) is None
    # Narrowed: the cached answer holds until the TTL is up, then the new lists apply.
    await store.set_tenant_egress("acme", parse_rules(["hooks.example.com"], []), now=T0)
    assert await lists.refusal(job.id, url) is None
    clock.advance(timedelta(seconds=TTL_S))
    reason = await lists.refusal(job.id, url)
    assert reason == (
        "host '127.0.0.1' is not on the allow list (hooks.example.com) of tenant 'acme'"
    )
    # Moved to a tenant without lists: the job's tenant is re-read after the TTL too.
    await store.update_job(await _moved(store, job.id, "default"))
    clock.advance(timedelta(seconds=TTL_S))
    assert await lists.refusal(job.id, url) is None
    # Lists cleared everywhere: nothing to check, and a job that is gone is not an error.
    await store.set_tenant_egress("acme", EgressRules(), now=T0)
    clock.advance(timedelta(seconds=TTL_S))
    assert await lists.refusal("f" * 32, url) is None


async def _moved(store: ScheduleStore, job_id: str, tenant: str) -> Job:
    return replace(await store.get_job(job_id), tenant=tenant)


async def test_the_runner_reports_the_refusal_without_sending(
    store: ScheduleStore, receiver: Receiver
) -> None:
    await store.create_tenant("acme", now=T0)
    await store.set_tenant_egress("acme", parse_rules(["*.example.com"], []), now=T0)
    job = make_job(4, receiver.url("/hook"), tenant="acme")
    await store.create_job(job)
    lists = TenantLists(store, ManualClock(T0), ttl_s=TTL_S)
    async with WebhookRunner(policy=LOOPBACK, tenant_lists=lists) as runner:
        attempts = await asyncio.gather(
            *(runner(fire_of(job.id, receiver.url("/hook"))) for _ in range(5))
        )
    for attempt in attempts:
        assert not attempt.ok
        assert not attempt.retryable
        assert attempt.error is not None
        assert "not on the allow list (*.example.com) of tenant 'acme'" in attempt.error
    assert receiver.for_path("/hook") == []


async def test_a_store_that_does_not_answer_is_a_retryable_failure(
    tmp_path: Path, receiver: Receiver
) -> None:
    gone = SqliteStore(tmp_path / "gone.db")
    await gone.open()
    await gone.create_tenant("acme", now=T0)
    await gone.set_tenant_egress("acme", parse_rules(["*.example.com"], []), now=T0)
    await gone.close()  # the database goes away before the worker's first read
    lists = TenantLists(gone, ManualClock(T0), ttl_s=TTL_S)
    async with WebhookRunner(policy=LOOPBACK, tenant_lists=lists) as runner:
        attempt = await runner(fire_of("a" * 32, receiver.url("/hook")))
    assert not attempt.ok
    assert attempt.retryable
    assert attempt.error is not None
    assert "could not read the tenant's destination lists" in attempt.error
    assert receiver.for_path("/hook") == []
