"""Overlap policies across processes: an API, a scheduler and two workers on one PostgreSQL
store (the table queue), a webhook receiver that holds a job's first request.

skip never runs two at once and records the occurrences it skipped; buffer_one runs the
occurrence it held back right after the running one ends; cancel_previous aborts the running
webhook (the receiver sees the connection closed) and the run reads `cancelled`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from tickwork.clock import from_us
from tickwork.domain.runs import occurrence_key

from ..support.proc import UpProcess
from ..support.receiver import Receiver

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver(notice_aborts=True).start()
    yield rx
    await rx.stop()


@pytest.fixture(params=["table", "nats"])
def queue(request: pytest.FixtureRequest) -> str:
    """The queue between the scheduler and the workers: the store itself, or NATS."""
    if request.param == "table":
        return ""
    return str(request.getfixturevalue("restartable_nats").url)


async def cluster(stack: AsyncExitStack, db: str, queue: str = "") -> UpProcess:
    """API, scheduler and two workers; returns the API."""
    env = {"TICKWORK_QUEUE_URL": queue}
    procs = [
        UpProcess(db, command=c, extra_env=env) for c in ("api", "scheduler", "worker", "worker")
    ]
    for proc in procs:
        await proc.start()
        stack.push_async_callback(proc.stop)
    return procs[0]


async def create(api: UpProcess, receiver: Receiver, path: str, overlap: str, every: str) -> str:
    body = {
        "name": path.strip("/"),
        "schedule": {"every": every},
        "target": {"type": "webhook", "url": receiver.url(path), "method": "POST"},
        "overlap": overlap,
    }
    created = await api.call("POST", "/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["overlap"] == overlap
    return str(created.json()["id"])


async def runs(api: UpProcess, job_id: str) -> list[dict[str, Any]]:
    found = await api.call("GET", f"/v1/jobs/{job_id}/runs")
    return list(found.json()["runs"])


async def skipped(db: str, job_id: str, count: int) -> list[asyncpg.Record]:
    """The job's skipped_overlap ledger rows, once they count at least `count` occurrences."""
    conn = await asyncpg.connect(db)
    try:
        async with asyncio.timeout(30):
            while True:
                found = await conn.fetch(
                    "SELECT * FROM tw_occurrences WHERE job_id = $1"
                    " AND reason = 'skipped_overlap' ORDER BY first_us",
                    job_id,
                )
                if sum(r["count"] for r in found) >= count:
                    return found
                await asyncio.sleep(0.1)  # another process writes it
    finally:
        await conn.close()


async def run_status(api: UpProcess, job_id: str, key: str, status: str) -> dict[str, Any]:
    async with asyncio.timeout(30):
        while True:
            for run in await runs(api, job_id):
                if run["key"] == key and run["status"] == status:
                    return run
            await asyncio.sleep(0.05)  # polling another process's store


async def test_skip_never_runs_two_at_once_and_records_what_it_skipped(
    pg_dsn: str, receiver: Receiver
) -> None:
    receiver.hold = {"/skip": 1}
    async with AsyncExitStack() as stack:
        api = await cluster(stack, pg_dsn)
        job_id = await create(api, receiver, "/skip", "skip", "PT1S")
        [first] = await receiver.wait_for("/skip", 1)
        # Two occurrences came while it ran: one ledger row, as nothing ran between them.
        [row] = await skipped(pg_dsn, job_id, 2)
        assert len(receiver.for_path("/skip")) == 1  # and neither ran beside it
        [running] = [r for r in await runs(api, job_id) if r["key"] == first.key]
        assert row["run_id"] == running["id"]
        assert row["last_us"] - row["first_us"] == (row["count"] - 1) * 1_000_000
        receiver.release("/skip")
        [_, second] = await receiver.wait_for("/skip", 2)
        await api.call("POST", f"/v1/jobs/{job_id}/pause")
        keys = {r["key"] for r in await runs(api, job_id)}
    assert second.scheduled_for > first.scheduled_for
    # A skipped occurrence never got a run of its own.
    skipped_at = range(row["first_us"], row["last_us"] + 1, 1_000_000)
    assert not keys & {occurrence_key(job_id, from_us(us)) for us in skipped_at}


async def test_buffer_one_runs_the_held_occurrence_right_after(
    pg_dsn: str, receiver: Receiver, queue: str
) -> None:
    # Behind NATS the held run has no message: the workers find it released in the store.
    receiver.hold = {"/buffer": 1}
    async with AsyncExitStack() as stack:
        api = await cluster(stack, pg_dsn, queue)
        job_id = await create(api, receiver, "/buffer", "buffer_one", "PT1S")
        [first] = await receiver.wait_for("/buffer", 1)
        # One occurrence is held back; the one after finds it there and is skipped.
        [row, *_] = await skipped(pg_dsn, job_id, 1)
        held = [r for r in await runs(api, job_id) if r["key"] != first.key]
        assert [r["id"] for r in held] == [row["run_id"]]
        assert len(receiver.for_path("/buffer")) == 1
        released = time.monotonic()
        receiver.release("/buffer")
        [_, second] = await receiver.wait_for("/buffer", 2)
        await api.call("POST", f"/v1/jobs/{job_id}/pause")
    assert second.scheduled_for == first.scheduled_for + timedelta(seconds=1)
    assert second.arrived_mono - released < 2.0  # right after: not at its next lease scan


async def test_cancel_previous_aborts_the_running_webhook(pg_dsn: str, receiver: Receiver) -> None:
    receiver.hold = {"/cancel": 1}
    async with AsyncExitStack() as stack:
        api = await cluster(stack, pg_dsn)
        job_id = await create(api, receiver, "/cancel", "cancel_previous", "PT2S")
        [first] = await receiver.wait_for("/cancel", 1)
        await receiver.wait_for_abort("/cancel")  # the worker closed the connection
        cancelled = await run_status(api, job_id, first.key, "cancelled")
        [_, second] = await receiver.wait_for("/cancel", 2)
        done = await run_status(api, job_id, second.key, "succeeded")
        detail = (await api.call("GET", f"/v1/runs/{cancelled['id']}")).json()
        await api.call("POST", f"/v1/jobs/{job_id}/pause")
    assert second.scheduled_for > first.scheduled_for
    assert done["attempt"] == 1
    assert [a["status"] for a in detail["attempts"]] == ["cancelled"]
    assert "cancel_previous" in detail["attempts"][0]["error"]
