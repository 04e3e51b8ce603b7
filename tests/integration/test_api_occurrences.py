"""GET /v1/jobs/{id}/occurrences and /explain end to end: the API, the job service, the real
scheduler claiming through the in-memory store, a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from tickwork.domain.runs import RunOutcome, RunStatus
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

from .test_api import Api, create, error_of, serve


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


def scheduler(api: Api) -> SchedulerService:
    return SchedulerService(
        api.store, api.clock, SchedulerConfig(node_id="n"), dispatch=lambda fires: None
    )


async def tick_at(api: Api, service: SchedulerService, minutes: float) -> None:
    api.clock.advance(timedelta(minutes=minutes))
    await service.run_once()


async def occurrences(api: Api, job_id: str, **params: str) -> dict[str, Any]:
    response = await api.client.get(f"/v1/jobs/{job_id}/occurrences", params=params)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


async def explain(api: Api, job_id: str, at: str) -> dict[str, Any]:
    response = await api.client.get(f"/v1/jobs/{job_id}/explain", params={"at": at})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


async def test_fired_coalesced_paused_and_scheduled_occurrences_each_have_one_entry(
    api: Api,
) -> None:
    # NOW is 12:00; an hourly job fires 13:00, then the scheduler is down 3 hours.
    job = await create(api, schedule={"cron": "0 * * * *"})
    service = scheduler(api)
    await tick_at(api, service, 60)  # 13:00: on time
    await tick_at(api, service, 3 * 60 + 30)  # 16:30: 14:00 and 15:00 fold into 16:00
    await api.client.post(f"/v1/jobs/{job['id']}/pause", json={"note": "db migration"})
    api.clock.advance(timedelta(hours=2))  # 18:30: 17:00 and 18:00 fall while paused
    found = await occurrences(
        api, job["id"], **{"from": "2026-01-15T12:00:00Z", "to": "2026-01-15T21:00:00Z"}
    )
    rows = [(o["at"], o["outcome"], o["count"], o["last"]) for o in found["occurrences"]]
    assert rows == [
        ("2026-01-15T13:00:00Z", "fired", 1, None),
        ("2026-01-15T14:00:00Z", "coalesced_into", 2, "2026-01-15T15:00:00Z"),
        ("2026-01-15T16:00:00Z", "fired", 1, None),
        ("2026-01-15T17:00:00Z", "paused", 1, None),  # not recorded yet: paused now
        ("2026-01-15T18:00:00Z", "paused", 1, None),
        ("2026-01-15T19:00:00Z", "paused", 1, None),
        ("2026-01-15T20:00:00Z", "paused", 1, None),
        ("2026-01-15T21:00:00Z", "paused", 1, None),
    ]
    fired_16 = found["occurrences"][2]
    assert found["occurrences"][1]["run_id"] == fired_16["run_id"]
    assert (fired_16["origin"], fired_16["status"]) == ("schedule", "pending")
    assert found["next_from"] is None

    await api.client.post(f"/v1/jobs/{job['id']}/resume")  # 18:30, from now on
    found = await occurrences(
        api, job["id"], **{"from": "2026-01-15T17:00:00Z", "to": "2026-01-15T19:00:00Z"}
    )
    rows = [(o["at"], o["outcome"], o["count"], o["last"]) for o in found["occurrences"]]
    assert rows == [
        ("2026-01-15T17:00:00Z", "paused", 2, "2026-01-15T18:00:00Z"),  # recorded on resume
        ("2026-01-15T19:00:00Z", "scheduled", 1, None),
    ]


async def test_explain_says_what_happened_and_why(api: Api) -> None:
    job = await create(api, schedule={"cron": "0 * * * *", "timezone": "Europe/Berlin"})
    service = scheduler(api)
    await tick_at(api, service, 60)  # 13:00 fires
    run_id = (await api.store.list_runs(job["id"]))[0].id
    await api.store.finish_runs(
        [
            RunOutcome(
                run_id=run_id,
                job_id=job["id"],
                attempt=1,
                fence_token=(await api.store.get_run(run_id)).fence_token,
                worker="w",
                retry_at=None,
                status=RunStatus.SUCCEEDED,
                started_at=api.clock.now(),
                finished_at=api.clock.now(),
                http_status=200,
                error=None,
            )
        ]
    )
    await tick_at(api, service, 3 * 60 + 30)  # 16:30: 14:00, 15:00 folded into 16:00

    fired = await explain(api, job["id"], "2026-01-15T12:30:00Z")
    assert fired["occurrence"] == "2026-01-15T13:00:00Z"
    assert fired["summary"] == (
        f"fired at 2026-01-15T13:00:00Z (run {run_id}, succeeded after 1 attempt)"
    )
    assert fired["rule"]["kind"] == "cron"
    assert fired["rule"]["local"] == "2026-01-15T14:00:00+01:00"
    assert fired["dst"] == {"gap": "cron", "repeat": "cron", "note": None}
    assert (fired["overlap"], fired["misfire"], fired["misfire_grace"]) == (
        "allow",
        "coalesce",
        "PT1S",
    )
    assert fired["run"]["id"] == run_id
    assert [a["status"] for a in fired["attempts"]] == ["succeeded"]

    folded = await explain(api, job["id"], "2026-01-15T15:00:00Z")
    into = (await api.store.list_runs(job["id"]))[0].id
    assert (folded["outcome"], folded["count"]) == ("coalesced_into", 2)
    assert (folded["range_first"], folded["range_last"]) == (
        "2026-01-15T14:00:00Z",
        "2026-01-15T15:00:00Z",
    )
    assert folded["summary"].startswith(f"coalesced into run {into} after downtime")
    assert folded["run"]["id"] == into

    await api.client.post(f"/v1/jobs/{job['id']}/pause", json={"note": "db migration"})
    paused = await explain(api, job["id"], "2026-01-15T16:30:01Z")
    assert paused["summary"] == (
        "will not fire at 2026-01-15T17:00:00Z while the job is paused (note: db migration)"
    )
    assert paused["paused"] == {"since": "2026-01-15T16:30:00Z", "note": "db migration"}
    api.clock.advance(timedelta(hours=2))
    await api.client.post(f"/v1/jobs/{job['id']}/resume")
    skipped = await explain(api, job["id"], "2026-01-15T17:00:00Z")
    assert skipped["outcome"] == "paused"
    assert skipped["summary"] == "skipped: the job was paused, and resumed without catching up"
    future = await explain(api, job["id"], "2026-01-15T18:40:00Z")
    assert future["summary"] == (
        "will fire at 2026-01-15T19:00:00Z (2026-01-15T20:00:00+01:00 local)"
    )
    assert future["outcome"] == "scheduled"


async def test_explain_past_the_end_of_a_schedule_says_there_is_none(api: Api) -> None:
    job = await create(api, schedule={"at": "2026-01-15T13:00:00Z"})
    found = await explain(api, job["id"], "2026-01-16T00:00:00Z")
    assert found["occurrence"] is None
    assert found["summary"] == "the schedule has no occurrence at or after 2026-01-16T00:00:00Z"


async def test_a_manual_run_is_an_extra_entry_with_its_origin(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1H"})
    await api.client.post(f"/v1/jobs/{job['id']}/trigger")
    found = await occurrences(
        api, job["id"], **{"from": "2026-01-15T12:00:00Z", "to": "2026-01-15T13:00:00Z"}
    )
    rows = [(o["at"], o["outcome"], o["origin"]) for o in found["occurrences"]]
    assert rows == [
        ("2026-01-15T12:00:00Z", "scheduled", None),
        ("2026-01-15T12:00:00Z", "fired", "manual"),
        ("2026-01-15T13:00:00Z", "scheduled", None),
    ]


async def test_a_cut_list_says_where_to_go_on(api: Api) -> None:
    job = await create(api, schedule={"every": "PT1M"})
    window = {"from": "2026-01-15T12:00:00Z", "to": "2026-01-15T13:00:00Z", "limit": "5"}
    found = await occurrences(api, job["id"], **window)
    assert [o["at"][11:16] for o in found["occurrences"]] == [
        "12:00",
        "12:01",
        "12:02",
        "12:03",
        "12:04",
    ]
    assert found["next_from"] == "2026-01-15T12:04:00.001Z"


@pytest.mark.parametrize(
    ("params", "field", "code"),
    [
        ({"from": "2026-01-15T13:00:00Z", "to": "2026-01-15T12:00:00Z"}, "to", "invalid_window"),
        ({"from": "2024-01-15T13:00:00Z", "to": "2026-01-15T12:00:00Z"}, "to", "window_too_long"),
        ({"limit": "1001"}, "limit", None),
        ({"from": "yesterday"}, "from", None),
    ],
)
async def test_a_bad_window_is_a_422_naming_the_field(
    api: Api, params: dict[str, str], field: str, code: str | None
) -> None:
    job = await create(api)
    response = await api.client.get(f"/v1/jobs/{job['id']}/occurrences", params=params)
    error = error_of(response, 422)
    assert field in error["field"]
    if code is not None:
        assert error["code"] == code


async def test_another_tenants_job_is_not_found(api: Api) -> None:
    job = await create(api, tenant="acme")
    other = await mint_key(api.store, role="tenant-read", tenant="default", clock=api.clock)
    async with api.client_with(other) as client:
        for path in ("occurrences", "explain"):
            response = await client.get(f"/v1/jobs/{job['id']}/{path}")
            assert error_of(response, 404)["code"] == "not_found"
    reader = await mint_key(api.store, role="tenant-read", tenant="acme", clock=api.clock)
    async with api.client_with(reader) as client:
        assert (await client.get(f"/v1/jobs/{job['id']}/explain")).status_code == 200


async def test_the_default_window_is_the_last_day_and_the_coming_hour(api: Api) -> None:
    # NOW is 12:00; an hourly job, read 30 hours later (18:00 the next day).
    job = await create(api, schedule={"cron": "0 * * * *"})
    api.clock.advance(timedelta(hours=30))
    listed = (await occurrences(api, job["id"]))["occurrences"]
    instants = [entry["at"] for entry in listed]
    # From 19:00 (the day before 19:00 today, the end being now + 1 hour) to 19:00 today.
    assert instants[0] == "2026-01-15T19:00:00Z"
    assert instants[-1] == "2026-01-16T19:00:00Z"


async def test_the_guides_pause_timeline(api: Api) -> None:
    """docs/policies.md, Pause and resume: every minute, paused at 12:00:30, resumed at
    12:10:30. Resumed from now, the next run is 12:11; resumed with catch-up, coalesce fires
    one run for 12:10 and skip fires none (next run 12:11). (fire_all's ten runs wait for the
    catch-up rewrite; the planner's test covers its one-by-one fires.)"""
    jobs = {
        name: await create(api, name=name, schedule={"every": "PT1M", "misfire": misfire})
        for name, misfire in (("from-now", "coalesce"), ("coalesce", "coalesce"), ("skip", "skip"))
    }
    service = scheduler(api)
    await tick_at(api, service, 0)  # 12:00 fires for each
    api.clock.advance(timedelta(seconds=30))
    for job in jobs.values():
        await api.client.post(f"/v1/jobs/{job['id']}/pause")
    api.clock.advance(timedelta(minutes=10))
    for name, job in jobs.items():
        body = None if name == "from-now" else {"catch_up": True}
        resumed = await api.client.post(f"/v1/jobs/{job['id']}/resume", json=body)
        assert resumed.status_code == 200, resumed.text
    await tick_at(api, service, 0)  # 12:10:30
    await tick_at(api, service, 0.5)  # 12:11

    async def fired(name: str) -> list[tuple[str, int]]:
        runs = (await api.client.get(f"/v1/jobs/{jobs[name]['id']}/runs")).json()["runs"]
        return sorted((r["scheduled_for"][11:16], r["coalesced"]) for r in runs)

    assert await fired("from-now") == [("12:00", 0), ("12:11", 0)]
    assert await fired("coalesce") == [("12:00", 0), ("12:10", 9), ("12:11", 0)]
    assert await fired("skip") == [("12:00", 0), ("12:11", 0)]


async def test_explain_names_the_bounds_max_runs_and_clock_change(api: Api) -> None:
    """The parts of `explain` the other tests leave out: an interval and its anchor with the
    bounds and max_runs, a one-shot's instant, and what a clock change did (preview's note)."""
    schedule = {
        "every": "PT1H",
        "anchor": "2026-01-15T12:15:00Z",
        "start_at": "2026-01-15T13:00:00Z",
        "end_at": "2026-01-20T00:00:00Z",
    }
    every = await create(api, schedule=schedule, max_runs=5)
    found = await explain(api, every["id"], "2026-01-15T13:00:00Z")
    assert found["occurrence"] == "2026-01-15T13:15:00Z"
    assert found["rule"] == {
        "kind": "every",
        "cron": None,
        "timezone": None,
        "local": None,
        "every": "PT1H",
        "anchor": "2026-01-15T12:15:00Z",
        "at": None,
        "start_at": "2026-01-15T13:00:00Z",
        "end_at": "2026-01-20T00:00:00Z",
    }
    assert (found["max_runs"], found["fired_count"], found["dst"]) == (5, 0, None)

    at = await create(api, schedule={"at": "2026-01-16T08:00:00Z"})
    rule = (await explain(api, at["id"], "2026-01-15T12:00:00Z"))["rule"]
    assert (rule["kind"], rule["at"]) == ("at", "2026-01-16T08:00:00Z")

    fall_back = {"cron": "30 1 * * *", "timezone": "America/New_York", "dst": {"repeat": "second"}}
    cron = await create(api, schedule=fall_back)
    found = await explain(api, cron["id"], "2026-11-01T05:00:00Z")
    assert found["occurrence"] == "2026-11-01T06:30:00Z"
    assert found["rule"]["local"] == "2026-11-01T01:30:00-05:00"
    assert found["dst"]["repeat"] == "second"
    assert found["dst"]["note"].endswith("fires at the second (EDT->EST), as dst repeat: second")
