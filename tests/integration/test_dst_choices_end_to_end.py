"""A cron job's DST choices end to end: created through the HTTP API with `schedule.dst`, stored
in SQLite or PostgreSQL, and fired by the real scheduler while an injected clock walks across a
real clock change. Every job must fire at exactly the instants its choice names.

The clock is moved to the earliest `next_run_at` of the jobs (what the scheduler's own loop
would sleep until), so a wrong next instant shows up as a wrong or missing `scheduled_for`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tickwork.api.app import create_app
from tickwork.clock import ManualClock
from tickwork.domain.runs import Fire
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.settings import Settings
from tickwork.store.base import ScheduleStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore
from tickwork.testing import mint_key


def z(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], ScheduleStore]:
    if request.param == "sqlite":
        path = tmp_path / "tickwork.db"
        return lambda: SqliteStore(path)
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
async def store(make_store: Callable[[], ScheduleStore]) -> AsyncIterator[ScheduleStore]:
    opened = make_store()
    await opened.open()
    yield opened
    await opened.close()


class Fired:
    def __init__(self) -> None:
        self.fires: list[Fire] = []

    def __call__(self, fires: Sequence[Fire]) -> None:
        self.fires.extend(fires)


async def fire_through(
    store: ScheduleStore, start: datetime, until: datetime, jobs: dict[str, dict[str, Any]]
) -> tuple[dict[str, list[datetime]], dict[str, Any]]:
    """Create `jobs` (name -> schedule) through the API at `start`, run the scheduler up to
    `until`; the UTC instants each job fired for, and each job as the API shows it."""
    clock = ManualClock(start)
    key = await mint_key(store, clock=clock)
    app = create_app(store=store, clock=clock, settings=Settings(api_key_rate=0))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    ids: dict[str, str] = {}
    shown: dict[str, Any] = {}
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://tickwork.test",
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        for name, schedule in jobs.items():
            body = {"name": name, "schedule": schedule, "target": {"url": "https://example.com/h"}}
            response = await client.post("/v1/jobs", json=body)
            assert response.status_code == 201, response.text
            ids[name] = response.json()["id"]
            shown[name] = (await client.get(f"/v1/jobs/{ids[name]}")).json()
    fired = Fired()
    scheduler = SchedulerService(
        store, clock, SchedulerConfig(node_id="s1", lookahead_ms=0), dispatch=fired
    )
    while True:
        due = [(await store.get_job(job_id)).next_run_at for job_id in ids.values()]
        upcoming = [instant for instant in due if instant is not None]
        if not upcoming or min(upcoming) > until:
            break
        clock.set(min(upcoming))
        result = await scheduler.run_once(clock.now())
        assert result.fires, f"nothing fired at {clock.now()}, where a job was due"
    names = {job_id: name for name, job_id in ids.items()}
    by_job: dict[str, list[datetime]] = {name: [] for name in jobs}
    for fire in fired.fires:
        by_job[names[fire.job_id]].append(fire.scheduled_for)
    return by_job, shown


async def test_fall_back_fires_at_the_first_the_second_or_both(store: ScheduleStore) -> None:
    # New York goes back 02:00 EDT -> 01:00 EST on 2026-11-01 (06:00Z): 01:30 happens at 05:30Z
    # and again at 06:30Z.
    cron = {"cron": "30 1 * * *", "timezone": "America/New_York"}
    fired, shown = await fire_through(
        store,
        z("2026-10-31T12:00"),
        z("2026-11-02T12:00"),
        {
            "debian": cron,
            "first": {**cron, "dst": {"repeat": "first"}},
            "second": {**cron, "dst": {"repeat": "second"}},
            "both": {**cron, "dst": {"repeat": "both"}},
        },
    )
    assert fired == {
        "debian": [z("2026-11-01T05:30"), z("2026-11-02T06:30")],
        "first": [z("2026-11-01T05:30"), z("2026-11-02T06:30")],
        "second": [z("2026-11-01T06:30"), z("2026-11-02T06:30")],
        "both": [z("2026-11-01T05:30"), z("2026-11-01T06:30"), z("2026-11-02T06:30")],
    }
    assert shown["second"]["schedule"]["dst"] == {"gap": "cron", "repeat": "second"}


async def test_spring_forward_shifts_or_skips(store: ScheduleStore) -> None:
    # Berlin jumps 02:00 CET -> 03:00 CEST on 2026-03-29 (01:00Z): 02:00-02:59 does not exist.
    def cron(expr: str, gap: str | None = None) -> dict[str, Any]:
        schedule: dict[str, Any] = {"cron": expr, "timezone": "Europe/Berlin"}
        return schedule if gap is None else {**schedule, "dst": {"gap": gap}}

    fired, shown = await fire_through(
        store,
        z("2026-03-28T12:00"),
        z("2026-03-30T12:00"),
        {
            "debian": cron("30 2 * * *"),
            "skip": cron("30 2 * * *", "skip"),
            # elapsed time, shifted: 02:00 and 02:30 merge into the regular 03:00, fired once
            "shift": cron("*/30 1-3 * * *", "shift"),
        },
    )
    assert fired == {
        "debian": [z("2026-03-29T01:00"), z("2026-03-30T00:30")],
        "skip": [z("2026-03-30T00:30")],
        "shift": [
            z("2026-03-29T00:00"),  # 01:00 CET
            z("2026-03-29T00:30"),  # 01:30 CET
            z("2026-03-29T01:00"),  # 03:00 CEST: the jump, once
            z("2026-03-29T01:30"),  # 03:30 CEST
            z("2026-03-29T23:00"),  # Monday 01:00 CEST
            z("2026-03-29T23:30"),
            z("2026-03-30T00:00"),
            z("2026-03-30T00:30"),
            z("2026-03-30T01:00"),
            z("2026-03-30T01:30"),
        ],
    }
    assert shown["skip"]["schedule"]["dst"] == {"gap": "skip", "repeat": "cron"}
