"""The in-process executor against a real webhook receiver and a real SQLite store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tickwork.clock import SystemClock, utc_iso
from tickwork.domain.backfills import Backfill, BackfillKind, BackfillSlice, BackfillState
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import RunOrigin, RunStatus
from tickwork.store.base import ClaimPlan
from tickwork.store.sqlite import SqliteStore
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.webhook import WebhookRunner
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

from ..support.receiver import Receiver

LOOPBACK = AddressPolicy(allow=["127.0.0.1/32"])  # the test receiver; nothing else is allowed


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver(statuses={"/fail": 503}).start()
    yield rx
    await rx.stop()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    db = SqliteStore(tmp_path / "t.db")
    await db.open()
    yield db
    await db.close()


async def add_job(store: SqliteStore, n: int, url: str, at: datetime) -> Job:
    job = Job(
        id=f"{n:032x}",
        name=f"j{n}",
        schedule=Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=at)),
        target=WebhookTarget(url=url, headers={"x-custom": "yes"}, body=[1, 2]),
        retry=RetryPolicy(max_attempts=1),  # one attempt: failures are final here
        state=JobState.SCHEDULED,
        next_run_at=at,
        created_at=at,
        updated_at=at,
    )
    return await store.create_job(job)


async def claim_one(store: SqliteStore, job: Job, lease_s: float = 60):  # type: ignore[no-untyped-def]
    assert job.next_run_at is not None
    plan = ClaimPlan(
        job_id=job.id,
        expected_fence=job.fence_token,
        expected_next_run_at=job.next_run_at,
        scheduled_for=job.next_run_at,
        coalesced=0,
        new_next_run_at=job.next_run_at + timedelta(minutes=1),
    )
    now = datetime.now(UTC)
    return await store.claim(
        [plan], owner="t", lease_until=now + timedelta(seconds=lease_s), now=now
    )


async def test_fires_wait_for_their_instant_and_outcomes_are_recorded(
    store: SqliteStore, receiver: Receiver
) -> None:
    at = datetime.now(UTC) + timedelta(milliseconds=300)
    ok = await add_job(store, 1, receiver.url("/ok"), at)
    bad = await add_job(store, 2, receiver.url("/fail"), at)
    fires = await claim_one(store, ok) + await claim_one(store, bad)
    async with WebhookRunner(policy=LOOPBACK) as runner:
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="t"))
        executor.submit(fires)
        await executor.drain()
    [hit] = receiver.for_path("/ok")
    assert hit.arrived_at >= at
    assert hit.headers["tickwork-scheduled-for"] == utc_iso(at)
    assert hit.headers["x-custom"] == "yes"
    assert hit.body == b"[1, 2]"
    [run] = await store.list_runs(ok.id)
    assert (run.status, run.http_status) == (RunStatus.SUCCEEDED, 200)
    assert run.started_at is not None
    assert run.started_at >= at
    [run] = await store.list_runs(bad.id)
    assert (run.status, run.http_status, run.error) == (RunStatus.FAILED, 503, "HTTP 503")


async def test_unreachable_targets_fail_with_an_error_message(store: SqliteStore) -> None:
    from tickwork.testing import free_port

    job = await add_job(store, 1, f"http://127.0.0.1:{free_port()}/", datetime.now(UTC))
    async with WebhookRunner(policy=LOOPBACK) as runner:
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="t"))
        executor.submit(await claim_one(store, job))
        await executor.drain()
    [run] = await store.list_runs(job.id)
    assert run.status is RunStatus.FAILED
    assert run.http_status is None
    assert run.error
    assert "Connect" in run.error


async def test_an_orphaned_fire_is_recovered_and_run_once(
    store: SqliteStore, receiver: Receiver
) -> None:
    job = await add_job(store, 1, receiver.url("/ok"), datetime.now(UTC))
    [lost] = await claim_one(store, job, lease_s=0)  # its claimer "died": the lease is over
    async with WebhookRunner(policy=LOOPBACK) as runner:
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="rescuer"))
        leaser = StoreLeaser(store, SystemClock(), executor, LeaserConfig(node_id="rescuer"))
        assert (await leaser.run_once()).started == 1
        await executor.drain()
        assert (await leaser.run_once()).started == 0
    [hit] = receiver.for_path("/ok")
    assert hit.headers["tickwork-attempt"] == "2"
    assert hit.headers["idempotency-key"] == lost.key
    # The rescuer's lease is a new one: its fence is signed into the id, and repeated unsigned.
    assert hit.headers["webhook-id"] == f"{lost.key}@f{lost.fence_token + 1}"
    assert int(hit.headers["tickwork-fence"]) == lost.fence_token + 1
    [run] = await store.list_runs(job.id)
    assert (run.status, run.attempt) == (RunStatus.SUCCEEDED, 2)


async def test_the_clock_not_the_timer_decides_when_a_fire_starts(
    store: SqliteStore, receiver: Receiver
) -> None:
    """A loop timer that fires early (uvloop rounds to ms) must not start a fire early."""
    from tickwork.clock import ManualClock

    at = datetime.now(UTC) + timedelta(milliseconds=50)
    clock = ManualClock(at - timedelta(milliseconds=50))  # stays behind unless told
    job = await add_job(store, 1, receiver.url("/ok"), at)
    async with WebhookRunner(policy=LOOPBACK) as runner:
        executor = Executor(store, clock, runner, ExecutorConfig(node_id="t"))
        executor.submit(await claim_one(store, job))
        with pytest.raises(TimeoutError):  # the timer ran out 3 times over; the clock did not
            await receiver.wait_for("/ok", 1, timeout_s=0.3)
        clock.set(at)
        await receiver.wait_for("/ok", 1, timeout_s=5)
        await executor.drain()
    [run] = await store.list_runs(job.id)
    assert run.started_at == at


async def test_the_ssrf_guard_refuses_loopback_unless_allowed(
    store: SqliteStore, receiver: Receiver
) -> None:
    job = await add_job(store, 1, receiver.url("/ok"), datetime.now(UTC))
    async with WebhookRunner() as runner:  # default policy: loopback is not allowed
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="t"))
        executor.submit(await claim_one(store, job))
        await executor.drain()
    assert receiver.deliveries == []
    [run] = await store.list_runs(job.id)
    assert run.status is RunStatus.FAILED
    assert run.error is not None
    assert "refused by the SSRF guard" in run.error
    assert "TICKWORK_WEBHOOK_ALLOW" in run.error


async def test_signed_requests_verify_with_the_receiver_helper(
    store: SqliteStore, receiver: Receiver
) -> None:
    from tickwork.webhooks import generate_secret, verify

    old, new = generate_secret(), generate_secret()
    job = await add_job(store, 1, receiver.url("/ok"), datetime.now(UTC))
    async with WebhookRunner(policy=LOOPBACK, secrets=[new, old]) as runner:
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="t"))
        executor.submit(await claim_one(store, job))
        await executor.drain()
    [hit] = receiver.for_path("/ok")
    verified = verify(headers=hit.headers, body=hit.body, secrets=[old])  # rotation: old works
    assert verified.msg_id == hit.headers["webhook-id"]
    assert verified.occurrence == hit.key == hit.headers["idempotency-key"]
    assert verified.fence == int(hit.headers["tickwork-fence"])
    assert verified.duplicate is False
    with pytest.raises(Exception, match="signature"):
        verify(headers=hit.headers, body=hit.body + b"x", secrets=[new])


async def test_a_backfill_runs_webhook_carries_its_occurrence_and_its_own_key(
    store: SqliteStore, receiver: Receiver
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    job = await add_job(store, 1, receiver.url("/ok"), now + timedelta(hours=1))
    replayed = now - timedelta(hours=1)
    backfill = await store.create_backfill(
        Backfill(
            id=0, job_id=job.id, tenant=job.tenant, kind=BackfillKind.BACKFILL,
            from_at=replayed, to_at=now, cursor_at=None, total=1, done=0,
            state=BackfillState.RUNNING, rate_per_s=1.0, created_at=now, updated_at=now,
            paced_at=now,
        )
    )  # fmt: skip
    advance = BackfillSlice(
        backfill_id=backfill.id,
        job_id=job.id,
        origin=RunOrigin.BACKFILL,
        expected_cursor=None,
        occurrences=(replayed,),
        completes=True,
        paced_at=now,
    )
    assert await store.advance_backfill(advance, now=now) == 1
    fires = await store.lease_runs(
        now=now, owner="t", lease_until=now + timedelta(minutes=1), limit=5
    )
    async with WebhookRunner(policy=LOOPBACK) as runner:
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="t"))
        executor.submit(fires)
        await executor.drain()
    [hit] = receiver.for_path("/ok")
    assert hit.headers["tickwork-scheduled-for"] == utc_iso(replayed)
    assert hit.key == f"{job.id}:{int(replayed.timestamp() * 1000)}:backfill"


async def test_a_jittered_fire_waits_for_its_planned_instant_and_says_both_instants(
    store: SqliteStore, receiver: Receiver
) -> None:
    nominal = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    planned = datetime.now(UTC) + timedelta(milliseconds=300)
    job = await add_job(store, 1, receiver.url("/ok"), planned)
    plan = ClaimPlan(
        job_id=job.id,
        expected_fence=job.fence_token,
        expected_next_run_at=planned,  # the job's stored instant: the planned one
        scheduled_for=nominal,
        coalesced=0,
        new_next_run_at=planned + timedelta(minutes=1),
    )
    now = datetime.now(UTC)
    [fire] = await store.claim([plan], owner="t", lease_until=now + timedelta(minutes=1), now=now)
    assert (fire.scheduled_for, fire.planned_for) == (nominal, planned)
    async with WebhookRunner(policy=LOOPBACK) as runner:
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="t"))
        executor.submit([fire])
        await executor.drain()
    [hit] = receiver.for_path("/ok")
    assert hit.arrived_at >= planned
    assert hit.headers["tickwork-scheduled-for"] == utc_iso(nominal)
    assert hit.headers["tickwork-planned-for"] == utc_iso(planned)
    [run] = await store.list_runs(job.id)
    assert (run.scheduled_for, run.planned_for) == (nominal, planned)
    assert run.started_at is not None
    assert run.started_at >= planned


async def test_an_unshifted_fire_sends_no_planned_for_header(
    store: SqliteStore, receiver: Receiver
) -> None:
    job = await add_job(store, 1, receiver.url("/ok"), datetime.now(UTC))
    async with WebhookRunner(policy=LOOPBACK) as runner:
        executor = Executor(store, SystemClock(), runner, ExecutorConfig(node_id="t"))
        executor.submit(await claim_one(store, job))
        await executor.drain()
    [hit] = receiver.for_path("/ok")
    assert "tickwork-planned-for" not in hit.headers
    [run] = await store.list_runs(job.id)
    assert run.planned_for is None
