"""Runs with their attempts and the dead-letter queue, through the HTTP API.

There is no executor here: the tests play it, driving the store the way a worker does (lease,
then report an outcome), with the manual clock as the only source of time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from tickwork.domain.runs import Fire, RunOutcome, RunStatus
from tickwork.store.memory import MemoryStore

from .test_api import Api, create, error_of, serve

ATTEMPT_MS = timedelta(milliseconds=250)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


async def lease(api: Api, run_id: int) -> Fire | None:
    now = api.clock.now()
    fires = await api.store.lease_runs(
        now=now, owner="test", lease_until=now + timedelta(minutes=1), limit=1000
    )
    return next((f for f in fires if f.run_id == run_id), None)


async def attempt(api: Api, run_id: int, status: RunStatus, http_status: int) -> None:
    """One attempt of the run as a worker makes it; a PENDING outcome retries at once."""
    fire = await lease(api, run_id)
    assert fire is not None
    started = api.clock.now()
    api.clock.advance(ATTEMPT_MS)
    outcome = RunOutcome(
        run_id=run_id,
        job_id=fire.job_id,
        attempt=fire.attempt,
        fence_token=fire.fence_token,
        status=status,
        started_at=started,
        finished_at=api.clock.now(),
        http_status=http_status,
        error=None if status is RunStatus.SUCCEEDED else f"HTTP {http_status}",
        retry_at=api.clock.now() if status is RunStatus.PENDING else None,
        worker="worker-1",
    )
    assert await api.store.finish_runs([outcome]) == 1


async def triggered(api: Api, job_id: str) -> int:
    api.clock.advance(timedelta(seconds=1))  # one manual occurrence per instant
    response = await api.client.post(f"/v1/jobs/{job_id}/trigger")
    run_id: int = response.json()["id"]
    return run_id


async def dead_letter(api: Api, job_id: str) -> int:
    """A run whose first attempt got a 503 and was retried, and whose second one failed."""
    run_id = await triggered(api, job_id)
    await attempt(api, run_id, RunStatus.PENDING, 503)
    await attempt(api, run_id, RunStatus.FAILED, 503)
    return run_id


async def dead_ids(api: Api, **params: Any) -> list[int]:
    page = (await api.client.get("/v1/dead-letters", params=params)).json()
    return [run["id"] for run in page["dead_letters"]]


# -- one run and its attempts -----------------------------------------------------------------


async def test_a_run_shows_its_attempts_oldest_first(api: Api) -> None:
    job = await create(api)
    run_id = await dead_letter(api, job["id"])
    response = await api.client.get(f"/v1/runs/{run_id}")
    assert response.status_code == 200
    run = response.json()
    assert {k: run[k] for k in ("id", "job_id", "origin", "status", "attempt")} == {
        "id": run_id,
        "job_id": job["id"],
        "origin": "manual",
        "status": "failed",
        "attempt": 2,
    }
    assert run["dead_lettered_at"] == run["finished_at"] == "2026-01-15T12:00:01.500Z"
    assert (run["last_error"], run["http_status"]) == ("HTTP 503", 503)
    first, second = run["attempts"]
    assert first == {
        "attempt": 1,
        "fence_token": first["fence_token"],
        "worker": "worker-1",
        "started_at": "2026-01-15T12:00:01Z",
        "finished_at": "2026-01-15T12:00:01.250Z",
        "status": "retry",
        "http_status": 503,
        "error": "HTTP 503",
    }
    assert (second["attempt"], second["status"]) == (2, "failed")
    assert second["fence_token"] > first["fence_token"]


async def test_a_retried_run_that_succeeds_records_both_attempts(api: Api) -> None:
    job = await create(api)
    run_id = await triggered(api, job["id"])
    await attempt(api, run_id, RunStatus.PENDING, 429)
    await attempt(api, run_id, RunStatus.SUCCEEDED, 200)
    run = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["dead_lettered_at"], run["error"]) == ("succeeded", None, None)
    statuses = [(a["attempt"], a["status"], a["http_status"]) for a in run["attempts"]]
    assert statuses == [(1, "retry", 429), (2, "succeeded", 200)]
    assert run_id not in await dead_ids(api)


async def test_a_pending_run_has_no_attempts_yet(api: Api) -> None:
    job = await create(api)
    run_id = await triggered(api, job["id"])
    run = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["attempts"], run["last_error"]) == ("pending", [], None)


async def test_an_unknown_run_is_404(api: Api) -> None:
    error = error_of(await api.client.get("/v1/runs/424242"), 404)
    assert error["code"] == "not_found"
    assert "424242" in error["message"]


@pytest.mark.parametrize("garbage", ["abc", "0", "-1", "1.5", "1e3", "9" * 30, "%20", "0x10"])
@pytest.mark.parametrize(
    ("method", "template"),
    [
        ("GET", "/v1/runs/{}"),
        ("POST", "/v1/dead-letters/{}/redrive"),
        ("DELETE", "/v1/dead-letters/{}"),
    ],
)
async def test_garbage_run_ids_are_422_not_500(
    api: Api, method: str, template: str, garbage: str
) -> None:
    response = await api.client.request(method, template.format(garbage))
    assert error_of(response, 422)["field"] == "run_id"


# -- listing dead letters ---------------------------------------------------------------------


async def test_dead_letters_are_listed_newest_first_page_by_page(api: Api) -> None:
    a, b = await create(api, name="a"), await create(api, name="b")
    made = [await dead_letter(api, job["id"]) for job in (a, b, a, a)]
    await attempt(api, await triggered(api, a["id"]), RunStatus.SUCCEEDED, 200)  # not listed
    await triggered(api, a["id"])  # pending: not listed

    first = (await api.client.get("/v1/dead-letters", params={"limit": 3})).json()
    assert [r["id"] for r in first["dead_letters"]] == made[::-1][:3]
    assert first["next_before"] == made[1]
    rest = await api.client.get(
        "/v1/dead-letters", params={"limit": 3, "before": first["next_before"]}
    )
    assert rest.json() == {"dead_letters": [rest.json()["dead_letters"][0]], "next_before": None}
    assert rest.json()["dead_letters"][0]["id"] == made[0]

    assert await dead_ids(api, job_id=a["id"]) == [made[3], made[2], made[0]]
    assert await dead_ids(api, job_id=b["id"]) == [made[1]]
    assert await dead_ids(api, job_id=a["id"], limit=3) == [made[3], made[2], made[0]]


async def test_a_dead_letter_in_the_list_carries_why_it_failed(api: Api) -> None:
    job = await create(api)
    run_id = await dead_letter(api, job["id"])
    (listed,) = (await api.client.get("/v1/dead-letters")).json()["dead_letters"]
    detail = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert listed == {k: v for k, v in detail.items() if k != "attempts"}
    assert (listed["status"], listed["last_error"]) == ("failed", "HTTP 503")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"before": 0}, "before"),
        ({"before": "x"}, "before"),
        ({"before": "9" * 30}, "before"),
        ({"job_id": "x" * 65}, "job_id"),
    ],
)
async def test_bad_listing_parameters_are_named(
    api: Api, params: dict[str, Any], field: str
) -> None:
    error = error_of(await api.client.get("/v1/dead-letters", params=params), 422)
    assert error["field"] == field


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/dead-letters"),
        ("POST", "/v1/dead-letters/redrive"),
        ("DELETE", "/v1/dead-letters"),
    ],
)
async def test_an_unknown_job_filter_is_404(api: Api, method: str, path: str) -> None:
    response = await api.client.request(method, path, params={"job_id": "nosuchjob"})
    error = error_of(response, 404)
    assert (error["code"], "nosuchjob" in error["message"]) == ("not_found", True)


# -- redrive ----------------------------------------------------------------------------------


async def test_redriving_one_gives_it_one_more_attempt(api: Api) -> None:
    job = await create(api)
    run_id, other = await dead_letter(api, job["id"]), await dead_letter(api, job["id"])
    api.clock.advance(timedelta(minutes=1))
    response = await api.client.post(f"/v1/dead-letters/{run_id}/redrive")
    assert (response.status_code, response.json()) == (202, {"redriven": 1})

    run = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["dead_lettered_at"]) == ("pending", None)
    assert await dead_ids(api) == [other]
    # leasable from the clock's now (not before), as the attempt after the last one
    api.clock.advance(-timedelta(milliseconds=1))
    assert await lease(api, run_id) is None
    api.clock.advance(timedelta(milliseconds=1))
    fire = await lease(api, run_id)
    assert fire is not None
    assert fire.attempt == 3


async def test_redriving_what_is_not_a_dead_letter_is_404(api: Api) -> None:
    job = await create(api)
    pending = await triggered(api, job["id"])
    dead = await dead_letter(api, job["id"])
    await api.client.post(f"/v1/dead-letters/{dead}/redrive")
    for run_id in (pending, dead, 424242):  # pending, already redriven, unknown
        response = await api.client.post(f"/v1/dead-letters/{run_id}/redrive")
        error = error_of(response, 404)
        assert error["code"] == "not_dead_lettered"
        assert f"run {run_id} is not a dead letter" in error["message"]


async def test_redriving_all_or_one_jobs(api: Api) -> None:
    a, b = await create(api, name="a"), await create(api, name="b")
    in_a = [await dead_letter(api, a["id"]) for _ in range(2)]
    in_b = await dead_letter(api, b["id"])

    response = await api.client.post("/v1/dead-letters/redrive", params={"job_id": a["id"]})
    assert (response.status_code, response.json()) == (202, {"redriven": 2})
    assert await dead_ids(api) == [in_b]
    response = await api.client.post("/v1/dead-letters/redrive")
    assert (response.status_code, response.json()) == (202, {"redriven": 1})
    assert await dead_ids(api) == []
    again = await api.client.post("/v1/dead-letters/redrive")
    assert again.json() == {"redriven": 0}
    now = api.clock.now()
    fires = await api.store.lease_runs(now=now, owner="test", lease_until=now, limit=1000)
    assert sorted((f.run_id, f.attempt) for f in fires) == [(r, 3) for r in [*in_a, in_b]]


# -- purge ------------------------------------------------------------------------------------


async def test_purging_one_keeps_it_failed_in_the_history(api: Api) -> None:
    job = await create(api)
    run_id, other = await dead_letter(api, job["id"]), await dead_letter(api, job["id"])
    response = await api.client.delete(f"/v1/dead-letters/{run_id}")
    assert (response.status_code, response.content) == (204, b"")
    assert await dead_ids(api) == [other]
    run = (await api.client.get(f"/v1/runs/{run_id}")).json()
    assert (run["status"], run["dead_lettered_at"], len(run["attempts"])) == ("failed", None, 2)
    assert await lease(api, run_id) is None
    for method, path in [("DELETE", ""), ("POST", "/redrive")]:
        response = await api.client.request(method, f"/v1/dead-letters/{run_id}{path}")
        assert error_of(response, 404)["code"] == "not_dead_lettered"


async def test_purging_all_or_one_jobs(api: Api) -> None:
    a, b = await create(api, name="a"), await create(api, name="b")
    for job in (a, a, b):
        await dead_letter(api, job["id"])
    response = await api.client.delete("/v1/dead-letters", params={"job_id": a["id"]})
    assert (response.status_code, response.json()) == (200, {"purged": 2})
    assert len(await dead_ids(api, job_id=b["id"])) == 1
    assert (await api.client.delete("/v1/dead-letters")).json() == {"purged": 1}
    assert (await api.client.delete("/v1/dead-letters")).json() == {"purged": 0}
    assert await dead_ids(api) == []
