"""Stage 2 shape: separate API, scheduler and worker processes on one PostgreSQL store.

Fires are handed off through the store (the table queue): any worker leases them at their
instant. Each occurrence must arrive once, a worker SIGKILLed mid-job must not lose its fire,
and a worker frozen past its lease must not record a second outcome when it wakes. Leases
are the defaults: a dead worker's fire comes back once its 5 s lease ends (ADR 0016).
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import timedelta

import pytest

from tickwork.store.postgres import PostgresStore

from ..support.proc import UpProcess
from ..support.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


async def start(stack: AsyncExitStack, db: str, command: str, **env: str) -> UpProcess:
    proc = await UpProcess(db, command=command, extra_env=dict(env)).start()
    stack.push_async_callback(proc.stop)
    return proc


def webhook(url: str) -> dict[str, str]:
    return {"type": "webhook", "url": url, "method": "POST"}


async def test_each_occurrence_arrives_once_across_schedulers_and_workers(
    pg_dsn: str, receiver: Receiver
) -> None:
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api")
        for queue in ("", "table"):  # both name the table queue
            await start(stack, pg_dsn, "scheduler", TICKWORK_QUEUE_URL=queue)
            await start(stack, pg_dsn, "worker", TICKWORK_QUEUE_URL=queue)
        for n in range(10):
            body = {
                "name": f"j{n}",
                "schedule": {"every": "PT1S"},
                "target": webhook(receiver.url(f"/j{n}")),
            }
            assert (await api.call("POST", "/v1/jobs", json=body)).status_code == 201
        for n in range(10):
            await receiver.wait_for(f"/j{n}", 3)
    keys = Counter(d.key for d in receiver.deliveries)
    assert max(keys.values()) == 1, keys.most_common(3)
    assert all(d.arrived_at >= d.scheduled_for for d in receiver.deliveries)


async def test_a_worker_killed_mid_job_loses_nothing(pg_dsn: str, receiver: Receiver) -> None:
    receiver.hold = {"/slow": 1}  # the first request hangs until released
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api")
        await start(stack, pg_dsn, "scheduler")
        doomed = await start(stack, pg_dsn, "worker")
        body = {
            "name": "slow",
            "schedule": {"at": "2020-01-01T00:00:00Z"},
            "target": webhook(receiver.url("/slow")),
        }
        job = (await api.call("POST", "/v1/jobs", json=body)).json()
        [first] = await receiver.wait_for("/slow", 1)  # the doomed worker is mid-request
        await doomed.stop(signal.SIGKILL)
        receiver.release("/slow")
        await start(stack, pg_dsn, "worker")
        [_, second] = await receiver.wait_for("/slow", 2)
        assert second.key == first.key  # the same occurrence, redelivered
        assert int(second.headers["tickwork-fence"]) > int(first.headers["tickwork-fence"])
        runs = await wait_for_status(api, job["id"], "succeeded")
    [run] = runs
    assert run["attempt"] == 2
    assert len(receiver.for_path("/slow")) == 2


async def test_a_frozen_worker_cannot_record_a_second_outcome(
    pg_dsn: str, receiver: Receiver
) -> None:
    receiver.hold = {"/frozen": 2}  # both workers' requests hang until released, one by one
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api")
        await start(stack, pg_dsn, "scheduler")
        zombie = await start(stack, pg_dsn, "worker")
        body = {
            "name": "frozen",
            "schedule": {"at": "2020-01-01T00:00:00Z"},
            "target": webhook(receiver.url("/frozen")),
        }
        job = (await api.call("POST", "/v1/jobs", json=body)).json()
        await receiver.wait_for("/frozen", 1)
        assert zombie.proc is not None
        zombie.proc.send_signal(signal.SIGSTOP)  # frozen mid-request, past its lease
        await start(stack, pg_dsn, "worker")
        await receiver.wait_for("/frozen", 2)  # another worker took the occurrence over
        store = PostgresStore(pg_dsn, migrate=False)
        await store.open()
        try:
            # The zombie wakes first, while the run is still pending: only the fence can stop
            # its outcome (its request got a 200) from being recorded.
            receiver.release("/frozen")
            zombie.proc.send_signal(signal.SIGCONT)
            [run] = (await api.call("GET", f"/v1/jobs/{job['id']}/runs")).json()["runs"]
            # The history holds the zombie's attempt as lost (recorded by the takeover's lease),
            # and nothing more: not its outcome.
            assert await only_lost_attempt_recorded(store, run["id"])
            receiver.release("/frozen")  # now the live worker's request answers
            [run] = await wait_for_status(api, job["id"], "succeeded")
            attempts = await store.list_attempts(run["id"])
        finally:
            await store.close()
        await zombie.stop()
    # One outcome, the live worker's, after the zombie's lost attempt.
    assert [a.status.value for a in attempts] == ["lost", "succeeded"]
    assert attempts[1].fence_token == run["fence_token"] == attempts[0].fence_token + 1
    assert [a.attempt for a in attempts] == [1, 2]
    assert attempts[0].worker != attempts[1].worker


async def wait_for_status(api: UpProcess, job_id: str, status: str) -> list[dict]:  # type: ignore[type-arg]
    async with asyncio.timeout(30):
        while True:
            runs = (await api.call("GET", f"/v1/jobs/{job_id}/runs")).json()["runs"]
            if runs and all(r["status"] == status for r in runs):
                return runs  # type: ignore[no-any-return]
            await asyncio.sleep(0.05)  # polling another process's store


async def only_lost_attempt_recorded(store: PostgresStore, run_id: int) -> bool:
    """Give the woken zombie time to try its write (it flushes within ~20 ms of waking)."""
    await asyncio.sleep(1.0)  # proving a negative: nothing may appear in this window
    return [a.status.value for a in await store.list_attempts(run_id)] == ["lost"]


@pytest.fixture(params=["nats", "redis"])
def queue_url(request: pytest.FixtureRequest) -> str:
    """A private queue server per test: no messages left over from another test."""
    fixture = "restartable_nats" if request.param == "nats" else "restartable_redis"
    return str(request.getfixturevalue(fixture).url)


async def test_fires_travel_through_an_external_queue_once_each(
    pg_dsn: str, queue_url: str, receiver: Receiver
) -> None:
    env = {"TICKWORK_QUEUE_URL": queue_url}
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api")
        await start(stack, pg_dsn, "scheduler", **env)
        for _ in range(2):
            await start(stack, pg_dsn, "worker", **env)
        for n in range(5):
            body = {
                "name": f"q{n}",
                "schedule": {"every": "PT1S"},
                "target": webhook(receiver.url(f"/q{n}")),
            }
            assert (await api.call("POST", "/v1/jobs", json=body)).status_code == 201
        for n in range(5):
            await receiver.wait_for(f"/q{n}", 3)
    keys = Counter(d.key for d in receiver.deliveries)
    assert max(keys.values()) == 1, keys.most_common(3)
    assert all(d.arrived_at >= d.scheduled_for for d in receiver.deliveries)
    # Through the queue, not the store backstop (which waits 10 s before taking a run).
    assert all(d.arrived_at - d.scheduled_for < timedelta(seconds=3) for d in receiver.deliveries)


async def test_a_scheduler_killed_between_claim_and_publish_loses_no_fire(
    pg_dsn: str, queue_url: str, receiver: Receiver
) -> None:
    env = {"TICKWORK_QUEUE_URL": queue_url, "TICKWORK_QUEUE_BACKSTOP_MS": "1000"}
    async with AsyncExitStack() as stack:
        api = await start(stack, pg_dsn, "api")
        doomed = await start(stack, pg_dsn, "scheduler", TICKWORK_FAULT="after_claim", **env)
        await start(stack, pg_dsn, "worker", **env)
        body = {
            "name": "once",
            "schedule": {"at": "2020-01-01T00:00:00Z"},
            "target": webhook(receiver.url("/once")),
        }
        job = (await api.call("POST", "/v1/jobs", json=body)).json()
        assert doomed.proc is not None
        async with asyncio.timeout(20):
            assert await doomed.proc.wait() == 137  # it claimed, then died before publishing
        [hit] = await receiver.wait_for("/once", 1)  # the worker took it from the store
        [run] = await wait_for_status(api, job["id"], "succeeded")
    assert run["attempt"] == 1
    assert hit.key == run["key"]
