"""Webhooks built ahead of their instant (ADR 0027): the executor has the runner prepare fires
that are not due yet, and the runner sends the prepared request as built, unless its lease's
fence moved or its signature grew stale. Against a real receiver, with an injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import TaskTarget, WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.store.memory import MemoryStore
from tickwork.webhooks import generate_secret, verify
from tickwork.worker.base import Attempt
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.target import TargetRunner
from tickwork.worker.executors.webhook import PREPARED_FRESH_S, WebhookRunner

from ..support.receiver import Delivery, Receiver

T0 = datetime(2026, 12, 6, 9, 0, 0, tzinfo=UTC)
SECRET = generate_secret()
LOOPBACK = AddressPolicy(allow=["127.0.0.1/32"])


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


def fire_for(url: str, *, run_id: int = 1, fence: int = 1, at: datetime = T0) -> Fire:
    return Fire(
        run_id=run_id, job_id=f"{run_id:032x}", key=f"{run_id:032x}:{int(at.timestamp() * 1000)}",
        scheduled_for=at, fence_token=fence, attempt=1, target=WebhookTarget(url=url),
        lease_until=at + timedelta(seconds=30),
    )  # fmt: skip


def signed_at(delivery: Delivery) -> int:
    """The signature's timestamp, after checking that the signature holds."""
    verified = verify(
        headers=delivery.headers, body=delivery.body, secrets=[SECRET], now=T0, tolerance_s=3600
    )
    assert verified.msg_id == delivery.headers["webhook-id"]
    return verified.timestamp


async def test_a_prepared_request_is_sent_as_built_while_its_signature_is_fresh(
    receiver: Receiver,
) -> None:
    clock = ManualClock(T0)
    async with WebhookRunner(policy=LOOPBACK, secrets=[SECRET], clock=clock) as runner:
        runner.prepare(fire_for(receiver.url(), run_id=1))
        runner.prepare(fire_for(receiver.url(), run_id=2))
        clock.advance(timedelta(seconds=PREPARED_FRESH_S - 1))
        assert (await runner(fire_for(receiver.url(), run_id=1))).ok
        # Past the freshness bound the request is signed anew when its fire starts.
        clock.advance(timedelta(seconds=2))
        assert (await runner(fire_for(receiver.url(), run_id=2))).ok
    first, second = receiver.deliveries
    assert signed_at(first) == int(T0.timestamp())  # built at T0, sent ~29 s later
    assert signed_at(second) == int(T0.timestamp() + PREPARED_FRESH_S + 1)


async def test_a_prepared_request_of_an_older_lease_is_not_sent(receiver: Receiver) -> None:
    clock = ManualClock(T0)
    async with WebhookRunner(policy=LOOPBACK, secrets=[SECRET], clock=clock) as runner:
        runner.prepare(fire_for(receiver.url(), fence=4))
        clock.advance(timedelta(seconds=1))
        # The run was leased again (a new fence) before it started: its request names the
        # new lease, signed when it starts.
        assert (await runner(fire_for(receiver.url(), fence=5))).ok
    (delivery,) = receiver.deliveries
    assert delivery.fence == 5
    assert delivery.headers["tickwork-fence"] == "5"
    assert signed_at(delivery) == int(T0.timestamp()) + 1


async def test_a_request_that_cannot_be_built_fails_at_its_start_not_when_prepared() -> None:
    clock = ManualClock(T0)
    async with WebhookRunner(secrets=[SECRET], clock=clock) as runner:
        refused = fire_for("http://127.0.0.1:9/hook")  # loopback, not allowed here
        runner.prepare(refused)  # nothing to report yet, and nothing raised
        attempt = await runner(refused)
    assert not attempt.ok
    assert not attempt.retryable
    assert attempt.error is not None
    assert "SSRF guard" in attempt.error


class Recording:
    """A runner that prepares (records which fires) and runs every fire at once."""

    def __init__(self) -> None:
        self.prepared: list[int] = []
        self.ran: list[int] = []

    def prepare(self, fire: Fire) -> None:
        self.prepared.append(fire.run_id)

    async def __call__(self, fire: Fire) -> Attempt:
        self.ran.append(fire.run_id)
        return Attempt(ok=True)


async def test_the_executor_prepares_fires_that_are_not_due_yet_a_batch_per_turn() -> None:
    clock = ManualClock(T0)
    runner = Recording()
    executor = Executor(MemoryStore(), clock, runner, ExecutorConfig(node_id="w1"))
    url = "http://hooks.example/hook"
    due_now = fire_for(url, run_id=1)
    almost_due = fire_for(url, run_id=2, at=T0 + timedelta(milliseconds=1))
    ahead = [fire_for(url, run_id=n, at=T0 + timedelta(seconds=1)) for n in range(3, 203)]
    executor.submit([due_now, almost_due, *ahead])
    assert runner.prepared == []  # not while submitting: on later turns of the loop
    await asyncio.sleep(0)
    # One batch per turn (the fire due within 5 ms took a place in it and was passed over),
    # so that a timer due meanwhile is not held up by a herd.
    assert runner.prepared == [fire.run_id for fire in ahead[:63]]
    for _ in range(4):
        await asyncio.sleep(0)
    assert runner.prepared == [fire.run_id for fire in ahead]  # nor the fires about to start
    assert runner.ran == [1]


async def test_the_target_runner_passes_only_webhook_fires_on_to_prepare() -> None:
    clock = ManualClock(T0)
    webhooks, tasks = Recording(), Recording()
    executor = Executor(
        MemoryStore(), clock, TargetRunner(webhooks, tasks), ExecutorConfig(node_id="w1")
    )
    later = T0 + timedelta(seconds=1)
    task_fire = Fire(
        run_id=7, job_id="7" * 32, key="k7", scheduled_for=later, fence_token=1, attempt=1,
        target=TaskTarget(name="noop"), lease_until=later + timedelta(seconds=30),
    )  # fmt: skip
    hook = fire_for("http://hooks.example/hook", run_id=8, at=later)
    executor.submit([task_fire, hook])
    await asyncio.sleep(0)
    assert webhooks.prepared == [8]
    assert tasks.prepared == []
