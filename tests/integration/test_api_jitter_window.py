"""`schedule.jitter` and `schedule.window` through the HTTP API (ADR 0022): fields of the
schedule, merged by PATCH, refused with a 422 naming the field; a job shows when its next
occurrence fires (`next_run_at`, planned) and its own instant (`next_scheduled_for`); a run
shows `planned_for`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.integration.test_api import Api, create, error_of, job_body, serve
from tickwork.clock import utc_iso
from tickwork.scheduler.planning import plan_claim
from tickwork.store.memory import MemoryStore
from tickwork.timing.jitter import planned_instant


def parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


async def patch(api: Api, job_id: str, body: dict[str, Any], status: int = 200) -> Any:
    response = await api.client.patch(f"/v1/jobs/{job_id}", json=body)
    assert response.status_code == status, response.text
    return response.json()


async def test_a_jittered_job_shows_its_planned_and_its_nominal_next_instant(api: Api) -> None:
    job = await create(api, schedule={"cron": "0 * * * *", "jitter": "PT10M"})
    assert job["schedule"]["jitter"] == "PT10M"
    assert job["schedule"]["window"] is None
    nominal = parse_iso(job["next_scheduled_for"])
    assert nominal.minute == 0
    drawn = planned_instant(job["id"], nominal, 600_000, next_nominal=nominal + timedelta(hours=1))
    assert parse_iso(job["next_run_at"]) == drawn
    # Without a shift both are the same instant.
    plain = await create(api, schedule={"cron": "0 * * * *"})
    assert plain["next_run_at"] == plain["next_scheduled_for"]
    assert plain["schedule"]["jitter"] is None


async def test_patch_merges_jitter_and_window_and_null_removes_them(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1H", "jitter": 60})
    assert job["schedule"]["jitter"] == "PT1M"
    kept = await patch(api, job["id"], {"schedule": {"misfire_grace": "PT5S"}})
    assert kept["schedule"]["jitter"] == "PT1M"
    swapped = await patch(api, job["id"], {"schedule": {"jitter": None, "window": "PT5M"}})
    assert (swapped["schedule"]["jitter"], swapped["schedule"]["window"]) == (None, "PT5M")
    placed = parse_iso(swapped["next_run_at"])
    nominal = parse_iso(swapped["next_scheduled_for"])
    assert nominal <= placed <= nominal + timedelta(minutes=5)
    cleared = await patch(api, job["id"], {"schedule": {"window": "PT0S"}})
    assert cleared["schedule"]["window"] is None
    assert cleared["next_run_at"] == cleared["next_scheduled_for"]


@pytest.mark.parametrize(
    ("schedule", "field", "code"),
    [
        ({"every": "PT1M", "jitter": "P2D"}, "schedule.jitter", "invalid_shift"),
        ({"every": "PT1M", "window": "soon"}, "schedule.window", "invalid_shift"),
        ({"every": "PT1M", "jitter": -1}, "schedule.jitter", "invalid_shift"),
        (
            {"every": "PT1M", "jitter": "PT5S", "window": "PT5S"},
            "schedule.window",
            "jitter_and_window",
        ),
    ],
)
async def test_bad_shifts_are_refused_naming_the_field(
    api: Api, schedule: dict[str, Any], field: str, code: str
) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=job_body(schedule=schedule)), 422)
    assert (error["field"], error["code"]) == (field, code)


async def test_adding_a_window_to_a_jittered_job_is_refused_until_the_jitter_goes(
    api: Api,
) -> None:
    job = await create(api, schedule={"every": "PT1M", "jitter": "PT5S"})
    response = await api.client.patch(
        f"/v1/jobs/{job['id']}", json={"schedule": {"window": "PT5S"}}
    )
    assert error_of(response, 422)["code"] == "jitter_and_window"


async def test_a_run_shows_the_instant_it_was_planned_at(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1H", "jitter": "PT30M"})
    planned = parse_iso(job["next_run_at"])
    nominal = parse_iso(job["next_scheduled_for"])
    assert planned > nominal  # this job draws a delay (else the test tells nothing apart)
    stored = await api.store.get_job(job["id"])
    due = await api.store.due_jobs(planned, 10)
    [plan] = [plan_claim(d, planned) for d in due if d.job_id == stored.id]
    await api.store.claim_hand_off([plan], owner="s", now=planned)
    [run] = (await api.client.get(f"/v1/jobs/{job['id']}/runs")).json()["runs"]
    assert parse_iso(run["scheduled_for"]) == nominal
    assert parse_iso(run["planned_for"]) == planned
    assert parse_iso(run["lease_until"]) == planned  # not leasable before it
    after = (await api.client.get(f"/v1/jobs/{job['id']}")).json()
    assert parse_iso(after["next_scheduled_for"]) == nominal + timedelta(hours=1)
    assert parse_iso(after["next_run_at"]) >= nominal + timedelta(hours=1)


async def test_preview_and_explain_show_the_planned_instants(api: Api) -> None:
    job = await create(api, schedule={"cron": "0 * * * *", "jitter": "PT20M"})
    preview = (await api.client.get(f"/v1/jobs/{job['id']}/preview", params={"count": 4})).json()
    assert preview["shift"].startswith("jitter PT20M")
    assert preview["fires"][0]["utc"] == job["next_scheduled_for"]
    assert preview["fires"][0]["planned_for"] == job["next_run_at"]
    for fire in preview["fires"]:
        nominal = parse_iso(fire["utc"])
        drawn = planned_instant(
            job["id"], nominal, 1_200_000, next_nominal=nominal + timedelta(hours=1)
        )
        assert parse_iso(fire["planned_for"]) == drawn
    explained = (
        await api.client.get(f"/v1/jobs/{job['id']}/explain", params={"at": fire["utc"]})
    ).json()
    assert explained["planned_for"] == fire["planned_for"]
    assert explained["shift"].startswith("jitter PT20M")

    windowed = await create(api, schedule={"cron": "0 * * * *", "window": "PT20M"})
    shown = (await api.client.get(f"/v1/jobs/{windowed['id']}/preview", params={"count": 3})).json()
    # The next fire is placed already; the ones after it are placed when it is claimed.
    assert [f["planned_for"] for f in shown["fires"]] == [windowed["next_run_at"], None, None]
    assert shown["shift"].startswith("window PT20M")


async def test_the_load_forecast_counts_jittered_fires_where_they_will_land(api: Api) -> None:
    start = parse_iso((await create(api, schedule={"cron": "0 * * * *"}))["next_run_at"])
    for n in range(60):
        await create(api, name=f"j{n}", schedule={"cron": "0 * * * *", "jitter": "PT10M"})
    window = {"from": utc_iso(start), "to": utc_iso(start + timedelta(hours=1)), "bucket": 60}
    found = (await api.client.get("/v1/load", params=window)).json()
    assert found["total"] == 61
    # Unjittered, all 61 would be the peak of one bucket; jittered, 60 spread over 10 minutes.
    assert found["peak"] < 20
    assert len(found["buckets"]) >= 8
    assert all(parse_iso(b["start"]) < start + timedelta(minutes=11) for b in found["buckets"])


async def test_priority_is_a_job_field_from_1_to_9_default_5(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1M"})
    assert job["priority"] == 5
    urgent = await create(api, schedule={"every": "PT1M"}, priority=9)
    assert urgent["priority"] == 9
    lowered = await patch(api, urgent["id"], {"priority": 2})
    assert lowered["priority"] == 2
    kept = await patch(api, urgent["id"], {"name": "renamed"})
    assert kept["priority"] == 2
    for bad in (0, 10, "high", 5.5):
        response = await api.client.post(
            "/v1/jobs", json=job_body(schedule={"every": "PT1M"}, priority=bad)
        )
        assert error_of(response, 422)["field"] == "priority"
