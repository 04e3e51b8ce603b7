"""Retries with backoff, dead letters and redrive, through the real executor and webhooks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tickwork.clock import SystemClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import RunStatus
from tickwork.store.sqlite import SqliteStore
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.webhook import WebhookRunner
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

from ..support.receiver import Receiver

FAST = RetryPolicy(max_attempts=3, base_delay_ms=50, max_delay_ms=200)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver(
        statuses={"/flaky": [500, 200], "/down": 503, "/bad": 400, "/later": [429, 200]}
    ).start()
    yield rx
    await rx.stop()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    db = SqliteStore(tmp_path / "t.db")
    await db.open()
    yield db
    await db.close()


@pytest.fixture
async def executor(store: SqliteStore) -> AsyncIterator[Executor]:
    policy = AddressPolicy(allow=["127.0.0.1/32"])
    async with WebhookRunner(policy=policy) as runner:
        worker = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="t"))
        leases = LeaserConfig(node_id="t", scan_interval_ms=60_000)  # only retries wake it
        leaser = StoreLeaser(store, SystemClock(), worker, leases)
        stop = asyncio.Event()
        task = asyncio.gather(worker.run(stop), leaser.run(stop))
        yield worker
        stop.set()
        await task


async def trigger(store: SqliteStore, n: int, url: str) -> int:
    """A job whose occurrence is fired by hand (a manual run, leasable at once)."""
    now = datetime.now(UTC)
    job = Job(
        id=f"{n:032x}",
        name=f"j{n}",
        schedule=Schedule(trigger=EveryTrigger(interval_ms=3_600_000, anchor=now)),
        target=WebhookTarget(url=url),
        state=JobState.PAUSED,
        next_run_at=None,
        created_at=now,
        updated_at=now,
        retry=FAST,
    )
    await store.create_job(job)
    return (await store.add_manual_run(job.id, now=now)).id


async def settled(store: SqliteStore, run_id: int) -> RunStatus:
    """Wait until the run is finished (its status is recorded by the executor's flush)."""
    async with asyncio.timeout(10):
        # Polled: the store has no "run finished" event to wait on.
        while (run := await store.get_run(run_id)).status is RunStatus.PENDING:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    return run.status


async def test_a_500_then_200_is_retried_once_and_succeeds(
    store: SqliteStore, receiver: Receiver, executor: Executor
) -> None:
    run_id = await trigger(store, 1, receiver.url("/flaky"))
    assert await settled(store, run_id) is RunStatus.SUCCEEDED
    hits = receiver.for_path("/flaky")
    assert [h.headers["tickwork-attempt"] for h in hits] == ["1", "2"]
    assert len({h.key for h in hits}) == 1  # one occurrence, one idempotency key
    assert len({h.headers["idempotency-key"] for h in hits}) == 1
    attempts = await store.list_attempts(run_id)
    assert [(a.status, a.http_status) for a in attempts] == [
        (RunStatus.PENDING, 500),
        (RunStatus.SUCCEEDED, 200),
    ]
    # Every attempt is a new lease: its fence, signed into webhook-id, is the attempt's.
    assert [h.fence for h in hits] == [a.fence_token for a in attempts]
    assert hits[0].fence is not None
    assert hits[1].fence == hits[0].fence + 1
    assert attempts[1].started_at >= attempts[0].finished_at


async def test_always_failing_is_dead_lettered_after_max_attempts_and_redrive_works(
    store: SqliteStore, receiver: Receiver, executor: Executor
) -> None:
    run_id = await trigger(store, 1, receiver.url("/down"))
    assert await settled(store, run_id) is RunStatus.FAILED
    assert len(receiver.for_path("/down")) == FAST.max_attempts
    [dead] = await store.list_dead_letters()
    assert (dead.id, dead.last_error) == (run_id, "HTTP 503")

    receiver.statuses["/down"] = 200  # the receiver is fixed; give it one more attempt
    assert await store.redrive([run_id], now=datetime.now(UTC)) == 1
    assert await settled(store, run_id) is RunStatus.SUCCEEDED
    assert await store.list_dead_letters() == []
    assert receiver.for_path("/down")[-1].headers["tickwork-attempt"] == "4"


async def test_a_400_is_not_retried(
    store: SqliteStore, receiver: Receiver, executor: Executor
) -> None:
    run_id = await trigger(store, 1, receiver.url("/bad"))
    assert await settled(store, run_id) is RunStatus.FAILED
    assert len(receiver.for_path("/bad")) == 1
    [dead] = await store.list_dead_letters()
    assert dead.http_status == 400


async def test_retry_after_is_honoured(
    store: SqliteStore, receiver: Receiver, executor: Executor
) -> None:
    receiver.retry_after = {"/later": "1"}
    run_id = await trigger(store, 1, receiver.url("/later"))
    assert await settled(store, run_id) is RunStatus.SUCCEEDED
    first, second = receiver.for_path("/later")
    assert (second.arrived_mono - first.arrived_mono) >= 1.0  # not the 50-200 ms backoff
