"""A tenant's limits through the HTTP API: set at creation and merged by PATCH (admin only),
shown with the tenant's usage, refused with errors naming `limits.<field>`; the job quota (409
`quota_exceeded`), held when two API processes on one SQLite or PostgreSQL database create at
once; the tenant's request rate (429 naming `limits.max_api_rps`, with Retry-After)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tickwork.api.app import create_app
from tickwork.clock import SystemClock
from tickwork.settings import Settings
from tickwork.store.base import ScheduleStore
from tickwork.store.memory import MemoryStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore
from tickwork.testing import mint_key

from .test_api import Api, error_of, job_body, serve
from .test_api_auth import as_tenant

NO_LIMITS = {
    "max_jobs": None,
    "max_fires_per_s": None,
    "max_concurrent_runs": None,
    "max_api_rps": None,
    "weight": None,
}


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


async def made(api: Api, name: str, limits: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name}
    if limits is not None:
        body["limits"] = limits
    response = await api.client.post("/v1/tenants", json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


async def patched(api: Api, name: str, limits: Any) -> dict[str, Any]:
    response = await api.client.patch(f"/v1/tenants/{name}", json={"limits": limits})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


# -- the resource -----------------------------------------------------------------------------


async def test_limits_are_set_at_creation_and_shown_with_usage(api: Api) -> None:
    created = await made(api, "acme", {"max_jobs": 100, "max_api_rps": 2.5, "weight": 3})
    limits = {**NO_LIMITS, "max_jobs": 100, "max_api_rps": 2.5, "weight": 3}
    assert created["limits"] == limits
    assert created["usage"] == {"jobs": 0}
    for n in range(2):
        response = await api.client.post("/v1/jobs", json=job_body(name=f"j{n}", tenant="acme"))
        assert response.status_code == 201, response.text
    shown = (await api.client.get("/v1/tenants/acme")).json()
    assert (shown["limits"], shown["usage"]) == (limits, {"jobs": 2})
    listed = {t["name"]: t for t in (await api.client.get("/v1/tenants")).json()["tenants"]}
    assert listed["acme"]["usage"] == {"jobs": 2}
    assert listed["default"]["limits"] == NO_LIMITS
    assert listed["default"]["usage"] == {"jobs": 0}
    assert (await made(api, "plain"))["limits"] == NO_LIMITS


async def test_patch_merges_and_null_removes_a_limit(api: Api) -> None:
    await made(api, "acme", {"max_jobs": 10, "max_concurrent_runs": 4})
    changed = await patched(api, "acme", {"max_jobs": None, "max_fires_per_s": 50})
    assert changed["limits"] == {**NO_LIMITS, "max_concurrent_runs": 4, "max_fires_per_s": 50.0}
    # {} and null change nothing, and neither does a body without `limits`
    assert (await patched(api, "acme", {}))["limits"] == changed["limits"]
    assert (await patched(api, "acme", None))["limits"] == changed["limits"]
    egress = await api.client.patch("/v1/tenants/acme", json={"egress": {"deny": ["x.io"]}})
    assert egress.json()["limits"] == changed["limits"]
    stored = await api.store.get_tenant("acme")
    assert stored is not None
    assert stored.limits.max_concurrent_runs == 4
    assert stored.egress.deny == ("x.io",)


@pytest.mark.parametrize(
    ("limits", "field", "code", "says"),
    [
        ({"max_jobs": 0}, "limits.max_jobs", "invalid_limit", "give 1 to 100,000,000 jobs"),
        ({"max_jobs": 1.5}, "limits.max_jobs", "invalid", ""),
        ({"max_jobs": True}, "limits.max_jobs", "invalid", ""),
        ({"max_api_rps": 0}, "limits.max_api_rps", "invalid_limit", "a number above 0"),
        ({"max_api_rps": "5"}, "limits.max_api_rps", "invalid", ""),
        ({"max_fires_per_s": 1e7}, "limits.max_fires_per_s", "invalid_limit", "above the max"),
        ({"weight": 1001}, "limits.weight", "invalid_limit", "null: the default, 1"),
        ({"max_concurrent_runs": -1}, "limits.max_concurrent_runs", "invalid_limit", ""),
        ({"max_job": 5}, "limits.max_job", "unknown_field", "max_job"),
    ],
)
async def test_a_bad_limit_is_refused_naming_it(
    api: Api, limits: dict[str, Any], field: str, code: str, says: str
) -> None:
    for response in (
        await api.client.post("/v1/tenants", json={"name": "acme", "limits": limits}),
        await api.client.patch("/v1/tenants/default", json={"limits": limits}),
    ):
        error = error_of(response, 422)
        assert (error["field"], error["code"]) == (field, code)
        assert says in error["message"]
    assert await api.store.get_tenant("acme") is None
    default = await api.store.get_tenant("default")
    assert default is not None
    assert default.limits.empty


async def test_only_an_admin_sets_limits_and_a_tenant_reads_its_own(api: Api) -> None:
    await made(api, "acme", {"max_jobs": 7})
    await made(api, "other", {"max_jobs": 8})
    async with await as_tenant(api, "acme") as writer:
        mine = (await writer.get("/v1/tenants/acme")).json()
        assert mine["limits"]["max_jobs"] == 7
        listed = (await writer.get("/v1/tenants")).json()["tenants"]
        assert [(t["name"], t["usage"]) for t in listed] == [("acme", {"jobs": 0})]
        refused = await writer.patch("/v1/tenants/acme", json={"limits": {"max_jobs": None}})
        assert error_of(refused, 403)["code"] == "forbidden"
        assert error_of(await writer.get("/v1/tenants/other"), 404)["code"] == "not_found"
    assert (await api.client.get("/v1/tenants/acme")).json()["limits"]["max_jobs"] == 7


async def test_limits_of_an_unknown_tenant_are_404(api: Api) -> None:
    response = await api.client.patch("/v1/tenants/nobody", json={"limits": {"max_jobs": 1}})
    assert error_of(response, 404)["code"] == "not_found"


# -- the job quota ----------------------------------------------------------------------------


def over_quota(response: httpx.Response, limit: int) -> str:
    error = error_of(response, 409)
    assert (error["code"], error["field"]) == ("quota_exceeded", "limits.max_jobs")
    message: str = error["message"]
    assert f"has {limit} job" in message
    assert f"limits.max_jobs is {limit}" in message
    assert "delete jobs" in message
    assert "raise the limit" in message
    return message


async def test_a_job_over_the_quota_is_409_whoever_creates_it(api: Api) -> None:
    await made(api, "acme", {"max_jobs": 2})
    first = await api.client.post("/v1/jobs", json=job_body(tenant="acme"))
    assert first.status_code == 201
    async with await as_tenant(api, "acme") as writer:
        # the tenant the key implies (no `tenant` in the body) counts the same
        assert (await writer.post("/v1/jobs", json=job_body(name="mine"))).status_code == 201
        over_quota(await writer.post("/v1/jobs", json=job_body(name="one more")), 2)
    over_quota(await api.client.post("/v1/jobs", json=job_body(tenant="acme")), 2)
    assert await api.store.count_tenant_jobs("acme") == {"acme": 2}
    # other tenants are not limited by it
    assert (await api.client.post("/v1/jobs", json=job_body())).status_code == 201
    # deleting a job, or raising the limit, makes room
    assert (await api.client.delete(f"/v1/jobs/{first.json()['id']}")).status_code == 204
    assert (await api.client.post("/v1/jobs", json=job_body(tenant="acme"))).status_code == 201
    over_quota(await api.client.post("/v1/jobs", json=job_body(tenant="acme")), 2)
    await patched(api, "acme", {"max_jobs": 3})
    assert (await api.client.post("/v1/jobs", json=job_body(tenant="acme"))).status_code == 201


async def test_a_job_moved_into_a_tenant_at_its_quota_is_409(api: Api) -> None:
    await made(api, "acme", {"max_jobs": 1})
    assert (await api.client.post("/v1/jobs", json=job_body(tenant="acme"))).status_code == 201
    other = (await api.client.post("/v1/jobs", json=job_body())).json()
    moved = await api.client.patch(f"/v1/jobs/{other['id']}", json={"tenant": "acme"})
    over_quota(moved, 1)
    assert (await api.store.get_job(other["id"])).tenant == "default"
    # an edit of a job already in the tenant is no move
    own = (await api.client.get("/v1/jobs", params={"tenant": "acme"})).json()["jobs"][0]
    renamed = await api.client.patch(f"/v1/jobs/{own['id']}", json={"tenant": "acme"})
    assert renamed.status_code == 200, renamed.text


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file, or a fresh database on the shared PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "tickwork.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


def open_store(where: str) -> ScheduleStore:
    if where.startswith("postgresql://"):
        return PostgresStore(where, pool_size=5)
    return SqliteStore(where)


async def test_two_api_processes_creating_at_once_never_pass_the_quota(shared_db: str) -> None:
    # Two apps, each with its own store on one database, as two API processes.
    stores = [open_store(shared_db) for _ in range(2)]
    for store in stores:
        await store.open()
    try:
        key = await mint_key(stores[0])
        clients = []
        for store in stores:
            app = create_app(store=store, clock=SystemClock(), settings=Settings(api_key_rate=0))
            clients.append(
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                    base_url="http://tickwork.test",
                    headers={"Authorization": f"Bearer {key}"},
                )
            )
        body = {"name": "acme", "limits": {"max_jobs": 5}}
        assert (await clients[0].post("/v1/tenants", json=body)).status_code == 201

        async def create(n: int) -> httpx.Response:
            job = job_body(name=f"job {n}", tenant="acme")
            return await clients[n % 2].post("/v1/jobs", json=job)

        answers = await asyncio.gather(*(create(n) for n in range(20)))
        statuses = sorted(a.status_code for a in answers)
        assert statuses == [201] * 5 + [409] * 15
        for refused in (a for a in answers if a.status_code == 409):
            over_quota(refused, 5)
        shown = (await clients[1].get("/v1/tenants/acme")).json()
        assert shown["usage"] == {"jobs": 5}
        for client in clients:
            await client.aclose()
    finally:
        for store in stores:
            await store.close()


# -- the request rate -------------------------------------------------------------------------


async def test_a_tenant_over_its_request_rate_gets_429_and_others_do_not(api: Api) -> None:
    await made(api, "acme", {"max_api_rps": 2})
    await made(api, "other")
    async with await as_tenant(api, "acme") as acme, await as_tenant(api, "other") as other:
        assert [(await acme.get("/v1/jobs")).status_code for _ in range(2)] == [200, 200]
        refused = await acme.get("/v1/jobs")
        error = error_of(refused, 429)
        assert (error["code"], error["field"]) == ("rate_limited", "limits.max_api_rps")
        assert "tenant 'acme'" in error["message"]
        assert "per API process" in error["message"]
        assert refused.headers["Retry-After"] == "1"
        # another tenant's key, and the admin, are not held by it
        assert all([(await other.get("/v1/jobs")).status_code == 200 for _ in range(10)])
        assert all([(await api.client.get("/v1/jobs")).status_code == 200 for _ in range(10)])
        api.clock.advance(timedelta(seconds=0.5))
        assert (await acme.get("/v1/jobs")).status_code == 200
        assert (await acme.get("/v1/jobs")).status_code == 429
        # a change through this API process applies at once, without waiting for the cache
        await patched(api, "acme", {"max_api_rps": None})
        assert all([(await acme.get("/v1/jobs")).status_code == 200 for _ in range(20)])
