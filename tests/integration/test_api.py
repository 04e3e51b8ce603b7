"""The HTTP API end to end in one process: app + job service + in-memory store + manual clock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork.api.app import create_app
from tickwork.clock import ManualClock
from tickwork.domain.jobs import JobState
from tickwork.domain.retry import RetryPolicy
from tickwork.errors import StoreError
from tickwork.settings import Settings
from tickwork.store.base import JobQuery
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
MAX_BODY = 4096


@dataclass
class Api:
    client: httpx.AsyncClient  # sends an admin key
    clock: ManualClock
    store: MemoryStore
    transport: httpx.ASGITransport

    def client_with(self, key: str | None) -> httpx.AsyncClient:
        """Another client of the same app, sending `key` (None: no Authorization header)."""
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        return httpx.AsyncClient(
            transport=self.transport, base_url="http://tickwork.test", headers=headers
        )


async def serve(store: MemoryStore, max_body: int = MAX_BODY) -> AsyncIterator[Api]:
    await store.open()
    clock = ManualClock(NOW)
    key = await mint_key(store, clock=clock)
    # No per-key limit: the manual clock stands still, so no bucket would ever refill.
    settings = Settings(max_body_bytes=max_body, api_key_rate=0)
    app = create_app(store=store, clock=clock, settings=settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport,
        base_url="http://tickwork.test",
        headers={"Authorization": f"Bearer {key}"},
    ) as client:
        yield Api(client=client, clock=clock, store=store, transport=transport)
    await store.close()


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


def job_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "nightly report",
        "schedule": {"cron": "0 2 * * *", "timezone": "Europe/Berlin"},
        "target": {
            "type": "webhook",
            "url": "https://example.com/hook",
            "method": "POST",
            "headers": {"X-Team": "data"},
            "body": {"report": "daily", "n": [1, 2]},
        },
    }
    body.update(overrides)
    return body


async def create(api: Api, **overrides: Any) -> dict[str, Any]:
    """Create a job over the API (its tenant first, if one is named that does not exist)."""
    tenant = overrides.get("tenant")
    if isinstance(tenant, str) and await api.store.get_tenant(tenant) is None:
        made = await api.client.post("/v1/tenants", json={"name": tenant})
        assert made.status_code == 201, made.text
    response = await api.client.post("/v1/jobs", json=job_body(**overrides))
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    data = response.json()
    assert set(data) == {"error"}
    assert set(data["error"]) == {"code", "message", "field"}
    assert isinstance(data["error"]["message"], str)
    assert data["error"]["message"]
    error: dict[str, Any] = data["error"]
    return error


# -- creating ---------------------------------------------------------------------------------


async def test_create_cron_job_returns_it_armed(api: Api) -> None:
    response = await api.client.post("/v1/jobs", json=job_body())
    assert response.status_code == 201
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job == {
        "id": job["id"],
        "name": "nightly report",
        "tenant": "default",
        "state": "scheduled",
        "schedule": {
            "cron": "0 2 * * *",
            "timezone": "Europe/Berlin",
            "start_at": None,
            "end_at": None,
            "misfire": "coalesce",
            "misfire_grace": "PT1S",
            "catchup_window": "P1D",
            "jitter": None,
            "window": None,
            "dst": {"gap": "cron", "repeat": "cron"},
        },
        "target": {
            "type": "webhook",
            "url": "https://example.com/hook",
            "method": "POST",
            "headers": {"X-Team": "data"},
            "body": {"report": "daily", "n": [1, 2]},
            "timeout": "PT10S",
            "signed": True,
        },
        "signing": {"source": "inherit", "fingerprints": []},
        "retry": {"max_attempts": 5, "backoff": "PT1S", "max_backoff": "PT5M", "multiplier": 2.0},
        "on_failure": None,
        "overlap": "allow",
        "max_runs": None,
        "priority": 5,
        "fired_count": 0,
        "pause_note": None,
        "paused_at": None,
        "next_run_at": "2026-01-16T01:00:00Z",  # 02:00 in Berlin (CET, +01:00)
        "next_scheduled_for": "2026-01-16T01:00:00Z",  # no jitter or window: the same
        "last_fired_at": None,
        "fence_token": 0,
        "created_at": "2026-01-15T12:00:00Z",
        "updated_at": "2026-01-15T12:00:00Z",
    }
    assert len(job["id"]) == 32


async def test_create_every_job_starts_now_and_echoes_the_canonical_interval(api: Api) -> None:
    job = await create(api, schedule={"every": 90})
    assert job["schedule"]["every"] == "PT1M30S"
    assert job["schedule"]["anchor"] == "2026-01-15T12:00:00Z"
    assert "cron" not in job["schedule"]
    assert "at" not in job["schedule"]
    assert job["next_run_at"] == "2026-01-15T12:00:00Z"


async def test_create_every_job_with_an_anchor(api: Api) -> None:
    schedule = {"every": "PT30S", "anchor": "2026-01-15T12:00:10+00:00"}
    job = await create(api, schedule=schedule)
    assert job["next_run_at"] == "2026-01-15T12:00:10Z"
    assert job["schedule"]["every"] == "PT30S"


async def test_create_one_shot_job(api: Api) -> None:
    job = await create(api, schedule={"at": "2026-12-24T19:00:00+01:00"})
    assert job["next_run_at"] == "2026-12-24T18:00:00Z"
    assert job["schedule"]["at"] == "2026-12-24T18:00:00Z"


async def test_one_shot_in_the_past_is_accepted_and_due_at_once(api: Api) -> None:
    job = await create(api, schedule={"at": "2026-01-15T11:00:00Z"})
    assert job["next_run_at"] == "2026-01-15T11:00:00Z"
    assert job["state"] == "scheduled"


async def test_all_schedule_options_round_trip(api: Api) -> None:
    schedule = {
        "cron": "*/15 9-17 * * MON-FRI",
        "timezone": "America/New_York",
        "start_at": "2026-02-01T00:00:00Z",
        "end_at": "2026-03-01T00:00:00.250Z",
        "misfire": "fire_all",
        "misfire_grace": "PT1M",
        "catchup_window": "PT6H",
        "dst": {"gap": "skip", "repeat": "second"},
    }
    target = {"url": "http://example.com:9/x", "method": "put", "timeout": 2.5}
    job = await create(api, schedule=schedule, target=target, tenant="acme")
    assert job["schedule"] == schedule | {"jitter": None, "window": None}
    assert job["target"] == {
        "type": "webhook",
        "url": "http://example.com:9/x",
        "method": "PUT",
        "headers": {},
        "body": None,
        "timeout": "PT2.5S",
        "signed": True,
    }
    assert job["tenant"] == "acme"
    assert job["next_run_at"] == "2026-02-02T14:00:00Z"  # Monday 09:00 EST


async def test_a_job_as_returned_can_be_sent_back(api: Api) -> None:
    job = await create(api)
    resent = {k: job[k] for k in ("name", "tenant", "schedule", "target", "retry")}
    again = (await api.client.post("/v1/jobs", json=resent)).json()
    assert {k: again[k] for k in resent} == resent


# -- reading ----------------------------------------------------------------------------------


async def test_get_returns_the_job(api: Api) -> None:
    job = await create(api)
    response = await api.client.get(f"/v1/jobs/{job['id']}")
    assert response.status_code == 200
    assert response.json() == job


async def test_list_pages_through_jobs_in_creation_order(api: Api) -> None:
    ids = [(await create(api, name=f"job-{n}"))["id"] for n in range(5)]
    seen: list[str] = []
    after: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"after": after} if after else {})
        page = (await api.client.get("/v1/jobs", params=params)).json()
        seen += [j["id"] for j in page["jobs"]]
        pages += 1
        after = page["next_after"]
        if after is None:
            break
    assert seen == ids
    assert pages == 3


async def test_list_filters(api: Api) -> None:
    a = await create(api, name="billing-a", tenant="acme")
    b = await create(api, name="billing-b")
    c = await create(api, name="reports")
    await api.client.post(f"/v1/jobs/{b['id']}/pause")

    async def ids(**params: Any) -> list[str]:
        page = (await api.client.get("/v1/jobs", params=params)).json()
        return [j["id"] for j in page["jobs"]]

    assert await ids(name_prefix="billing") == [a["id"], b["id"]]
    assert await ids(tenant="acme") == [a["id"]]
    assert await ids(state="paused") == [b["id"]]
    assert await ids(state="scheduled") == [a["id"], c["id"]]
    assert await ids(limit=1000) == [a["id"], b["id"], c["id"]]


async def test_full_page_at_the_end_has_no_next(api: Api) -> None:
    for n in range(2):
        await create(api, name=f"job-{n}")
    page = (await api.client.get("/v1/jobs", params={"limit": 2})).json()
    assert (len(page["jobs"]), page["next_after"]) == (2, None)


# -- changing ---------------------------------------------------------------------------------


async def test_patch_changes_only_the_given_fields(api: Api) -> None:
    job = await create(api)
    api.clock.advance(timedelta(minutes=5))
    response = await api.client.patch(f"/v1/jobs/{job['id']}", json={"name": "renamed"})
    assert response.status_code == 200
    patched = response.json()
    assert patched["name"] == "renamed"
    assert patched["updated_at"] == "2026-01-15T12:05:00Z"
    unchanged = ("schedule", "target", "next_run_at", "created_at", "tenant", "state")
    assert {k: patched[k] for k in unchanged} == {k: job[k] for k in unchanged}


async def test_patch_schedule_recomputes_next_run_from_now(api: Api) -> None:
    job = await create(api)
    api.clock.advance(timedelta(minutes=7))
    patch = {"schedule": {"every": "PT1H", "anchor": "2026-01-15T00:00:00Z"}}
    patched = (await api.client.patch(f"/v1/jobs/{job['id']}", json=patch)).json()
    assert patched["next_run_at"] == "2026-01-15T13:00:00Z"
    assert patched["schedule"]["every"] == "PT1H"


async def test_patch_is_validated_like_create(api: Api) -> None:
    job = await create(api)
    bad = await api.client.patch(f"/v1/jobs/{job['id']}", json={"target": {"url": "ftp://x"}})
    assert error_of(bad, 422)["field"] == "target.url"
    unknown = await api.client.patch(f"/v1/jobs/{job['id']}", json={"state": "paused"})
    assert error_of(unknown, 422)["code"] == "unknown_field"
    assert (await api.client.get(f"/v1/jobs/{job['id']}")).json() == job


# -- retry policy -----------------------------------------------------------------------------

DEFAULT_RETRY = {"max_attempts": 5, "backoff": "PT1S", "max_backoff": "PT5M", "multiplier": 2.0}


async def test_retry_policy_round_trips_through_create_get_and_patch(api: Api) -> None:
    retry = {"max_attempts": 3, "backoff": 0.5, "max_backoff": "PT1M", "multiplier": 3}
    job = await create(api, retry=retry)
    canonical = {"max_attempts": 3, "backoff": "PT0.5S", "max_backoff": "PT1M", "multiplier": 3.0}
    assert job["retry"] == canonical
    assert (await api.client.get(f"/v1/jobs/{job['id']}")).json()["retry"] == canonical
    stored = await api.store.get_job(job["id"])
    assert stored.retry == RetryPolicy(
        max_attempts=3, base_delay_ms=500, max_delay_ms=60_000, multiplier=3.0
    )

    renamed = await api.client.patch(f"/v1/jobs/{job['id']}", json={"name": "renamed"})
    assert renamed.json()["retry"] == canonical  # absent: unchanged
    replaced = await api.client.patch(f"/v1/jobs/{job['id']}", json={"retry": {"multiplier": 1}})
    assert replaced.json()["retry"] == DEFAULT_RETRY | {"multiplier": 1.0}  # given: whole


async def test_retry_defaults_field_by_field(api: Api) -> None:
    assert (await create(api))["retry"] == DEFAULT_RETRY
    assert (await create(api, retry={}))["retry"] == DEFAULT_RETRY
    job = await create(api, retry={"max_attempts": 1})
    assert job["retry"] == DEFAULT_RETRY | {"max_attempts": 1}


@pytest.mark.parametrize(
    ("backoff", "max_backoff"), [("PT0S", 0), (0, "PT0S"), (0.0, "P0D"), ("PT0S", "PT1S")]
)
async def test_zero_backoff_means_retry_at_once(
    api: Api, backoff: str | float, max_backoff: str | float
) -> None:
    job = await create(api, retry={"backoff": backoff, "max_backoff": max_backoff})
    assert job["retry"]["backoff"] == "PT0S"
    assert (await api.store.get_job(job["id"])).retry.base_delay_ms == 0


@pytest.mark.parametrize(
    ("retry", "field", "needle"),
    [
        ({"max_attempts": 0}, "retry.max_attempts", "greater than or equal to 1"),
        ({"max_attempts": 101}, "retry.max_attempts", "less than or equal to 100"),
        ({"max_attempts": "3"}, "retry.max_attempts", "integer"),
        ({"max_attempts": 2.5}, "retry.max_attempts", "integer"),
        ({"max_attempts": True}, "retry.max_attempts", "integer"),
        ({"max_attempts": None}, "retry.max_attempts", "integer"),
        ({"backoff": -1}, "retry.backoff", "cannot be negative"),
        ({"backoff": "-PT1S"}, "retry.backoff", "positive"),
        ({"backoff": "soon"}, "retry.backoff", "ISO-8601"),
        ({"backoff": "P1M"}, "retry.backoff", "months"),
        ({"backoff": True}, "retry.backoff", "duration"),
        ({"backoff": "PT10M"}, "retry.max_backoff", "at least backoff (PT10M)"),
        ({"max_backoff": "PT0.5S"}, "retry.max_backoff", "max_backoff (PT0.5S) must be"),
        ({"max_backoff": "P400D"}, "retry.max_backoff", "366 days"),
        ({"multiplier": 0.5}, "retry.multiplier", "greater than or equal to 1"),
        ({"multiplier": 11}, "retry.multiplier", "less than or equal to 10"),
        ({"multiplier": "2"}, "retry.multiplier", "number"),
        ({"multiplier": False}, "retry.multiplier", "number"),
    ],
)
async def test_bad_retry_fields_are_named(
    api: Api, retry: dict[str, Any], field: str, needle: str
) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=job_body(retry=retry)), 422)
    assert error["field"] == field, error
    assert needle in error["message"], error
    job = await create(api)
    patch = await api.client.patch(f"/v1/jobs/{job['id']}", json={"retry": retry})
    assert error_of(patch, 422)["field"] == field


@pytest.mark.parametrize("number", ["1e999", "NaN", "Infinity"])
async def test_multiplier_must_be_finite(api: Api, number: str) -> None:
    raw = json.dumps(job_body()).removesuffix("}") + f', "retry": {{"multiplier": {number}}}}}'
    response = await api.client.post(
        "/v1/jobs", content=raw.encode(), headers={"content-type": "application/json"}
    )
    error = error_of(response, 422)
    assert (error["code"], error["field"]) == ("invalid_number", "retry.multiplier")
    assert "send a finite number" in error["message"]


@pytest.mark.parametrize(
    ("retry", "field", "suggestion"),
    [
        ({"max_retries": 3}, "retry.max_retries", "'max_attempts'"),
        ({"max_backof": "PT1S"}, "retry.max_backof", "'max_backoff'"),
        ({"jitter": True}, "retry.jitter", None),
    ],
)
async def test_unknown_retry_fields_are_named(
    api: Api, retry: dict[str, Any], field: str, suggestion: str | None
) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=job_body(retry=retry)), 422)
    assert (error["code"], error["field"]) == ("unknown_field", field)
    if suggestion:
        assert f"did you mean {suggestion}?" in error["message"]
    assert "max_attempts, backoff, max_backoff, multiplier" in error["message"]


async def test_retry_that_is_not_an_object_is_named(api: Api) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=job_body(retry=5)), 422)
    assert error["field"] == "retry"


async def test_pause_and_resume_skip_what_fell_while_paused(api: Api) -> None:
    job = await create(api, schedule={"cron": "0 * * * *"})
    assert job["next_run_at"] == "2026-01-15T13:00:00Z"
    paused = (await api.client.post(f"/v1/jobs/{job['id']}/pause")).json()
    assert (paused["state"], paused["next_run_at"]) == ("paused", "2026-01-15T13:00:00Z")
    api.clock.advance(timedelta(hours=5, minutes=30))
    resumed = (await api.client.post(f"/v1/jobs/{job['id']}/resume")).json()
    assert (resumed["state"], resumed["next_run_at"]) == ("scheduled", "2026-01-15T18:00:00Z")


async def test_pausing_a_completed_job_conflicts(api: Api) -> None:
    job = await create(api, schedule={"at": "2026-01-16T00:00:00Z"})
    # complete it the way the scheduler does: through the store
    stored = await api.store.get_job(job["id"])
    from dataclasses import replace

    from tickwork.domain.jobs import JobState

    await api.store.update_job(replace(stored, state=JobState.COMPLETED, next_run_at=None))
    error = error_of(await api.client.post(f"/v1/jobs/{job['id']}/pause"), 409)
    assert error["code"] == "conflict"
    assert error_of(await api.client.post(f"/v1/jobs/{job['id']}/resume"), 409)


async def test_trigger_returns_a_pending_manual_run(api: Api) -> None:
    job = await create(api)
    api.clock.advance(timedelta(seconds=3))
    response = await api.client.post(f"/v1/jobs/{job['id']}/trigger")
    assert response.status_code == 202
    run = response.json()
    assert run == {
        "id": run["id"],
        "job_id": job["id"],
        "key": run["key"],
        "origin": "manual",
        "scheduled_for": "2026-01-15T12:00:03Z",
        "state": "pending",  # waiting for its first attempt
        "status": "pending",
        "attempt": run["attempt"],
        "fence_token": run["fence_token"],
        "worker": None,
        "lease_until": "2026-01-15T12:00:03Z",  # leasable at once
        "coalesced": 0,
        "created_at": "2026-01-15T12:00:03Z",
        "started_at": None,
        "finished_at": None,
        "http_status": None,
        "error": None,
        "dead_lettered_at": None,
        "last_error": None,
        "claim_epoch": None,  # a manual run is not claimed by a scheduler
        "planned_for": None,
        "throttled_ms": None,  # nor held back by the fire ceiling
    }
    assert run["key"].startswith(job["id"])


async def test_a_run_shows_running_then_its_lost_attempt_when_its_worker_dies(api: Api) -> None:
    job = await create(api)
    run_id = (await api.client.post(f"/v1/jobs/{job['id']}/trigger")).json()["id"]
    api.clock.advance(timedelta(seconds=1))
    start = api.clock.now()
    [fire] = await api.store.lease_runs(
        now=start, owner="host-a:41", lease_until=start + timedelta(seconds=5), limit=1
    )

    def shown(run: dict[str, Any]) -> tuple[Any, ...]:
        return run["state"], run["status"], run["worker"], run["started_at"], run["lease_until"]

    running = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert shown(running) == (
        "running",
        "pending",
        "host-a:41",
        "2026-01-15T12:00:01Z",
        "2026-01-15T12:00:06Z",
    )
    assert running["attempts"] == []
    [listed] = (await api.client.get(f"/v1/jobs/{job['id']}/runs")).json()["runs"]
    assert shown(listed) == shown(running)

    # The worker dies: nothing renews its lease. Once it has ended, the attempt shows as lost
    # although no other worker has leased the run yet.
    api.clock.advance(timedelta(seconds=5))
    expired = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert shown(expired)[:3] == ("retrying", "pending", None)
    lost = {
        "attempt": 1,
        "fence_token": fire.fence_token,
        "worker": "host-a:41",
        "started_at": "2026-01-15T12:00:01Z",
        "finished_at": "2026-01-15T12:00:06Z",
        "status": "lost",
        "http_status": None,
        "error": "lease expired: worker stopped heartbeating",
    }
    assert expired["attempts"] == [lost]

    # Another worker leases it: the lost attempt is now in the history, once, and the new
    # attempt is the run's.
    api.clock.advance(timedelta(seconds=1))
    [again] = await api.store.lease_runs(
        now=api.clock.now(),
        owner="host-b:7",
        lease_until=api.clock.now() + timedelta(seconds=5),
        limit=1,
    )
    rerun = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert shown(rerun)[:4] == ("running", "pending", "host-b:7", "2026-01-15T12:00:07Z")
    assert (rerun["attempt"], rerun["fence_token"], rerun["attempts"]) == (
        2,
        again.fence_token,
        [lost],
    )


async def test_runs_are_listed_newest_first_with_pagination(api: Api) -> None:
    job = await create(api)
    made = []
    for _ in range(3):
        api.clock.advance(timedelta(seconds=1))
        made.append((await api.client.post(f"/v1/jobs/{job['id']}/trigger")).json()["id"])
    first = (await api.client.get(f"/v1/jobs/{job['id']}/runs", params={"limit": 2})).json()
    assert [r["id"] for r in first["runs"]] == made[::-1][:2]
    assert first["next_before"] == made[1]
    params = {"limit": 2, "before": first["next_before"]}
    rest = (await api.client.get(f"/v1/jobs/{job['id']}/runs", params=params)).json()
    assert ([r["id"] for r in rest["runs"]], rest["next_before"]) == ([made[0]], None)


async def test_delete_then_not_found(api: Api) -> None:
    job = await create(api)
    response = await api.client.delete(f"/v1/jobs/{job['id']}")
    assert (response.status_code, response.content) == (204, b"")
    for method, path in [
        ("GET", ""),
        ("DELETE", ""),
        ("PATCH", ""),
        ("POST", "/pause"),
        ("POST", "/resume"),
        ("POST", "/trigger"),
        ("GET", "/runs"),
    ]:
        body = {"name": "x"} if method == "PATCH" else None
        missing = await api.client.request(method, f"/v1/jobs/{job['id']}{path}", json=body)
        error = error_of(missing, 404)
        assert error["code"] == "not_found"
        assert job["id"] in error["message"]


# -- preview, health, metrics, docs -----------------------------------------------------------


async def test_preview_notes_the_dst_shift(api: Api) -> None:
    params: dict[str, Any] = {
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "after": "2026-03-28T00:00:00Z",
        "count": 3,
    }
    response = await api.client.get("/v1/preview", params=params)
    assert response.status_code == 200
    fires = response.json()["fires"]
    assert [f["utc"] for f in fires] == [
        "2026-03-28T01:30:00Z",
        "2026-03-29T01:00:00Z",  # 02:30 does not exist that night: fires at the jump
        "2026-03-30T00:30:00Z",
    ]
    assert [f["local"] for f in fires] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    assert fires[0]["note"] is None
    assert fires[1]["note"]


async def test_preview_defaults_to_ten_fires_after_now(api: Api) -> None:
    fires = (await api.client.get("/v1/preview", params={"cron": "0 * * * *"})).json()["fires"]
    assert len(fires) == 10
    assert fires[0]["utc"] == "2026-01-15T13:00:00Z"
    assert fires[0]["local"] == "2026-01-15T13:00:00+00:00"


async def test_preview_of_an_interval_within_its_bounds(api: Api) -> None:
    params: dict[str, Any] = {
        "every": "PT30M",
        "start_at": "2026-01-15T13:00:00Z",
        "end_at": "2026-01-15T14:00:00Z",
    }
    answer = (await api.client.get("/v1/preview", params=params)).json()
    assert [f["utc"] for f in answer["fires"]] == [  # anchored at start_at, as a job would be
        "2026-01-15T13:00:00Z",
        "2026-01-15T13:30:00Z",
        "2026-01-15T14:00:00Z",
    ]
    assert answer["fires"][0] == {
        "utc": "2026-01-15T13:00:00Z",
        "local": "2026-01-15T13:00:00+00:00",
        "note": None,
    }
    assert answer["ends"]["reason"] == "end_at"
    assert "2026-01-15T14:00:00Z" in answer["ends"]["message"]


async def test_preview_of_an_interval_with_an_anchor_and_max_runs(api: Api) -> None:
    params = {"every": "90", "anchor": "2026-01-15T11:00:00Z", "max_runs": 2, "count": 5}
    answer = (await api.client.get("/v1/preview", params=params)).json()
    assert [f["utc"] for f in answer["fires"]] == ["2026-01-15T12:00:00Z", "2026-01-15T12:01:30Z"]
    assert answer["ends"]["reason"] == "max_runs"


async def test_preview_of_a_one_shot_and_of_an_open_cron(api: Api) -> None:
    one = (await api.client.get("/v1/preview", params={"at": "2026-02-01T08:00:00+01:00"})).json()
    assert one["fires"] == [
        {"utc": "2026-02-01T07:00:00Z", "local": "2026-02-01T07:00:00+00:00", "note": None}
    ]
    assert one["ends"]["reason"] == "one_shot"
    cron = (await api.client.get("/v1/preview", params={"cron": "0 * * * *"})).json()
    assert cron["ends"] is None


@pytest.mark.parametrize(
    ("params", "field", "code"),
    [
        ({}, "schedule", "schedule_kind"),
        ({"cron": "* * * * *", "every": "PT1M"}, "schedule", "schedule_kind"),
        ({"every": "PT1M", "at": "2026-02-01T00:00:00Z"}, "schedule", "schedule_kind"),
        ({"every": "PT1M", "timezone": "Europe/Berlin"}, "schedule.timezone", "schedule_kind"),
        (
            {"cron": "* * * * *", "anchor": "2026-02-01T00:00:00Z"},
            "schedule.anchor",
            "schedule_kind",
        ),
        ({"every": "soon"}, "schedule.every", "invalid_duration"),
        ({"every": "P1M"}, "schedule.every", "invalid_duration"),
        ({"every": "PT1M", "anchor": "2026-02-01T00:00:00"}, "anchor", "invalid"),
        ({"at": "tomorrow"}, "at", "invalid"),
        ({"at": "0.5"}, "at", "invalid"),  # not read as seconds since 1970
        (
            {"every": "PT1M", "start_at": "2026-02-02T00:00:00Z", "end_at": "2026-02-01T00:00:00Z"},
            "schedule.end_at",
            "invalid_window",
        ),
        (
            {"at": "2026-02-01T00:00:00Z", "end_at": "2026-01-01T00:00:00Z"},
            "schedule.at",
            "never_fires",
        ),
        ({"every": "PT1M", "max_runs": 0}, "max_runs", "invalid"),
        ({"every": "PT1M", "max_runs": "many"}, "max_runs", "invalid"),
    ],
)
async def test_preview_mistakes_are_named(
    api: Api, params: dict[str, Any], field: str, code: str
) -> None:
    error = error_of(await api.client.get("/v1/preview", params=params), 422)
    assert (error["field"], error["code"]) == (field, code)


@pytest.mark.parametrize("bad", [0, 1_000_000_001, "5", True, 2.5])
async def test_max_runs_is_a_whole_count_as_the_schema_says(api: Api, bad: Any) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=job_body(max_runs=bad)), 422)
    assert (error["field"], error["code"]) == ("max_runs", "invalid")
    assert (await create(api, max_runs=5.0))["max_runs"] == 5


async def test_job_preview_starts_at_next_run_at_and_counts_max_runs(api: Api) -> None:
    schedule = {"every": "PT1H", "anchor": "2026-01-15T12:30:00Z"}
    job = await create(api, schedule=schedule, max_runs=3)
    answer = (await api.client.get(f"/v1/jobs/{job['id']}/preview")).json()
    assert answer["job_id"] == job["id"]
    assert answer["state"] == "scheduled"
    assert [f["utc"] for f in answer["fires"]] == [
        "2026-01-15T12:30:00Z",
        "2026-01-15T13:30:00Z",
        "2026-01-15T14:30:00Z",
    ]
    assert answer["ends"]["reason"] == "max_runs"
    later = await api.client.get(
        f"/v1/jobs/{job['id']}/preview", params={"after": "2026-01-15T13:00:00Z", "count": 1}
    )
    assert [f["utc"] for f in later.json()["fires"]] == ["2026-01-15T13:30:00Z"]
    assert later.json()["ends"] is None  # one more follows


async def test_job_preview_of_a_cron_job_keeps_its_zone_and_notes(api: Api) -> None:
    api.clock.set(datetime(2026, 3, 28, tzinfo=UTC))
    job = await create(api, schedule={"cron": "30 2 * * *", "timezone": "Europe/Berlin"})
    fires = (await api.client.get(f"/v1/jobs/{job['id']}/preview?count=2")).json()["fires"]
    assert [f["local"] for f in fires] == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
    ]
    assert fires[0]["note"] is None
    assert "does not exist" in fires[1]["note"]


async def test_job_preview_of_a_paused_job_is_what_resuming_now_fires(api: Api) -> None:
    job = await create(api, schedule={"every": "PT10M", "anchor": "2026-01-15T12:00:00Z"})
    paused = await api.client.post(f"/v1/jobs/{job['id']}/pause")
    assert paused.status_code == 200
    api.clock.advance(timedelta(minutes=25))
    answer = (await api.client.get(f"/v1/jobs/{job['id']}/preview?count=2")).json()
    assert answer["state"] == "paused"
    assert [f["utc"] for f in answer["fires"]] == ["2026-01-15T12:30:00Z", "2026-01-15T12:40:00Z"]
    resumed = (await api.client.post(f"/v1/jobs/{job['id']}/resume")).json()
    assert resumed["next_run_at"] == answer["fires"][0]["utc"]


async def test_job_preview_of_a_completed_job_is_empty_with_the_reason(api: Api) -> None:
    job = await create(api, schedule={"at": "2026-01-15T12:00:00Z"})
    stored = await api.store.get_job(job["id"])  # as the claim of its one fire leaves it
    await api.store.update_job(replace(stored, state=JobState.COMPLETED, next_run_at=None))
    answer = (await api.client.get(f"/v1/jobs/{job['id']}/preview")).json()
    assert (answer["state"], answer["fires"]) == ("completed", [])
    assert answer["ends"]["reason"] == "one_shot"
    assert answer["ends"]["message"].startswith("the job is completed")


@pytest.mark.parametrize(
    ("params", "field"),
    [({"count": 0}, "count"), ({"count": 1001}, "count"), ({"after": "soon"}, "after")],
)
async def test_job_preview_bad_query_is_named(api: Api, params: dict[str, Any], field: str) -> None:
    job = await create(api)
    error = error_of(await api.client.get(f"/v1/jobs/{job['id']}/preview", params=params), 422)
    assert error["field"] == field


async def test_job_preview_of_a_missing_job_is_404(api: Api) -> None:
    error = error_of(await api.client.get(f"/v1/jobs/{'e' * 32}/preview"), 404)
    assert error["code"] == "not_found"


async def test_healthz(api: Api) -> None:
    response = await api.client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


class BrokenStore(MemoryStore):
    async def ping(self) -> None:
        raise StoreError("database is locked")

    async def list_jobs(self, query: JobQuery) -> list[Any]:
        raise RuntimeError("a bug, not bad input")


@pytest.fixture
async def broken() -> AsyncIterator[Api]:
    async for served in serve(BrokenStore()):
        yield served


async def test_healthz_is_503_when_the_store_fails(broken: Api) -> None:
    error = error_of(await broken.client.get("/healthz"), 503)
    assert error["code"] == "store_unavailable"
    assert "database is locked" in error["message"]


async def test_unexpected_exception_is_a_500_in_the_error_shape(broken: Api) -> None:
    error = error_of(await broken.client.get("/v1/jobs"), 500)
    assert error == {
        "code": "internal_error",
        "message": "internal error; the server log has the details",
        "field": None,
    }


async def test_metrics_exposition(api: Api) -> None:
    response = await api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    for name in ("tickwork_fires_total", "tickwork_fire_lateness_seconds", "tickwork_runs_total"):
        assert name in response.text


async def test_openapi_and_docs(api: Api) -> None:
    spec = (await api.client.get("/openapi.json")).json()
    assert spec["openapi"].startswith("3.")
    for path in (
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/pause",
        "/v1/jobs/{job_id}/resume",
        "/v1/jobs/{job_id}/trigger",
        "/v1/jobs/{job_id}/runs",
        "/v1/runs/{run_id}",
        "/v1/dead-letters",
        "/v1/dead-letters/redrive",
        "/v1/dead-letters/{run_id}",
        "/v1/dead-letters/{run_id}/redrive",
        "/v1/preview",
        "/healthz",
    ):
        assert path in spec["paths"], path
    assert "ErrorOut" in spec["components"]["schemas"]
    docs = await api.client.get("/docs")
    assert docs.status_code == 200
    assert "swagger" in docs.text.lower()


async def test_the_schema_states_what_the_api_enforces(api: Api) -> None:
    import jsonschema_rs

    spec = (await api.client.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]

    def valid(name: str, value: Any) -> bool:
        schema = {**schemas[name], "components": spec["components"]}  # for its $refs
        return bool(jsonschema_rs.validator_for(schema).is_valid(value))

    at = "2026-12-24T18:00:00Z"
    assert valid("ScheduleIn", {"cron": "0 2 * * *", "timezone": "Europe/Berlin"})
    assert valid("ScheduleIn", {"every": 30, "at": None, "anchor": at})
    for both in [{"cron": "* * * * *", "every": 30}, {"every": 30, "at": at}, {"start_at": at}]:
        assert not valid("ScheduleIn", both), both
    assert not valid("ScheduleIn", {"cron": ""})
    assert not valid("ScheduleIn", {"every": 30, "timezone": "UTC"})
    assert not valid("ScheduleIn", {"cron": "* * * * *", "timezone": "Mars/Olympus"})
    secret = "whsec_" + "A" * 43 + "="
    assert valid("TenantSecretsIn", {"secrets": [secret]})
    assert not valid("TenantSecretsIn", {"secrets": []})
    assert not valid("TenantSecretsIn", {"secrets": [secret] * 3})
    assert not valid("TenantSecretsIn", {"secrets": ["whsec_c2hvcnQ="]})
    assert not valid("TargetIn", {"type": "task", "name": "t", "url": "https://example.com"})
    assert not valid("TargetIn", {"url": "ftp://example.com"})
    preview = {p["name"]: p["schema"] for p in spec["paths"]["/v1/preview"]["get"]["parameters"]}
    assert "Europe/Berlin" in preview["timezone"]["enum"]
    assert preview["cron"]["anyOf"][0]["minLength"] == 1
    jobs = {p["name"]: p["schema"] for p in spec["paths"]["/v1/jobs"]["get"]["parameters"]}
    assert jobs["after"]["pattern"] == "^[0-9a-f]{32}$"


# -- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "field", "needle"),
    [
        ({"cron": "0 2 * * FOO"}, "schedule.cron", "FOO"),
        ({"cron": "61 * * * *"}, "schedule.cron", "61"),
        ({"cron": "0 2 * *"}, "schedule.cron", "field"),
        ({"cron": "0 0 30 2 *"}, "schedule.cron", "February"),
        ({"cron": "0 2 * * *", "timezone": "Mars/Olympus_Mons"}, "schedule.timezone", "Mars"),
        ({"cron": "0 2 * * *", "timezone": "europe/berln"}, "schedule.timezone", "Europe/Berlin"),
        ({"every": "fast"}, "schedule.every", "ISO-8601"),
        ({"every": -5}, "schedule.every", "positive"),
        ({"every": True}, "schedule.every", "duration"),
        ({"every": "P1M"}, "schedule.every", "months"),
        ({"at": "2026-12-24T18:00:00"}, "schedule.at", "add Z or an offset"),
        ({"at": "tomorrow"}, "schedule.at", ""),
        ({"every": 30, "anchor": "2026-01-01T00:00:00"}, "schedule.anchor", "add Z"),
        ({"cron": "* * * * *", "end_at": "2026-01-01T00:00:00Z"}, "schedule.end_at", "never"),
        ({"cron": "* * * * *", "misfire": "sometimes"}, "schedule.misfire", "coalesce"),
        ({"cron": "* * * * *", "misfire_grace": "soon"}, "schedule.misfire_grace", ""),
        ({"every": "PT1S", "timezone": "UTC"}, "schedule", "timezone"),
        ({"cron": "* * * * *", "every": "PT1S"}, "schedule", "exactly one"),
        ({}, "schedule", "exactly one"),
    ],
)
async def test_bad_schedules_are_named(
    api: Api, schedule: dict[str, Any], field: str, needle: str
) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=job_body(schedule=schedule)), 422)
    assert error["field"] == field, error
    assert needle in error["message"], error


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/x",
        "javascript:alert(1)",
        "http://",
        "example.com/hook",
        "",
    ],
)
async def test_non_http_urls_are_refused(api: Api, url: str) -> None:
    body = job_body(target={"url": url})
    error = error_of(await api.client.post("/v1/jobs", json=body), 422)
    assert error["field"] == "target.url"


@pytest.mark.parametrize(
    ("target", "field"),
    [
        ({"url": "https://x.test", "method": "TRACE"}, "target.method"),
        ({"url": "https://x.test", "timeout": "PT6M"}, "target.timeout"),
        ({"url": "https://x.test", "headers": {"Bad Name": "x"}}, "target.headers"),
        ({"url": "https://x.test", "headers": {"X-A": "a\r\nInjected: 1"}}, "target.headers"),
        ({"url": "https://x.test", "headers": {"X-A": 5}}, "target.headers.X-A"),
        ({"url": "https://x.test", "type": "email"}, "target.type"),
        ({"method": "POST"}, "target.url"),
    ],
)
async def test_bad_targets_are_named(api: Api, target: dict[str, Any], field: str) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=job_body(target=target)), 422)
    assert error["field"] == field, error


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (job_body(colour="red"), "colour"),
        (job_body(schedule={"cron": "* * * * *", "tz": "UTC"}), "schedule.tz"),
        (job_body(target={"url": "https://x.test", "verb": "GET"}), "target.verb"),
    ],
)
async def test_unknown_fields_are_named(api: Api, body: dict[str, Any], field: str) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=body), 422)
    assert (error["code"], error["field"]) == ("unknown_field", field)
    assert repr(field.split(".")[-1]) in error["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({k: v for k, v in job_body().items() if k != "name"}, "name"),
        (job_body(name=""), "name"),
        (job_body(name="x" * 201), "name"),
        (job_body(tenant=""), "tenant"),
        (job_body(name=5), "name"),
    ],
)
async def test_bad_names_are_named(api: Api, body: dict[str, Any], field: str) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=body), 422)
    assert error["field"] == field


async def test_body_over_the_limit_is_413(api: Api) -> None:
    big = job_body(target={"url": "https://x.test", "body": "x" * MAX_BODY})
    error = error_of(await api.client.post("/v1/jobs", json=big), 413)
    assert error["code"] == "body_too_large"
    assert str(MAX_BODY) in error["message"]


async def test_streamed_body_over_the_limit_is_413(api: Api) -> None:
    async def chunks() -> Any:
        yield b'{"name": "'
        for _ in range(MAX_BODY // 512 + 1):
            yield b"x" * 512
        yield b'"}'

    response = await api.client.post(
        "/v1/jobs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert error_of(response, 413)["code"] == "body_too_large"


@pytest.mark.parametrize(
    "raw", [b"{", b'{"name": "x",}', b"not json", b"\xff\xfe", b'{"name": "x"} trailing']
)
async def test_malformed_json_is_400(api: Api, raw: bytes) -> None:
    response = await api.client.post(
        "/v1/jobs", content=raw, headers={"content-type": "application/json"}
    )
    error = error_of(response, 400)
    assert error["code"] == "malformed_json"
    assert "not valid JSON" in error["message"]


async def test_body_that_is_not_an_object_is_422(api: Api) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=[1, 2]), 422)
    assert error["field"] is None


async def test_missing_body_is_422(api: Api) -> None:
    error = error_of(await api.client.post("/v1/jobs"), 422)
    assert error["code"] == "missing"


async def test_form_encoded_body_is_415(api: Api) -> None:
    response = await api.client.post(
        "/v1/jobs", content=b"name=x", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert error_of(response, 415)["code"] == "unsupported_media_type"


async def test_unknown_route_and_wrong_method(api: Api) -> None:
    error = error_of(await api.client.get("/v2/nothing"), 404)
    assert error["code"] == "not_found"
    response = await api.client.put("/v1/jobs")
    error = error_of(response, 405)
    assert error["code"] == "method_not_allowed"
    assert "GET" in response.headers["allow"]


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
async def test_redrive_all_is_not_taken_for_a_run_id(api: Api, method: str) -> None:
    # DELETE /v1/dead-letters/{run_id} used to claim "redrive" as a run id: a 422 about an
    # integer instead of the 405 naming the method that works
    response = await api.client.request(method, "/v1/dead-letters/redrive")
    error = error_of(response, 405)
    assert error["code"] == "method_not_allowed"
    assert response.headers["allow"] == "POST"
    assert (await api.client.post("/v1/dead-letters/redrive")).status_code == 202


async def test_dead_letter_run_ids_are_still_checked(api: Api) -> None:
    for method, path in [
        ("DELETE", "/v1/dead-letters/abc"),
        ("POST", "/v1/dead-letters/0/redrive"),
    ]:
        error = error_of(await api.client.request(method, path), 422)
        assert error["field"] == "run_id"
    response = await api.client.delete("/v1/dead-letters/12")
    assert error_of(response, 404)["code"] == "not_dead_lettered"


@pytest.mark.parametrize(
    ("path", "params", "field"),
    [
        ("/v1/jobs", {"limit": 0}, "limit"),
        ("/v1/jobs", {"limit": 1001}, "limit"),
        ("/v1/jobs", {"limit": "many"}, "limit"),
        ("/v1/jobs", {"state": "sleeping"}, "state"),
        ("/v1/preview", {}, "schedule"),
        ("/v1/preview", {"cron": "0 0 30 2 *"}, "schedule.cron"),
        ("/v1/preview", {"cron": "* * * * *", "timezone": "Nowhere"}, "schedule.timezone"),
        # a file of the zone database, but no zone name (the schema's enum lists the names)
        (
            "/v1/preview",
            {"cron": "* * * * *", "timezone": "posix/Europe/Berlin"},
            "schedule.timezone",
        ),
        ("/v1/preview", {"cron": ""}, "cron"),
        ("/v1/preview", {"cron": "* * * * *", "count": 0}, "count"),
        ("/v1/preview", {"cron": "* * * * *", "count": 1001}, "count"),
        ("/v1/preview", {"cron": "* * * * *", "after": "2026-01-01T00:00:00"}, "after"),
        ("/v1/preview", {"cron": "* * * * *", "after": "yesterday"}, "after"),
    ],
)
async def test_bad_query_parameters_are_named(
    api: Api, path: str, params: dict[str, Any], field: str
) -> None:
    error = error_of(await api.client.get(path, params=params), 422)
    assert error["field"] == field


async def test_bad_runs_paging_is_named(api: Api) -> None:
    job = await create(api)
    response = await api.client.get(f"/v1/jobs/{job['id']}/runs", params={"before": -1})
    assert error_of(response, 422)["field"] == "before"


@pytest.fixture
async def roomy() -> AsyncIterator[Api]:
    """The API with the default body limit (256 KiB), for bodies that test other limits."""
    async for served in serve(MemoryStore(), max_body=Settings().max_body_bytes):
        yield served


@pytest.mark.parametrize(
    ("headers", "complaint"),
    [
        ({f"x-h{n}": "1" for n in range(101)}, "at most 100 headers"),
        ({"x-" + "a" * 255: "1"}, "longer than 256 characters"),
        ({"x-a": "v" * 8193}, "longer than 8192 characters"),
        ({"X-A\n": "1"}, "not a valid HTTP token"),  # a trailing newline once slipped through
        ({"X-A": "1\r\nX-B: 2"}, "control character"),
    ],
)
async def test_target_headers_have_limits_that_name_them(
    roomy: Api, headers: dict[str, str], complaint: str
) -> None:
    for body in (
        job_body(target={"url": "https://example.com", "headers": headers}),
        job_body(on_failure={"url": "https://example.com", "headers": headers}),
    ):
        error = error_of(await roomy.client.post("/v1/jobs", json=body), 422)
        assert error["field"] in ("target.headers", "on_failure.headers")
        assert complaint in error["message"]


async def test_headers_at_the_limits_are_accepted(roomy: Api) -> None:
    headers = {f"x-h{n}": "1" for n in range(99)} | {"x-" + "a" * 254: "v" * 8192}
    body = job_body(target={"url": "https://example.com", "headers": headers})
    assert (await roomy.client.post("/v1/jobs", json=body)).status_code == 201


# -- no 500 for any input ---------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
schedule_fields = st.sampled_from(
    ["cron", "timezone", "every", "anchor", "at", "start_at", "end_at", "misfire", "misfire_grace"]
)
target_fields = st.sampled_from(["type", "url", "method", "headers", "body", "timeout"])
retry_fields = st.sampled_from(["max_attempts", "backoff", "max_backoff", "multiplier"])
tricky_text = st.sampled_from(
    ["", " ", "0 0 30 2 *", "*/0 * * * *", "PT0S", "P1Y", "9" * 40, "2026-02-30T00:00:00Z",
     "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "2199-12-31T23:59:59Z",
     "http://", "Europe/Berlin", "\x00", "L", "@reboot", "1e309"]
)  # fmt: skip


@st.composite
def job_like_bodies(draw: st.DrawFn) -> Any:
    """Mostly valid job bodies with one part replaced by something odd."""
    body = job_body(schedule={"cron": "0 2 * * *"})
    value = draw(json_values | tricky_text)
    where = draw(st.sampled_from(["top", "schedule", "target", "retry"]))
    if where == "retry":
        body["retry"] = {draw(retry_fields): value}
    elif where == "schedule":
        body["schedule"] = {**body["schedule"], draw(schedule_fields): value}
    elif where == "target":
        body["target"] = {**body["target"], draw(target_fields): value}
    else:
        body[draw(st.sampled_from(["name", "tenant", "schedule", "target", "retry"]))] = value
    return body


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=json_values | job_like_bodies())
async def test_no_json_body_gives_a_500(api: Api, body: Any) -> None:
    response = await api.client.post(
        "/v1/jobs", content=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error_of(response, response.status_code)


@pytest.mark.parametrize(
    "when",
    ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00", "1969-12-31T23:59:59Z", 1e20],
)
@pytest.mark.parametrize("key", ["at", "anchor", "start_at", "end_at"])
async def test_instants_out_of_range_are_refused_not_overflowed(
    api: Api, key: str, when: str | float
) -> None:
    schedule: dict[str, Any] = {"every": 30} if key != "at" else {}
    schedule[key] = when
    error = error_of(await api.client.post("/v1/jobs", json=job_body(schedule=schedule)), 422)
    assert error["field"] == f"schedule.{key}"


@pytest.mark.parametrize(("depth", "status"), [(400, 422), (1800, 400)])
async def test_deeply_nested_bodies_are_refused(api: Api, depth: int, status: int) -> None:
    nested = "[" * depth + "]" * depth
    raw = json.dumps(job_body(target={"url": "https://x.test"}))
    raw = raw.replace('"url": "https://x.test"', f'"url": "https://x.test", "body": {nested}')
    response = await api.client.post(
        "/v1/jobs", content=raw.encode(), headers={"content-type": "application/json"}
    )
    error = error_of(response, status)
    assert "nested too deeply" in error["message"]


async def test_task_targets_round_trip_and_are_checked(api: Api) -> None:
    target = {"type": "task", "name": "reports.build", "args": {"day": 1}, "timeout": "PT2M"}
    job = await create(api, target=target)
    assert job["target"] == target
    fetched = (await api.client.get(f"/v1/jobs/{job['id']}")).json()
    assert fetched["target"] == target
    for bad, field in [
        ({"type": "task"}, "target.name"),
        ({"type": "task", "name": "x", "url": "https://x.test"}, "target.url"),
        ({"type": "task", "name": "x", "timeout": "PT2H"}, "target.timeout"),
        ({"url": "https://x.test", "name": "x"}, "target.name"),
    ]:
        error = error_of(await api.client.post("/v1/jobs", json=job_body(target=bad)), 422)
        assert error["field"] == field, (bad, error)
