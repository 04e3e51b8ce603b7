"""A backfill through a real `tickwork up` on PostgreSQL, asked for with the CLI (which waits
with its progress bar): a day of an every-minute job (1,440 occurrences) is replayed in
order, paced, each occurrence once, replaying it again adds nothing, and an every-second job
of another tenant keeps firing on time meanwhile."""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickwork.clock import utc_iso

from ..support.proc import UpProcess, data_dir_for
from ..support.receiver import Receiver

pytestmark = pytest.mark.slow

RATE = 300  # the backfill's own rate, occurrences/s
OCCURRENCES = 1440


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


def webhook(url: str) -> dict[str, Any]:
    return {"type": "webhook", "url": url, "method": "POST"}


async def created(up: UpProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await up.call("POST", path, json=body)
    assert response.status_code in (201, 202), response.text
    data: dict[str, Any] = response.json()
    return data


async def cli(up: UpProcess, *args: str) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "TICKWORK_API_URL": up.api,
        "TICKWORK_DATA_DIR": str(data_dir_for(up.db_url)),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tickwork", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def all_runs(up: UpProcess, job_id: str) -> list[dict[str, Any]]:
    """The job's backfill runs. Its own schedule (every minute) fires too when the test spans
    a minute boundary: those runs are its on-time fires, not the backfill's."""
    runs: list[dict[str, Any]] = []
    before: int | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000} | ({"before": before} if before else {})
        page = (await up.call("GET", f"/v1/jobs/{job_id}/runs", params=params)).json()
        runs += page["runs"]
        before = page["next_before"]
        if before is None:
            return [r for r in runs if r["origin"] != "schedule"]


def instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_a_day_is_replayed_paced_once_each_while_on_time_fires_go_on(
    pg_dsn: str, receiver: Receiver
) -> None:
    up = await UpProcess(pg_dsn, extra_env={"TICKWORK_BACKFILL_RATE": "1000"}).start()
    try:
        for tenant in ("acme", "globex"):
            await created(up, "/v1/tenants", {"name": tenant})
        ontime = await created(
            up,
            "/v1/jobs",
            {
                "name": "heartbeat",
                "tenant": "globex",
                "schedule": {"every": "PT1S"},
                "target": webhook(receiver.url("/ontime")),
            },
        )
        job = await created(
            up,
            "/v1/jobs",
            {
                "name": "minutely",
                "tenant": "acme",
                "schedule": {"cron": "* * * * *"},
                "target": webhook(receiver.url("/backfill")),
            },
        )
        await receiver.wait_for("/ontime", 2)
        to = datetime.now(UTC).replace(second=0, microsecond=0)
        window = ["--from", utc_iso(to - timedelta(days=1)), "--to", utc_iso(to)]
        started = datetime.now(UTC)
        code, out, err = await cli(up, "jobs", "backfill", job["id"], *window, "--rate", str(RATE))
        finished = datetime.now(UTC)
        assert (code, err) == (0, ""), out
        assert f"{OCCURRENCES}/{OCCURRENCES}" in out  # the progress bar, full
        assert f"completed, {OCCURRENCES} of {OCCURRENCES} occurrences enqueued" in out
        hits = await receiver.wait_for("/backfill", OCCURRENCES, timeout_s=60)
        runs = await all_runs(up, job["id"])

        # Replaying the range again, as fast as allowed, adds no run.
        again = await created(
            up,
            f"/v1/jobs/{job['id']}/backfill",
            {"from": window[1], "to": window[3], "rate": 10_000},
        )
        for _ in range(100):
            state = (await up.call("GET", f"/v1/backfills/{again['id']}")).json()
            if state["state"] != "running":
                break
            await asyncio.sleep(0.1)
        assert (state["state"], state["done"]) == ("completed", OCCURRENCES)
        assert len(await all_runs(up, job["id"])) == OCCURRENCES
        listed = (await up.call("GET", f"/v1/jobs/{job['id']}/backfills")).json()
        assert [b["id"] for b in listed["backfills"]] == [again["id"], again["id"] - 1]
        code, out, _ = await cli(up, "jobs", "backfills", job["id"])
        assert code == 0
        assert "completed" in out
        await asyncio.sleep(1.5)  # one more on-time fire after the backfill, to see it go on
    finally:
        assert await up.stop() == 0

    # Each occurrence of the day once, in order, as backfill runs that kept their own keys.
    assert len(runs) == OCCURRENCES
    assert {r["origin"] for r in runs} == {"backfill"}
    assert len({r["key"] for r in runs}) == OCCURRENCES
    by_id = sorted(runs, key=lambda r: r["id"])
    expected = [utc_iso(to - timedelta(days=1) + timedelta(minutes=m)) for m in range(1440)]
    assert [r["scheduled_for"] for r in by_id] == expected
    assert max(Counter(h.key for h in hits).values()) == 1

    # Paced: never more than the rate allows (plus the one-second window it may burst).
    made = sorted(instant(r["created_at"]) for r in runs)
    first = made[0]
    for n, at in enumerate(made, 1):
        assert n <= RATE * ((at - first).total_seconds() + 1) + 1, f"run {n} too early"
    span = (made[-1] - first).total_seconds()
    assert span >= OCCURRENCES / RATE - 1.2

    # The other tenant's every-second job fired each second, on time, throughout.
    during = [
        d
        for d in receiver.for_path("/ontime")
        if started - timedelta(seconds=1) <= d.scheduled_for <= finished
    ]
    assert len(during) >= span  # at least one per second of the backfill
    instants = sorted(d.scheduled_for for d in during)
    assert {b - a for a, b in itertools.pairwise(instants)} == {timedelta(seconds=1)}
    lateness = max((d.arrived_at - d.scheduled_for).total_seconds() for d in during)
    assert lateness < 1.0, f"an on-time fire was {lateness:.2f} s late during the backfill"
    assert all(d.headers["tickwork-job-id"] == ontime["id"] for d in during)
