"""Signing secrets (job > tenant > process) and dead-letter alerts, through a real executor,
a real store (SQLite and PostgreSQL) and a real webhook receiver."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import tickwork.metrics  # noqa: F401 - registers the counters read below
from tickwork.clock import SystemClock, utc_iso
from tickwork.domain.jobs import (
    AlertTarget,
    EveryTrigger,
    Job,
    JobState,
    Schedule,
    WebhookTarget,
)
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import RunStatus
from tickwork.store.base import ClaimPlan, ScheduleStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore
from tickwork.webhooks import WebhookVerificationError, generate_secret, verify
from tickwork.worker.alerts import AlertConfig, AlertSender
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.webhook import WebhookRunner
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

from ..support.receiver import Delivery, Receiver

LOOPBACK = AddressPolicy(allow=["127.0.0.1/32"])
PROCESS_SECRET = generate_secret()
TWO_ATTEMPTS = RetryPolicy(max_attempts=2, base_delay_ms=10, max_delay_ms=20)
FAST_ALERTS = AlertConfig(attempts=3, retry_delays_ms=(10,), timeout_s=5)


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
    rx = await Receiver(statuses={"/down": 500, "/alert-down": 503}).start()
    yield rx
    await rx.stop()


@dataclass
class Worker:
    executor: Executor
    stop: asyncio.Event
    task: asyncio.Future[object]

    async def finish(self) -> None:
        """Stop the loop; it drains fires, outcomes and alerts before returning."""
        self.stop.set()
        await self.task


@pytest.fixture
async def worker(store: ScheduleStore) -> AsyncIterator[Worker]:
    async with WebhookRunner(policy=LOOPBACK, secrets=[PROCESS_SECRET]) as runner:
        config = ExecutorConfig(node_id="t")
        executor = Executor(
            store, SystemClock(), runner, config, alerts=AlertSender(runner, FAST_ALERTS)
        )
        leases = LeaserConfig(node_id="t", scan_interval_ms=60_000)
        leaser = StoreLeaser(store, SystemClock(), executor, leases)
        stop = asyncio.Event()
        both = asyncio.gather(executor.run(stop), leaser.run(stop))
        running = Worker(executor, stop, both)
        yield running
        if not running.task.done():
            await running.finish()


def make_job(
    n: int,
    url: str,
    *,
    secrets: Sequence[str] = (),
    tenant: str = "default",
    on_failure: AlertTarget | None = None,
) -> Job:
    now = datetime.now(UTC)
    return Job(
        id=f"{n:032x}",
        name=f"j{n}",
        tenant=tenant,
        schedule=Schedule(trigger=EveryTrigger(interval_ms=3_600_000, anchor=now)),
        target=WebhookTarget(url=url, body={"n": n}, secrets=tuple(secrets)),
        state=JobState.PAUSED,
        next_run_at=None,
        created_at=now,
        updated_at=now,
        retry=TWO_ATTEMPTS,
        on_failure=on_failure,
    )


async def trigger(store: ScheduleStore, job: Job) -> int:
    """Create the job and fire it by hand (a manual run, leasable at once)."""
    await store.create_job(job)
    return (await store.add_manual_run(job.id, now=datetime.now(UTC))).id


async def settled(store: ScheduleStore, run_id: int) -> RunStatus:
    async with asyncio.timeout(15):
        # Polled: the store has no "run finished" event to wait on.
        while (run := await store.get_run(run_id)).status is RunStatus.PENDING:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return run.status


def counted(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def verifies(hit: Delivery, secrets: Sequence[str]) -> bool:
    try:
        verify(headers=hit.headers, body=hit.body, secrets=secrets)
    except WebhookVerificationError:
        return False
    return True


# -- which secret signs -------------------------------------------------------------------------


async def test_a_job_with_its_own_secret_is_signed_with_it_only(
    store: ScheduleStore, receiver: Receiver, worker: Worker
) -> None:
    own = generate_secret()
    await store.set_tenant_secrets("default", [generate_secret()], now=datetime.now(UTC))
    await trigger(store, make_job(1, receiver.url("/ok"), secrets=[own]))
    [hit] = await receiver.wait_for("/ok", 1)
    assert verifies(hit, [own])
    assert not verifies(hit, [PROCESS_SECRET])  # job > tenant > process: no fallback signature
    assert len(hit.headers["webhook-signature"].split()) == 1


async def test_the_tenant_secret_signs_jobs_without_their_own(
    store: ScheduleStore, receiver: Receiver, worker: Worker
) -> None:
    tenant_secret = generate_secret()
    await store.set_tenant_secrets("acme", [tenant_secret], now=datetime.now(UTC))
    await trigger(store, make_job(1, receiver.url("/acme"), tenant="acme"))
    await trigger(store, make_job(2, receiver.url("/other"), tenant="other"))
    [acme] = await receiver.wait_for("/acme", 1)
    [other] = await receiver.wait_for("/other", 1)
    assert verifies(acme, [tenant_secret])
    assert not verifies(acme, [PROCESS_SECRET])
    assert verifies(other, [PROCESS_SECRET])  # a tenant without secrets: the process's


async def test_during_a_rotation_either_secret_verifies(
    store: ScheduleStore, receiver: Receiver, worker: Worker
) -> None:
    old, new = generate_secret(), generate_secret()
    await trigger(store, make_job(1, receiver.url("/ok"), secrets=[old, new]))
    [hit] = await receiver.wait_for("/ok", 1)
    assert len(hit.headers["webhook-signature"].split()) == 2
    assert verifies(hit, [old])
    assert verifies(hit, [new])
    assert not verifies(hit, [generate_secret()])


async def test_a_tenant_rotation_reaches_the_next_attempt_without_a_restart(
    store: ScheduleStore, receiver: Receiver, worker: Worker
) -> None:
    first, second = generate_secret(), generate_secret()
    await store.set_tenant_secrets("acme", [first], now=datetime.now(UTC))
    receiver.statuses["/flaky"] = [500, 200]
    # Hold the first attempt until the secret has changed, so the retry is signed anew.
    receiver.hold["/flaky"] = 1
    run_id = await trigger(store, make_job(1, receiver.url("/flaky"), tenant="acme"))
    await receiver.wait_for("/flaky", 1)
    await store.set_tenant_secrets("acme", [second], now=datetime.now(UTC))
    receiver.release("/flaky")
    assert await settled(store, run_id) is RunStatus.SUCCEEDED
    one, two = receiver.for_path("/flaky")
    assert verifies(one, [first])
    assert verifies(two, [second])
    assert not verifies(two, [first])


# -- dead-letter alerts -------------------------------------------------------------------------


async def test_the_alert_is_sent_once_after_the_dead_letter_with_the_documented_body(
    store: ScheduleStore, receiver: Receiver, worker: Worker
) -> None:
    own = generate_secret()
    alert = AlertTarget(url=receiver.url("/alert"), headers={"x-pager": "ops"})
    job = make_job(1, receiver.url("/down"), secrets=[own], on_failure=alert)
    sent_before = counted("tickwork_alerts_total")
    run_id = await trigger(store, job)
    assert await settled(store, run_id) is RunStatus.FAILED
    [hit] = await receiver.wait_for("/alert", 1)
    await worker.finish()  # drains: a second alert would have been sent by now
    assert len(receiver.for_path("/alert")) == 1
    assert len(receiver.for_path("/down")) == TWO_ATTEMPTS.max_attempts
    run = await store.get_run(run_id)
    assert run.dead_lettered_at is not None
    assert json.loads(hit.body) == {
        "type": "run.dead_lettered",
        "job_id": job.id,
        "run_id": run_id,
        "key": run.key,
        "scheduled_for": utc_iso(run.scheduled_for),
        "dead_lettered_at": utc_iso(run.dead_lettered_at),
        "attempts": 2,
        "last_error": "HTTP 500",
        "http_status": 500,
    }
    assert hit.headers["webhook-id"] == f"{run.key}:dead_letter"
    assert hit.headers["content-type"] == "application/json"
    assert hit.headers["x-pager"] == "ops"
    assert verifies(hit, [own])  # signed like the job's own requests
    assert not verifies(hit, [PROCESS_SECRET])
    assert counted("tickwork_alerts_total") == sent_before + 1


async def test_a_failing_alert_is_retried_a_little_and_changes_nothing(
    store: ScheduleStore, receiver: Receiver, worker: Worker
) -> None:
    alert = AlertTarget(url=receiver.url("/alert-down"))
    failed_before = counted("tickwork_alert_failures_total")
    run_id = await trigger(store, make_job(1, receiver.url("/down"), on_failure=alert))
    await receiver.wait_for("/alert-down", FAST_ALERTS.attempts)
    await worker.finish()
    assert len(receiver.for_path("/alert-down")) == FAST_ALERTS.attempts
    assert counted("tickwork_alert_failures_total") == failed_before + 1
    run = await store.get_run(run_id)
    assert (run.status, run.http_status, run.last_error) == (RunStatus.FAILED, 500, "HTTP 500")
    [dead] = await store.list_dead_letters()
    assert dead.id == run_id
    assert len(await store.list_attempts(run_id)) == TWO_ATTEMPTS.max_attempts


async def test_a_success_sends_no_alert(
    store: ScheduleStore, receiver: Receiver, worker: Worker
) -> None:
    alert = AlertTarget(url=receiver.url("/alert"))
    run_id = await trigger(store, make_job(1, receiver.url("/ok"), on_failure=alert))
    assert await settled(store, run_id) is RunStatus.SUCCEEDED
    await worker.finish()
    assert receiver.for_path("/alert") == []


async def test_a_zombie_whose_dead_letter_write_is_rejected_sends_no_alert(
    store: ScheduleStore, receiver: Receiver
) -> None:
    alert = AlertTarget(url=receiver.url("/alert"))
    now = datetime.now(UTC)
    job = make_job(1, receiver.url("/down"), on_failure=alert)
    job = await store.create_job(
        Job(**{**_fields(job), "state": JobState.SCHEDULED, "next_run_at": now})
    )
    plan = ClaimPlan(
        job_id=job.id,
        expected_fence=0,
        expected_next_run_at=now,
        scheduled_for=now,
        coalesced=0,
        new_next_run_at=now + timedelta(hours=1),
    )
    [zombie] = await store.claim([plan], owner="zombie", lease_until=now, now=now)
    # Its lease is over: another worker takes the run over (fence + 1) before the zombie ends.
    [taken] = await store.lease_runs(
        now=now, owner="other", lease_until=now + timedelta(minutes=1), limit=10
    )
    assert taken.fence_token == zombie.fence_token + 1
    one_attempt = RetryPolicy(max_attempts=1)
    async with WebhookRunner(policy=LOOPBACK) as runner:
        executor = Executor(
            store,
            SystemClock(),
            runner,
            ExecutorConfig(node_id="zombie"),
            alerts=AlertSender(runner, FAST_ALERTS),
        )
        executor.submit([_with_retry(zombie, one_attempt)])  # its last attempt: dead-letters
        await executor.drain()
    assert len(receiver.for_path("/down")) == 1
    assert receiver.for_path("/alert") == []  # the fence rejected its write: no alert
    run = await store.get_run(zombie.run_id)
    assert run.status is RunStatus.PENDING  # still the other worker's


def _fields(job: Job) -> dict[str, object]:
    return {name: getattr(job, name) for name in Job.__dataclass_fields__}


def _with_retry(fire, policy):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    return replace(fire, retry=policy)
