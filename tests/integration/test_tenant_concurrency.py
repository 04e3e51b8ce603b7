"""A tenant's `max_concurrent_runs` holds across the cluster (issue 21, ADR 0024).

1 API, 1 scheduler and 2 workers, real processes on PostgreSQL with the table queue, NATS or
Redis between them (behind a queue, a message whose tenant is full is acked and its run is
leased later from the store, ADR 0024). Tenant
`capped` has max_concurrent_runs = 3 and 30 one-shot webhook jobs due at the same instant,
against a receiver that holds each request open until the test releases it: whichever worker
leases them, the receiver never holds more than 3 at once, each released slot is taken by the
next run, and all 30 complete. Tenant `free` (no limit) has 10 jobs due at the same instant,
whose runs complete while `capped` is at its cap.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest
from aiohttp import web

from ..support.proc import UpProcess
from ..support.receiver import Receiver
from .test_split_processes import start, webhook

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CAP = 3
CAPPED_RUNS = 30
FREE_RUNS = 10
HELD = "/capped"
FREE = "/free"


@dataclass
class PeakReceiver(Receiver):
    """A Receiver that records the most requests it held open at once on HELD."""

    peak: int = 0

    async def _handle(self, request: web.Request) -> web.Response:
        if request.path == HELD:
            # Requests held now, plus this one (it joins them before it waits).
            self.peak = max(self.peak, len(self._held.get(HELD, [])) + 1)
        return await super()._handle(request)


@pytest.fixture(params=["table", "nats", "redis"])
def queue(request: pytest.FixtureRequest) -> str:
    if request.param == "table":
        return ""
    fixture = "restartable_nats" if request.param == "nats" else "restartable_redis"
    return str(request.getfixturevalue(fixture).url)


async def test_a_capped_tenant_never_runs_more_than_its_cap_across_two_workers(
    pg_dsn: str, queue: str
) -> None:
    receiver = await PeakReceiver(hold={HELD: CAPPED_RUNS}).start()
    env = {"TICKWORK_QUEUE_URL": queue}
    try:
        async with AsyncExitStack() as stack:
            api, *_ = await asyncio.gather(
                start(stack, pg_dsn, "api"),
                start(stack, pg_dsn, "scheduler", **env),
                *(start(stack, pg_dsn, "worker", TICKWORK_NODE_ID=f"w{n}", **env) for n in (1, 2)),
            )
            await create_jobs(api, receiver)
            try:
                owners = await cap_held(pg_dsn, receiver)
            finally:
                receiver.hold[HELD] = 0  # let the workers stop: nothing held any more
                receiver.release_all(HELD)
    finally:
        await receiver.stop()

    assert receiver.peak == CAP
    delivered = Counter(d.key for d in receiver.for_path(HELD))
    assert len(delivered) == CAPPED_RUNS
    assert max(delivered.values()) == 1
    print(f"capped runs per worker: {dict(owners)}")


async def cap_held(dsn: str, receiver: Receiver) -> Counter[str]:
    """Release the held runs one by one while checking the cap; returns which worker ran
    the capped tenant's attempts."""
    await receiver.wait_for(HELD, CAP)
    # The other tenant's runs all complete while `capped` holds its every slot.
    await receiver.wait_for(FREE, FREE_RUNS)
    assert len(receiver.for_path(HELD)) == CAP
    await succeeded(dsn, "free", FREE_RUNS)
    # Each slot freed is taken by the next run: release one, the next arrives.
    released = 0
    while released < CAPPED_RUNS:
        receiver.release(HELD)
        released += 1
        await receiver.wait_for(HELD, min(released + CAP, CAPPED_RUNS))
    await succeeded(dsn, "capped", CAPPED_RUNS)
    return await workers_of(dsn, "capped")


async def create_jobs(api: UpProcess, receiver: Receiver) -> None:
    """The tenants, then every job due at the same instant a few seconds from now (time to
    create them all)."""
    limits = {"max_concurrent_runs": CAP}
    response = await api.call("POST", "/v1/tenants", json={"name": "capped", "limits": limits})
    assert response.status_code == 201, response.text
    response = await api.call("POST", "/v1/tenants", json={"name": "free"})
    assert response.status_code == 201, response.text
    at = (datetime.now(UTC) + timedelta(seconds=4)).isoformat().replace("+00:00", "Z")

    async def create(tenant: str, path: str, n: int) -> None:
        target = {**webhook(receiver.url(path)), "timeout": "PT60S"}
        body = {"name": f"{tenant}-{n}", "tenant": tenant, "schedule": {"at": at},
                "target": target}  # fmt: skip
        response = await api.call("POST", "/v1/jobs", json=body)
        assert response.status_code == 201, response.text

    await asyncio.gather(
        *(create("capped", HELD, n) for n in range(CAPPED_RUNS)),
        *(create("free", FREE, n) for n in range(FREE_RUNS)),
    )


async def succeeded(dsn: str, tenant: str, count: int) -> None:
    """Wait until `count` runs of `tenant` succeeded (the workers' writes, in another process)."""
    conn = await asyncpg.connect(dsn)
    try:
        async with asyncio.timeout(30):
            while True:
                done = await conn.fetchval(
                    "SELECT count(*) FROM tw_runs r JOIN tw_jobs j ON j.id = r.job_id "
                    "WHERE r.status = 'succeeded' AND j.tenant = $1",
                    tenant,
                )
                if done == count:
                    return
                await asyncio.sleep(0.05)  # polling other processes' writes
    finally:
        await conn.close()


async def workers_of(dsn: str, tenant: str) -> Counter[str]:
    """Which worker ran the tenant's attempts (the history keeps the worker of each)."""
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(
            "SELECT a.worker FROM tw_attempt_history a JOIN tw_jobs j ON j.id = a.job_id "
            "WHERE j.tenant = $1",
            tenant,
        )
    finally:
        await conn.close()
    return Counter(r["worker"] for r in found)
