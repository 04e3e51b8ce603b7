"""`tickwork up` as a real process, real HTTP jobs, a real webhook receiver.

Every occurrence in the observed window must arrive exactly once, never before its instant,
and with the headers that identify it; two processes sharing one store must not double-fire.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import utc_iso

from ..support.proc import UpProcess
from ..support.receiver import Delivery, Receiver

pytestmark = pytest.mark.slow


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tickwork.db"
    return str(request.getfixturevalue("pg_dsn"))


async def create(up: UpProcess, body: dict) -> dict:  # type: ignore[type-arg]
    response = await up.call("POST", "/v1/jobs", json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def webhook(url: str) -> dict:  # type: ignore[type-arg]
    return {"type": "webhook", "url": url, "method": "POST", "body": {"hello": "world"}}


def assert_once_each_on_time(deliveries: list[Delivery], step: timedelta) -> None:
    keys = Counter(d.key for d in deliveries)
    assert max(keys.values()) == 1, f"duplicate deliveries: {keys.most_common(3)}"
    for d in deliveries:
        assert d.arrived_at >= d.scheduled_for, f"early: {d.scheduled_for} arrived {d.arrived_at}"
    instants = sorted(d.scheduled_for for d in deliveries)
    gaps = {b - a for a, b in itertools.pairwise(instants)}
    assert gaps <= {step}, f"an occurrence is missing: gaps {sorted(gaps)}"


async def test_up_fires_every_kind_of_job_once_and_on_time(db_url: str, receiver: Receiver) -> None:
    up = await UpProcess(db_url).start()
    try:
        at = (datetime.now(UTC) + timedelta(seconds=2)).replace(microsecond=0)
        every = await create(
            up,
            {
                "name": "every",
                "schedule": {"every": "PT1S"},
                "target": webhook(receiver.url("/every")),
            },
        )
        cron = await create(
            up,
            {
                "name": "cron",
                "schedule": {"cron": "* * * * * *", "timezone": "Europe/Berlin"},
                "target": webhook(receiver.url("/cron")),
            },
        )
        once = await create(
            up,
            {
                "name": "once",
                "schedule": {"at": utc_iso(at)},
                "target": webhook(receiver.url("/once")),
            },
        )
        cron_hits = await receiver.wait_for("/cron", 4)
        every_hits = await receiver.wait_for("/every", 4)
        [once_hit] = await receiver.wait_for("/once", 1)
    finally:
        assert await up.stop() == 0

    assert_once_each_on_time(cron_hits, timedelta(seconds=1))
    assert_once_each_on_time(every_hits, timedelta(seconds=1))
    assert once_hit.scheduled_for == at
    assert once_hit.arrived_at >= at
    first = cron_hits[0]
    assert first.headers["tickwork-job-id"] == cron["id"]
    assert first.headers["idempotency-key"] == first.key
    assert first.headers["tickwork-attempt"] == "1"
    assert first.body == b'{"hello": "world"}'

    # The run history agrees with what the receiver saw, after a restart on the same store.
    up = await UpProcess(db_url).start()
    try:
        once_job = (await up.call("GET", f"/v1/jobs/{once['id']}")).json()
        assert once_job["state"] == "completed"
        runs = (
            await up.call("GET", f"/v1/jobs/{every['id']}/runs", params={"limit": 1000})
        ).json()["runs"]
    finally:
        await up.stop()
    by_instant = {r["scheduled_for"]: r for r in runs}
    for hit in every_hits:
        run = by_instant[utc_iso(hit.scheduled_for)]
        assert run["status"] == "succeeded"
        assert run["http_status"] == 200


async def test_a_second_scheduler_on_one_sqlite_file_is_refused(
    tmp_path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    db = f"sqlite:///{tmp_path}/one.db"
    fast = {"TICKWORK_PARTITION_LEASE_TTL_MS": "1000"}  # it waits 1.5 TTL for a crashed one
    first = await UpProcess(db, extra_env=fast).start()
    try:
        second = UpProcess(db, extra_env=fast)
        with pytest.raises(RuntimeError, match="several schedulers need PostgreSQL"):
            await second.start()
        assert second.proc is not None
        assert await second.proc.wait() == 2  # bad input: the CLI's exit code
        body = {"name": "j", "schedule": {"every": "PT1S"}, "target": webhook(receiver.url("/j"))}
        await create(first, body)
        await receiver.wait_for("/j", 2)  # the first one goes on
    finally:
        await first.stop()


async def test_two_processes_on_postgres_never_double_fire(pg_dsn: str, receiver: Receiver) -> None:
    db_url = pg_dsn
    first = await UpProcess(db_url).start()
    second = await UpProcess(db_url).start()
    try:
        for n in range(20):
            await create(
                first,
                {
                    "name": f"j{n}",
                    "schedule": {"every": "PT1S"},
                    "target": webhook(receiver.url(f"/j{n}")),
                },
            )
        for n in range(20):
            await receiver.wait_for(f"/j{n}", 4)
    finally:
        await first.stop()
        await second.stop()
    for n in range(20):
        assert_once_each_on_time(receiver.for_path(f"/j{n}"), timedelta(seconds=1))


async def test_python_tasks_run_in_the_worker_once_per_occurrence(
    tmp_path, receiver: Receiver
) -> None:  # type: ignore[no-untyped-def]
    up = UpProcess(f"sqlite:///{tmp_path}/t.db", args=["--import", "tests.support.sample_tasks"])
    await up.start()
    try:
        target = {"type": "task", "name": "tests.echo", "args": {"url": receiver.url("/task")}}
        job = await create(up, {"name": "t", "schedule": {"every": "PT1S"}, "target": target})
        assert job["target"] == {**target, "timeout": "PT1M"}
        hits = await receiver.wait_for("/task", 3)
        missing = {
            "name": "t2",
            "schedule": {"every": "PT1S"},
            "target": {"type": "task", "name": "nope"},
        }
        lost = await create(up, {**missing, "retry": {"max_attempts": 1}})
        dead = await dead_letters_of(up, lost["id"])
    finally:
        await up.stop()
    assert_once_each_on_time(hits, timedelta(seconds=1))
    assert "no task named 'nope'" in dead[0]["last_error"]


async def dead_letters_of(up: UpProcess, job_id: str) -> list[dict]:  # type: ignore[type-arg]
    """Poll the API (another process: there is no event to await) until the job has some."""
    async with asyncio.timeout(10):
        while True:
            page = await up.call("GET", "/v1/dead-letters", params={"job_id": job_id})
            if dead := page.json()["dead_letters"]:
                return dead  # type: ignore[no-any-return]
            await asyncio.sleep(0.05)
