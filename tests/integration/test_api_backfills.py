"""The backfill routes: create (202), read, list, cancel; the 422s that name the field and the
fix; writer/reader roles and tenant isolation; and the audit of who asked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.test_api import NOW, Api, job_body, serve
from tickwork.clock import utc_iso
from tickwork.domain.jobs import JobState
from tickwork.scheduler.backfill_lane import BackfillLane, LaneConfig
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

DAY = timedelta(days=1)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore(), max_body=16_384):
        yield served


async def every_minute_job(api: Api, **overrides: Any) -> dict[str, Any]:
    body = job_body(schedule={"cron": "* * * * *"}, **overrides)
    made = await api.client.post("/v1/jobs", json=body)
    assert made.status_code == 201, made.text
    job: dict[str, Any] = made.json()
    return job


def window(days: float = 1, *, end: timedelta = timedelta(0)) -> dict[str, str]:
    to = NOW - end
    return {"from": utc_iso(to - timedelta(days=days)), "to": utc_iso(to)}


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


async def test_a_backfill_is_accepted_with_its_total_and_read_back(api: Api) -> None:
    job = await every_minute_job(api)
    made = await api.client.post(f"/v1/jobs/{job['id']}/backfill", json=window() | {"rate": 200})
    assert made.status_code == 202, made.text
    backfill = made.json()
    assert backfill["job_id"] == job["id"]
    assert (backfill["kind"], backfill["state"], backfill["total"], backfill["done"]) == (
        "backfill",
        "running",
        1440,
        0,
    )
    assert (backfill["from"], backfill["to"], backfill["rate"], backfill["cursor"]) == (
        utc_iso(NOW - DAY),
        utc_iso(NOW),
        200.0,
        None,
    )
    got = await api.client.get(f"/v1/backfills/{backfill['id']}")
    assert got.json() == backfill
    listed = await api.client.get(f"/v1/jobs/{job['id']}/backfills")
    assert listed.json() == {"backfills": [backfill]}


async def test_the_lane_replays_it_and_the_api_shows_progress(api: Api) -> None:
    job = await every_minute_job(api)
    made = (await api.client.post(f"/v1/jobs/{job['id']}/backfill", json=window(1 / 24))).json()
    lane = BackfillLane(api.store, api.clock, LaneConfig(rate_per_s=1000))
    api.clock.advance(timedelta(milliseconds=500))
    await lane.run_once()
    halfway = (await api.client.get(f"/v1/backfills/{made['id']}")).json()
    assert (halfway["state"], halfway["done"]) == ("running", 25)  # 50/s by default, 0.5 s
    assert halfway["cursor"] == utc_iso(NOW - timedelta(hours=1) + timedelta(minutes=24))
    for _ in range(10):
        api.clock.advance(timedelta(milliseconds=500))
        await lane.run_once()
    done = (await api.client.get(f"/v1/backfills/{made['id']}")).json()
    assert (done["state"], done["done"], done["total"]) == ("completed", 60, 60)
    runs = (await api.client.get(f"/v1/jobs/{job['id']}/runs", params={"limit": 100})).json()
    assert {r["origin"] for r in runs["runs"]} == {"backfill"}
    assert all(r["key"].endswith(":backfill") for r in runs["runs"])
    after = (await api.client.get(f"/v1/jobs/{job['id']}")).json()
    assert after["next_run_at"] == job["next_run_at"]


@pytest.mark.parametrize(
    ("body", "field", "code", "words"),
    [
        (window(0), "to", "empty_range", "after `from`"),
        (window(1, end=-timedelta(minutes=1)), "to", "in_future", "backfill replays the past"),
        (window(800), "to", "too_many_occurrences", "1,000,000"),
        (window() | {"rate": 0}, "rate", None, None),
        (window() | {"rate": 20_000}, "rate", None, None),
        ({"from": utc_iso(NOW - DAY)}, "to", None, None),
        (window() | {"extra": 1}, "extra", None, None),
    ],
)
async def test_bad_requests_are_422_naming_the_field(
    api: Api, body: dict[str, Any], field: str, code: str | None, words: str | None
) -> None:
    job = await every_minute_job(api)
    error = error_of(await api.client.post(f"/v1/jobs/{job['id']}/backfill", json=body), 422)
    assert error["field"] == field
    if code is not None:
        assert error["code"] == code
    if words is not None:
        assert words in error["message"]
    assert (await api.client.get(f"/v1/jobs/{job['id']}/backfills")).json() == {"backfills": []}


async def test_an_empty_range_of_occurrences_is_completed_at_once(api: Api) -> None:
    job = await every_minute_job(api)
    made = await api.client.post(
        f"/v1/jobs/{job['id']}/backfill",
        json={
            "from": utc_iso(NOW - timedelta(seconds=50)),
            "to": utc_iso(NOW - timedelta(seconds=10)),
        },
    )
    assert (made.status_code, made.json()["state"], made.json()["total"]) == (202, "completed", 0)


async def test_cancel_stops_it_and_is_idempotent(api: Api) -> None:
    job = await every_minute_job(api)
    made = (await api.client.post(f"/v1/jobs/{job['id']}/backfill", json=window())).json()
    cancelled = await api.client.delete(f"/v1/backfills/{made['id']}")
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "cancelled")
    again = await api.client.delete(f"/v1/backfills/{made['id']}")
    assert again.json() == cancelled.json()
    error_of(await api.client.delete("/v1/backfills/999"), 404)
    error_of(await api.client.get("/v1/backfills/999"), 404)
    error_of(await api.client.post(f"/v1/jobs/{'0' * 32}/backfill", json=window()), 404)


async def test_readers_read_writers_write_and_tenants_see_only_their_own(api: Api) -> None:
    for tenant in ("acme", "globex"):
        assert (await api.client.post("/v1/tenants", json={"name": tenant})).status_code == 201
    job = await every_minute_job(api, tenant="acme")
    made = (await api.client.post(f"/v1/jobs/{job['id']}/backfill", json=window())).json()
    reader = await mint_key(api.store, role="tenant-read", tenant="acme", clock=api.clock)
    writer = await mint_key(api.store, role="tenant-write", tenant="acme", clock=api.clock)
    stranger = await mint_key(api.store, role="tenant-write", tenant="globex", clock=api.clock)
    async with api.client_with(reader) as client:
        assert (await client.get(f"/v1/backfills/{made['id']}")).status_code == 200
        assert (await client.get(f"/v1/jobs/{job['id']}/backfills")).status_code == 200
        error_of(await client.post(f"/v1/jobs/{job['id']}/backfill", json=window()), 403)
        error_of(await client.delete(f"/v1/backfills/{made['id']}"), 403)
    async with api.client_with(stranger) as client:
        error_of(await client.get(f"/v1/backfills/{made['id']}"), 404)
        error_of(await client.get(f"/v1/jobs/{job['id']}/backfills"), 404)
        error_of(await client.delete(f"/v1/backfills/{made['id']}"), 404)
        error_of(await client.post(f"/v1/jobs/{job['id']}/backfill", json=window()), 404)
    async with api.client_with(writer) as client:
        cancelled = await client.delete(f"/v1/backfills/{made['id']}")
        assert cancelled.json()["state"] == "cancelled"
        again = await client.post(f"/v1/jobs/{job['id']}/backfill", json=window())
        assert again.status_code == 202
    audit = (await api.client.get("/v1/audit", params={"tenant": "acme"})).json()
    resources = {e["resource"] for e in audit["entries"]}
    assert f"backfill {made['id']}" in resources


async def test_a_paused_or_completed_job_can_be_backfilled(api: Api) -> None:
    paused = await every_minute_job(api)
    assert (await api.client.post(f"/v1/jobs/{paused['id']}/pause")).status_code == 200
    completed = await every_minute_job(api)
    stored = await api.store.get_job(completed["id"])  # completed as the scheduler does it
    await api.store.update_job(replace(stored, state=JobState.COMPLETED, next_run_at=None))
    made = []
    for job in (paused, completed):
        response = await api.client.post(f"/v1/jobs/{job['id']}/backfill", json=window(1 / 24))
        assert response.status_code == 202, response.text
        made.append(response.json())
    lane = BackfillLane(api.store, api.clock, LaneConfig(rate_per_s=1000))
    for _ in range(3):
        api.clock.advance(timedelta(seconds=1))
        await lane.run_once()
    for job, backfill in zip((paused, completed), made, strict=True):
        done = (await api.client.get(f"/v1/backfills/{backfill['id']}")).json()
        assert (done["state"], done["done"]) == ("completed", 60)
        assert len(await api.store.list_runs(job["id"], limit=100)) == 60
    states = [
        (await api.client.get(f"/v1/jobs/{j['id']}")).json()["state"] for j in (paused, completed)
    ]
    assert states == ["paused", "completed"]  # the backfill does not re-arm either
