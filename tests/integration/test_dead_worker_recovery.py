"""A dead or frozen worker's fires run elsewhere within 10 s, on every queue, with the default
lease settings, and the fence keeps the ledger at one applied outcome per occurrence.

1 API, 1 scheduler and 2 workers, real processes on PostgreSQL, with the table queue, NATS or
Redis between them. A burst of one-shot webhook jobs due at the same instant goes to a
receiver that holds every first request open, so every fire is in flight at once. Then the
worker holding the most fires is killed (SIGKILL) or frozen (SIGSTOP): its leases stop being
renewed and end, a frozen worker's when they run out (a lease TTL), a killed one's as soon as
the survivor's heartbeat has found its sessions closed twice (ADR 0035), and the other
worker's store leaser takes the runs (ADR 0016), recording each dead lease in the history as
a lost attempt, which the API shows before the survivor's. A frozen worker that wakes up
afterwards finds its outcomes rejected by the fence.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from tickwork.domain.runs import LOST_ERROR, RELEASED_ERROR
from tickwork.worker.lease_timing import DEFAULT_LEASE_TTL_MS

from ..support.proc import UpProcess
from ..support.receiver import Receiver
from .test_split_processes import start, webhook

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

BURST = 300
RECOVERY_S = 10.0  # the promise: a dead worker's fires run elsewhere within this
PATH = "/burst"


@pytest.fixture(params=["table", "nats", "redis"])
def queue(request: pytest.FixtureRequest) -> str:
    if request.param == "table":
        return ""
    fixture = "restartable_nats" if request.param == "nats" else "restartable_redis"
    return str(request.getfixturevalue(fixture).url)


@pytest.mark.parametrize("fault", ["kill", "freeze"])
async def test_a_dead_workers_fires_run_elsewhere_within_10_s_and_apply_once(
    pg_dsn: str, queue: str, fault: str
) -> None:
    receiver = await Receiver(hold={PATH: BURST}).start()
    # The lease settings are the defaults. Either worker may lease the whole burst, so each
    # may run all of it at once: every first request reaches the receiver and is held there.
    # The burst is one tenant's, to one origin: neither cap may hold it back (ADR 0023).
    env = {
        "TICKWORK_QUEUE_URL": queue,
        "TICKWORK_WORKER_WEBHOOK_CONCURRENCY": str(BURST),
        "TICKWORK_WORKER_MAX_PER_HOST": "0",
        "TICKWORK_WORKER_TENANT_SHARE": "1",
    }
    try:
        async with AsyncExitStack() as stack:
            api, _, *workers = await asyncio.gather(
                start(stack, pg_dsn, "api"),
                start(stack, pg_dsn, "scheduler", **env),
                *(start(stack, pg_dsn, "worker", TICKWORK_NODE_ID=f"w{n}", **env) for n in (1, 2)),
            )
            await burst(api, receiver)
            await receiver.wait_for(PATH, BURST)  # every fire is in flight, held open
            holders = await lease_owners(pg_dsn)
            victim_id, _ = holders.most_common(1)[0]
            victim = workers[int(victim_id[1:]) - 1]
            survivor_id = "w2" if victim_id == "w1" else "w1"
            victim_keys = await keys_leased_to(pg_dsn, victim_id)
            assert victim.proc is not None
            victim.proc.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
            faulted = time.monotonic()

            # Each of the victim's fires reaches the receiver a second time, from the survivor.
            await receiver.wait_for(PATH, BURST + len(victim_keys), timeout_s=RECOVERY_S + 20)
            again = {d.key: d for d in receiver.for_path(PATH)[BURST:]}
            late_s = max(again[key].arrived_mono - faulted for key in victim_keys)
            receiver.release_all(PATH)  # the survivor's own first requests answer now
            await all_succeeded(pg_dsn)
            if fault == "freeze":
                # The zombie wakes to answers for requests it sent before the fault; its
                # outcomes name fences that moved on, and the store rejects every one.
                victim.proc.send_signal(signal.SIGCONT)
                await stale_outcomes(victim, len(victim_keys))
            ledger = await attempts(pg_dsn)
            histories = await histories_of(api, pg_dsn, victim_keys)
    finally:
        await receiver.stop()

    print(f"{fault} on {queue or 'table'}: {len(victim_keys)} fires back after {late_s:.2f} s")
    assert victim_keys
    assert late_s < RECOVERY_S
    delivered = Counter(d.key for d in receiver.for_path(PATH))
    assert len(delivered) == BURST  # every occurrence delivered
    assert {key for key, n in delivered.items() if n > 1} == victim_keys  # only those again
    assert max(delivered.values()) == 2
    # Exactly one applied outcome per occurrence: the survivor's, at attempt 2 for the
    # victim's runs (their second lease), at attempt 1 for its own.
    applied = [(key, *rest) for key, *rest in ledger if rest[-1] != "lost"]
    assert Counter(key for key, *_ in applied) == Counter(delivered.keys())
    assert {key: (worker, attempt, status) for key, worker, attempt, status in applied} == {
        key: (survivor_id, 2 if key in victim_keys else 1, "succeeded") for key in delivered
    }
    # The victim's attempts stay in the history, as lost: one per run it held, recorded by
    # the survivor's lease.
    lost = [(key, worker, attempt) for key, worker, attempt, status in ledger if status == "lost"]
    assert sorted(lost) == sorted((key, victim_id, 1) for key in victim_keys)
    # As the API shows them: the lost attempt (the victim's lease, from its start to its end),
    # then the survivor's, at the next fence.
    for key, run in histories.items():
        first, second = run["attempts"]
        assert (run["state"], run["status"], run["worker"]) == ("succeeded", "succeeded", None), key
        assert (first["status"], first["worker"], first["attempt"]) == ("lost", victim_id, 1)
        if fault == "kill":
            # Released by the survivor once the victim's sessions were gone, or run out first.
            assert first["error"] in (RELEASED_ERROR, LOST_ERROR)
        if fault == "freeze":
            assert first["error"] == LOST_ERROR  # its sessions stay open: nobody releases it
            # A frozen worker keeps its sessions open: its lease ran until it ended unrenewed,
            # at least a lease TTL less the look-ahead with which the victim leased it (its
            # leaser's `now` is 200 ms ahead). A killed worker's lease may end sooner: the
            # survivor's heartbeat ends it once the victim's sessions are gone (ADR 0035,
            # tests/integration/test_gone_worker_leases.py), or it runs out first.
            lasted = instant(first["finished_at"]) - instant(first["started_at"])
            assert lasted >= timedelta(milliseconds=DEFAULT_LEASE_TTL_MS - 200), (key, lasted)
        assert (second["status"], second["worker"], second["attempt"]) == (
            "succeeded",
            survivor_id,
            2,
        )
        assert second["fence_token"] == first["fence_token"] + 1


async def burst(api: UpProcess, receiver: Receiver) -> None:
    """BURST one-shot jobs due at the same instant, a few seconds from now (time to create them
    all); each request may stay open for a minute (the receiver holds them)."""
    at = (datetime.now(UTC) + timedelta(seconds=4)).isoformat().replace("+00:00", "Z")
    target = {**webhook(receiver.url(PATH)), "timeout": "PT60S"}

    async def create(n: int) -> None:
        body = {"name": f"b{n}", "schedule": {"at": at}, "target": target}
        assert (await api.call("POST", "/v1/jobs", json=body)).status_code == 201

    for first in range(0, BURST, 50):  # 50 at a time: the API process is on 2 shared cores
        await asyncio.gather(*(create(n) for n in range(first, min(first + 50, BURST))))


async def lease_owners(dsn: str) -> Counter[str]:
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(
            "SELECT lease_owner, count(*) AS n FROM tw_runs WHERE status = 'pending' "
            "GROUP BY lease_owner"
        )
    finally:
        await conn.close()
    owners = Counter({r["lease_owner"]: r["n"] for r in found})
    assert sum(owners.values()) == BURST, owners
    assert set(owners) <= {"w1", "w2"}, owners
    return owners


async def keys_leased_to(dsn: str, owner: str) -> set[str]:
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch("SELECT key FROM tw_runs WHERE lease_owner = $1", owner)
    finally:
        await conn.close()
    return {r["key"] for r in found}


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def histories_of(api: UpProcess, dsn: str, keys: set[str]) -> dict[str, Any]:
    """GET /v1/runs/{id} of the runs of these occurrence keys, by key."""
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch("SELECT key, id FROM tw_runs WHERE key = ANY($1)", list(keys))
    finally:
        await conn.close()
    shown = {}
    for row in found:
        response = await api.call("GET", f"/v1/runs/{row['id']}")
        assert response.status_code == 200, response.text
        shown[row["key"]] = response.json()
    return shown


async def all_succeeded(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        async with asyncio.timeout(30):
            while True:
                done = "SELECT count(*) FROM tw_runs WHERE status = 'succeeded'"
                if await conn.fetchval(done) == BURST:
                    return
                await asyncio.sleep(0.05)  # polling other processes' writes
    finally:
        await conn.close()


async def stale_outcomes(worker: UpProcess, expected: int) -> None:
    """Wait until `worker` has had `expected` outcomes rejected by the fence (its /metrics)."""
    async with asyncio.timeout(30):
        while True:
            text = (await worker.call("GET", "/metrics")).text
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                if name == "tickwork_stale_outcomes_total" and float(value) >= expected:
                    return
            await asyncio.sleep(0.05)  # polling another process


async def attempts(dsn: str) -> list[tuple[str, str, int, str]]:
    """Every applied outcome: (occurrence key, worker, attempt, status)."""
    conn = await asyncpg.connect(dsn)
    try:
        found = await conn.fetch(
            "SELECT r.key, a.worker, a.attempt, a.status FROM tw_attempt_history a "
            "JOIN tw_runs r ON r.id = a.run_id"
        )
    finally:
        await conn.close()
    return [(r["key"], r["worker"], r["attempt"], r["status"]) for r in found]
