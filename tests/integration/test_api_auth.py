"""Keys, roles and tenant isolation through the HTTP API (in-memory store, manual clock)."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tickwork.api.app import create_app
from tickwork.clock import ManualClock
from tickwork.domain.runs import RunStatus
from tickwork.settings import Settings
from tickwork.store.memory import MemoryStore
from tickwork.store.sqlite import SqliteStore
from tickwork.testing import mint_key

from .test_api import NOW, Api, create, error_of, job_body, serve
from .test_dead_letters_api import attempt, triggered


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        for tenant in ("acme", "globex"):
            made = await served.client.post("/v1/tenants", json={"name": tenant})
            assert made.status_code == 201
        yield served


async def key_for(api: Api, role: str, tenant: str | None = None) -> str:
    response = await api.client.post(
        "/v1/keys", json={"name": f"{role} {tenant}", "role": role, "tenant": tenant}
    )
    assert response.status_code == 201, response.text
    key: str = response.json()["key"]
    return key


async def as_tenant(api: Api, tenant: str, role: str = "tenant-write") -> httpx.AsyncClient:
    return api.client_with(await key_for(api, role, tenant))


def unauthenticated(response: httpx.Response) -> str:
    error = error_of(response, 401)
    assert error["code"] == "unauthenticated"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    message: str = error["message"]
    return message


# -- authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "says"),
    [
        (None, "needs an API key"),
        ("Basic dXNlcjpwYXNz", "Bearer"),
        ("Bearer", "Bearer"),
        ("Bearer tw_00000000_made-up", "not valid"),
    ],
)
async def test_every_v1_route_needs_a_valid_key(api: Api, header: str | None, says: str) -> None:
    headers = {} if header is None else {"Authorization": header}
    async with api.client_with(None) as client:
        for method, path in [
            ("GET", "/v1/jobs"),
            ("POST", "/v1/jobs"),
            ("GET", "/v1/dead-letters"),
            ("GET", "/v1/preview?cron=*+*+*+*+*"),
            ("GET", "/v1/cluster"),
            ("GET", "/v1/keys"),
            ("GET", "/v1/tenants"),
            ("PUT", "/v1/tenants/acme/webhook-secrets"),
        ]:
            response = await client.request(method, path, headers=headers)
            assert says in unauthenticated(response), (method, path)


async def test_health_stays_open_and_ops_routes_are_open_on_loopback(api: Api) -> None:
    async with api.client_with(None) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/metrics")).status_code == 200  # the transport is 127.0.0.1


async def test_ops_routes_need_a_key_from_another_address(api: Api) -> None:
    remote = httpx.ASGITransport(app=api.transport.app, client=("10.1.2.3", 4000))
    async with httpx.AsyncClient(transport=remote, base_url="http://tickwork.test") as client:
        for path in ("/metrics", "/openapi.json", "/docs"):
            assert "loopback" in unauthenticated(await client.get(path)), path
        assert (await client.get("/healthz")).status_code == 200
        good = {"Authorization": api.client.headers["Authorization"]}
        assert (await client.get("/metrics", headers=good)).status_code == 200


async def test_a_revoked_key_is_refused_within_a_second(api: Api) -> None:
    key = await key_for(api, "tenant-read", "acme")
    async with api.client_with(key) as client:
        assert (await client.get("/v1/jobs")).status_code == 200
        listed = (await api.client.get("/v1/keys")).json()["keys"]
        [mine] = [k for k in listed if k["prefix"] == key[: len(k["prefix"])]]
        revoked = await api.client.delete(f"/v1/keys/{mine['id']}")
        assert revoked.status_code == 200
        assert revoked.json()["revoked_at"] is not None
        api.clock.advance(timedelta(seconds=1))  # another process's cache lives this long
        assert "revoked" in unauthenticated(await client.get("/v1/jobs"))


async def test_an_expired_key_is_refused(api: Api) -> None:
    expires = (api.clock.now() + timedelta(minutes=5)).isoformat()
    response = await api.client.post(
        "/v1/keys", json={"name": "short", "role": "admin", "expires_at": expires}
    )
    key = response.json()["key"]
    async with api.client_with(key) as client:
        assert (await client.get("/v1/jobs")).status_code == 200
        api.clock.advance(timedelta(minutes=5))
        assert "expired" in unauthenticated(await client.get("/v1/jobs"))


async def test_the_key_is_shown_once_and_stored_as_a_hash(api: Api) -> None:
    body = {"name": "ci", "role": "tenant-read", "tenant": "acme"}
    created = (await api.client.post("/v1/keys", json=body)).json()
    assert set(created) == {
        "id", "key", "prefix", "name", "role", "tenant", "created_at", "expires_at",
    }  # fmt: skip
    assert created["key"].startswith(created["prefix"] + "_")
    listed = (await api.client.get("/v1/keys")).json()["keys"]
    assert created["key"] not in str(listed)
    stored = await api.store.get_key(created["id"])
    assert created["key"] not in repr(stored)
    assert created["key"] not in stored.secret_hash


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "role": "tenant-write"}, "tenant"),
        ({"name": "x", "role": "admin", "tenant": "acme"}, "tenant"),
        ({"name": "x", "role": "tenant-read", "tenant": "nope"}, "tenant"),
        ({"name": " ", "role": "admin"}, "name"),
        ({"name": "x", "role": "root"}, "role"),
        ({"name": "x", "role": "admin", "expires_at": "2020-01-01T00:00:00Z"}, "expires_at"),
    ],
)
async def test_bad_key_requests_name_the_field(api: Api, body: dict[str, Any], field: str) -> None:
    assert error_of(await api.client.post("/v1/keys", json=body), 422)["field"] == field


# -- roles ------------------------------------------------------------------------------------


async def test_a_read_key_reads_and_cannot_write(api: Api) -> None:
    job = await create(api, tenant="acme")
    async with await as_tenant(api, "acme", "tenant-read") as reader:
        assert (await reader.get(f"/v1/jobs/{job['id']}")).status_code == 200
        assert (await reader.get(f"/v1/jobs/{job['id']}/preview")).status_code == 200
        for method, path in [
            ("POST", "/v1/jobs"),
            ("PATCH", f"/v1/jobs/{job['id']}"),
            ("DELETE", f"/v1/jobs/{job['id']}"),
            ("POST", f"/v1/jobs/{job['id']}/pause"),
            ("POST", f"/v1/jobs/{job['id']}/trigger"),
            ("POST", "/v1/dead-letters/redrive"),
            ("DELETE", "/v1/tenants/acme/webhook-secrets"),
        ]:
            response = await reader.request(method, path, json={})
            assert error_of(response, 403)["code"] == "forbidden", (method, path)


async def test_admin_routes_refuse_tenant_keys(api: Api) -> None:
    async with await as_tenant(api, "acme") as writer:
        for method, path, body in [
            ("GET", "/v1/keys", None),
            ("POST", "/v1/keys", {"name": "x", "role": "admin"}),
            ("POST", "/v1/tenants", {"name": "mine"}),
            ("DELETE", "/v1/tenants/acme", None),
            ("GET", "/v1/cluster", None),
        ]:
            response = await writer.request(method, path, json=body)
            assert error_of(response, 403)["code"] == "forbidden", (method, path)


# -- tenant isolation -------------------------------------------------------------------------


async def test_another_tenants_job_does_not_exist_for_a_tenant_key(api: Api) -> None:
    theirs = await create(api, tenant="globex")
    missing = "f" * 32
    async with await as_tenant(api, "acme") as acme:
        for method, path in [
            ("GET", "/v1/jobs/{}"),
            ("PATCH", "/v1/jobs/{}"),
            ("DELETE", "/v1/jobs/{}"),
            ("POST", "/v1/jobs/{}/pause"),
            ("POST", "/v1/jobs/{}/resume"),
            ("POST", "/v1/jobs/{}/trigger"),
            ("GET", "/v1/jobs/{}/runs"),
            ("GET", "/v1/jobs/{}/preview"),
            ("GET", "/v1/dead-letters?job_id={}"),
            ("POST", "/v1/dead-letters/redrive?job_id={}"),
        ]:
            body = {"name": "mine now"} if method == "PATCH" else None
            other = await acme.request(method, path.format(theirs["id"]), json=body)
            absent = await acme.request(method, path.format(missing), json=body)
            assert error_of(other, 404) == {
                **error_of(absent, 404),
                "message": error_of(absent, 404)["message"].replace(missing, theirs["id"]),
            }, (method, path)
    still = (await api.client.get(f"/v1/jobs/{theirs['id']}")).json()
    assert (still["name"], still["state"]) == (theirs["name"], "scheduled")


async def test_a_tenant_key_lists_only_its_tenant(api: Api) -> None:
    mine = await create(api, tenant="acme")
    await create(api, tenant="globex")
    async with await as_tenant(api, "acme", "tenant-read") as acme:
        assert [j["id"] for j in (await acme.get("/v1/jobs")).json()["jobs"]] == [mine["id"]]
        assert (await acme.get("/v1/jobs", params={"tenant": "globex"})).json()["jobs"] == []
        tenants = (await acme.get("/v1/tenants")).json()["tenants"]
        assert [t["name"] for t in tenants] == ["acme"]
        assert error_of(await acme.get("/v1/tenants/globex"), 404)["code"] == "not_found"
        assert error_of(await acme.get("/v1/tenants/globex/webhook-secrets"), 404)


async def test_a_tenant_key_creates_in_its_tenant_and_cannot_move_jobs_out(api: Api) -> None:
    async with await as_tenant(api, "acme") as acme:
        made = await acme.post("/v1/jobs", json=job_body())
        assert made.status_code == 201
        assert made.json()["tenant"] == "acme"
        other = error_of(await acme.post("/v1/jobs", json=job_body(tenant="globex")), 422)
        absent = error_of(await acme.post("/v1/jobs", json=job_body(tenant="nope")), 422)
        assert (other["code"], other["field"]) == ("unknown_tenant", "tenant")
        assert other["message"].replace("globex", "nope") == absent["message"]
        moved = await acme.patch(f"/v1/jobs/{made.json()['id']}", json={"tenant": "globex"})
        assert error_of(moved, 422)["code"] == "unknown_tenant"
    assert (await api.client.get(f"/v1/jobs/{made.json()['id']}")).json()["tenant"] == "acme"


async def test_runs_and_dead_letters_of_another_tenant_stay_hidden(api: Api) -> None:
    theirs = await create(api, tenant="globex")
    run_id = await triggered(api, theirs["id"])
    await attempt(api, run_id, RunStatus.FAILED, 500)
    assert [r["id"] for r in (await api.client.get("/v1/dead-letters")).json()["dead_letters"]] == [
        run_id
    ]
    async with await as_tenant(api, "acme") as acme:
        assert error_of(await acme.get(f"/v1/runs/{run_id}"), 404)["code"] == "not_found"
        assert (await acme.get("/v1/dead-letters")).json()["dead_letters"] == []
        one = await acme.post(f"/v1/dead-letters/{run_id}/redrive")
        assert error_of(one, 404)["code"] == "not_dead_lettered"
        assert (await acme.post("/v1/dead-letters/redrive")).json() == {"redriven": 0}
        assert (await acme.delete("/v1/dead-letters")).json() == {"purged": 0}
    assert [r["id"] for r in (await api.client.get("/v1/dead-letters")).json()["dead_letters"]] == [
        run_id
    ]


# -- tenants ----------------------------------------------------------------------------------


async def test_tenants_are_created_listed_and_deleted_by_an_admin(api: Api) -> None:
    assert error_of(await api.client.post("/v1/tenants", json={"name": "acme"}), 409)
    bad = await api.client.post("/v1/tenants", json={"name": "no spaces"})
    assert error_of(bad, 422)["field"] == "name"
    names = [t["name"] for t in (await api.client.get("/v1/tenants")).json()["tenants"]]
    assert names == ["acme", "default", "globex"]
    job = await create(api, tenant="acme")
    busy = error_of(await api.client.delete("/v1/tenants/acme"), 409)
    assert busy["code"] == "tenant_has_jobs"
    await api.client.delete(f"/v1/jobs/{job['id']}")
    key = await key_for(api, "tenant-write", "acme")
    assert (await api.client.delete("/v1/tenants/acme")).status_code == 204
    api.clock.advance(timedelta(seconds=1))
    async with api.client_with(key) as gone:
        assert "revoked" in unauthenticated(await gone.get("/v1/jobs"))
    assert error_of(await api.client.get("/v1/tenants/acme"), 404)


async def test_a_job_names_an_existing_tenant(api: Api) -> None:
    error = error_of(await api.client.post("/v1/jobs", json=job_body(tenant="nope")), 422)
    assert (error["code"], error["field"]) == ("unknown_tenant", "tenant")
    assert "POST /v1/tenants" in error["message"]


async def test_keys_of_an_admin_minted_in_the_store_work(api: Api) -> None:
    key = await mint_key(api.store, role="tenant-read", tenant="globex", clock=api.clock)
    async with api.client_with(key) as client:
        assert (await client.get("/v1/jobs")).status_code == 200


async def test_a_key_over_its_rate_is_told_when_to_come_back() -> None:
    store = MemoryStore()
    await store.open()
    clock = ManualClock(NOW)
    key = await mint_key(store, clock=clock)
    other = await mint_key(store, clock=clock, name="other")
    settings = Settings(api_key_rate=2, api_key_burst=3)
    app = create_app(store=store, clock=clock, settings=settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)

    def client(k: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=transport, base_url="http://t.test", headers={"Authorization": f"Bearer {k}"}
        )

    async with client(key) as busy, client(other) as calm:
        assert [(await busy.get("/v1/jobs")).status_code for _ in range(3)] == [200] * 3
        refused = await busy.get("/v1/jobs")
        error = error_of(refused, 429)
        assert error["code"] == "rate_limited"
        assert refused.headers["Retry-After"] == "1"  # half a second, rounded up
        assert (await calm.get("/v1/jobs")).status_code == 200  # per key
        clock.advance(timedelta(milliseconds=500))  # one token back at 2 per second
        assert (await busy.get("/v1/jobs")).status_code == 200
        assert (await busy.get("/v1/jobs")).status_code == 429
    await store.close()


def test_the_embedded_database_and_its_folder_are_private(tmp_path: Path) -> None:
    """What `tickwork up` creates holds credentials: owner-only modes, whatever the umask."""
    folder = tmp_path / "fresh" / ".tickwork"
    store = SqliteStore(folder / "tickwork.db")
    old = os.umask(0o022)
    try:
        asyncio.run(_open_and_close(store))
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "tickwork.db").stat().st_mode) == 0o600


async def _open_and_close(store: SqliteStore) -> None:
    await store.open()
    await store.close()


async def test_nul_in_a_key_or_tenant_path_is_refused_naming_it(api: Api) -> None:
    for path, field in (("/v1/tenants/a%00b", "name"), ("/v1/keys/key_%00", "key_id")):
        error = error_of(await api.client.request("DELETE", path), 422)
        assert (error["code"], error["field"]) == ("invalid_character", field)
