"""Issue 20 through the HTTP API: overlap and max_runs as job fields, a PATCH of the schedule
that changes only what it names, the pause note, resume with catch-up, `misfire: all`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.test_api import Api, create, error_of, job_body, serve
from tickwork.scheduler.planning import plan_claim
from tickwork.store.memory import MemoryStore


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


async def patch(api: Api, job_id: str, body: dict[str, Any], status: int = 200) -> Any:
    response = await api.client.patch(f"/v1/jobs/{job_id}", json=body)
    assert response.status_code == status, response.text
    return response.json()


async def test_overlap_and_max_runs_are_job_fields(api: Api) -> None:
    job = await create(api, overlap="skip", max_runs=3)
    assert (job["overlap"], job["max_runs"], job["fired_count"]) == ("skip", 3, 0)
    again = await patch(api, job["id"], {"overlap": "cancel_previous"})
    assert (again["overlap"], again["max_runs"]) == ("cancel_previous", 3)
    cleared = await patch(api, job["id"], {"max_runs": None})
    assert (cleared["overlap"], cleared["max_runs"]) == ("cancel_previous", None)
    assert (await create(api))["overlap"] == "allow"  # the default


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"overlap": "sometimes"}, "overlap"),
        ({"max_runs": 0}, "max_runs"),
        ({"max_runs": 1.5}, "max_runs"),
    ],
)
async def test_bad_policies_are_refused_naming_the_field(
    api: Api, body: dict[str, Any], field: str
) -> None:
    response = await api.client.post("/v1/jobs", json=job_body(**body))
    assert error_of(response, 422)["field"] == field


async def test_a_new_cron_expression_keeps_the_time_zone(api: Api) -> None:
    job = await create(api, schedule={"cron": "0 2 * * *", "timezone": "Europe/Berlin"})
    edited = await patch(api, job["id"], {"schedule": {"cron": "30 3 * * *"}})
    assert edited["schedule"]["timezone"] == "Europe/Berlin"
    assert edited["next_run_at"] == "2026-01-16T02:30:00Z"  # 03:30 CET


async def test_a_time_zone_alone_moves_the_cron_job_and_keeps_the_rest(api: Api) -> None:
    schedule = {"cron": "0 2 * * *", "timezone": "Europe/Berlin", "misfire": "skip"}
    job = await create(api, schedule=schedule)
    edited = await patch(api, job["id"], {"schedule": {"timezone": "America/New_York"}})
    assert edited["schedule"]["cron"] == "0 2 * * *"
    assert edited["schedule"]["misfire"] == "skip"
    assert edited["next_run_at"] == "2026-01-16T07:00:00Z"  # 02:00 EST


async def test_a_time_zone_for_an_every_job_is_refused(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1M"})
    response = await api.client.patch(
        f"/v1/jobs/{job['id']}", json={"schedule": {"timezone": "Europe/Berlin"}}
    )
    assert error_of(response, 422)["field"] == "schedule.timezone"


async def test_changing_the_kind_starts_from_that_kinds_defaults(api: Api) -> None:
    job = await create(api, schedule={"cron": "0 2 * * *", "timezone": "Europe/Berlin"})
    edited = await patch(api, job["id"], {"schedule": {"every": "PT30S"}})
    assert "timezone" not in edited["schedule"]
    assert edited["schedule"]["every"] == "PT30S"


async def test_an_every_schedule_with_start_at_fires_from_start_at(api: Api) -> None:
    start = "2026-01-15T15:00:07Z"
    job = await create(api, schedule={"every": "PT1H", "start_at": start})
    assert (job["next_run_at"], job["schedule"]["anchor"]) == (start, start)


async def test_the_pause_note_is_stored_shown_and_cleared(api: Api) -> None:
    job = await create(api)
    url = f"/v1/jobs/{job['id']}"
    paused = (await api.client.post(f"{url}/pause", json={"note": "vendor outage"})).json()
    assert (paused["state"], paused["pause_note"]) == ("paused", "vendor outage")
    assert (await api.client.get(url)).json()["pause_note"] == "vendor outage"
    resumed = (await api.client.post(f"{url}/resume")).json()
    assert (resumed["state"], resumed["pause_note"], resumed["paused_at"]) == (
        "scheduled",
        None,
        None,
    )
    bare = (await api.client.post(f"{url}/pause")).json()  # no body: no note
    assert (bare["state"], bare["pause_note"]) == ("paused", None)


async def test_resume_with_catch_up_starts_where_the_job_was_paused(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1M"})
    url = f"/v1/jobs/{job['id']}"
    await api.client.post(f"{url}/pause")
    api.clock.advance(timedelta(minutes=30))
    resumed = (await api.client.post(f"{url}/resume", json={"catch_up": True})).json()
    assert resumed["next_run_at"] == job["next_run_at"] == "2026-01-15T12:00:00Z"


async def test_misfire_all_is_accepted_as_fire_all(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1M", "misfire": "all"})
    assert job["schedule"]["misfire"] == "fire_all"


async def test_max_runs_patched_at_or_below_the_fires_completes_and_above_rearms(
    api: Api,
) -> None:
    job = await create(api, schedule={"every": "PT1M"})
    for _ in range(2):  # two scheduled fires, claimed as the scheduler claims them
        now = api.clock.now()
        due = await api.store.due_jobs(now, 10)
        plans = [plan_claim(d, now) for d in due]
        await api.store.claim(plans, owner="test", lease_until=now, now=now)
        api.clock.advance(timedelta(minutes=1))
    assert (await api.client.get(f"/v1/jobs/{job['id']}")).json()["fired_count"] == 2
    done = await patch(api, job["id"], {"max_runs": 2})
    assert (done["state"], done["next_run_at"]) == ("completed", None)
    again = await patch(api, job["id"], {"max_runs": 5})
    assert (again["state"], again["next_run_at"]) == ("scheduled", "2026-01-15T12:02:00Z")


async def test_max_runs_patched_to_null_rearms_a_completed_job(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1M"}, max_runs=2)
    for _ in range(3):  # the third claim finds nothing: the second fire completed the job
        now = api.clock.now()
        plans = [plan_claim(d, now) for d in await api.store.due_jobs(now, 10)]
        await api.store.claim(plans, owner="test", lease_until=now, now=now)
        api.clock.advance(timedelta(minutes=1))
    done = (await api.client.get(f"/v1/jobs/{job['id']}")).json()
    assert (done["state"], done["fired_count"], done["next_run_at"]) == ("completed", 2, None)
    unlimited = await patch(api, job["id"], {"max_runs": None})
    assert (unlimited["state"], unlimited["max_runs"]) == ("scheduled", None)
    assert unlimited["next_run_at"] == "2026-01-15T12:03:00Z"  # the clock is at 12:03 now


async def test_catchup_window_is_a_schedule_field_with_a_default_of_a_day(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1M", "misfire": "fire_all"})
    assert job["schedule"]["catchup_window"] == "P1D"
    made = await create(
        api, schedule={"every": "PT1M", "misfire": "fire_all", "catchup_window": "PT6H"}
    )
    assert made["schedule"]["catchup_window"] == "PT6H"
    fetched = (await api.client.get(f"/v1/jobs/{made['id']}")).json()
    assert fetched["schedule"]["catchup_window"] == "PT6H"
    # A PATCH of the schedule changes only what it names, the window included.
    edited = await patch(api, made["id"], {"schedule": {"catchup_window": "PT30M"}})
    assert (edited["schedule"]["catchup_window"], edited["schedule"]["every"]) == ("PT30M", "PT1M")
    kept = await patch(api, made["id"], {"schedule": {"misfire_grace": "PT5S"}})
    assert kept["schedule"]["catchup_window"] == "PT30M"
    # Accepted with the other policies too, where it is unused.
    coalescing = await create(api, schedule={"every": "PT1M", "catchup_window": 3600})
    assert coalescing["schedule"]["catchup_window"] == "PT1H"


@pytest.mark.parametrize("window", ["PT0.5S", "P367D", "P1M", "soon", 0, -5])
async def test_a_bad_catchup_window_is_refused_naming_the_field_and_the_range(
    api: Api, window: object
) -> None:
    body = job_body(schedule={"every": "PT1M", "misfire": "fire_all", "catchup_window": window})
    error = error_of(await api.client.post("/v1/jobs", json=body), 422)
    assert error["field"] == "schedule.catchup_window"
    job = await create(api, schedule={"every": "PT1M", "misfire": "fire_all"})
    response = await api.client.patch(
        f"/v1/jobs/{job['id']}", json={"schedule": {"catchup_window": window}}
    )
    assert error_of(response, 422)["field"] == "schedule.catchup_window"
