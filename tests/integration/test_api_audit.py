"""The audit trail: who changed what, when and from where, queryable by admins."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tickwork.store.memory import MemoryStore
from tickwork.store.sqlite import SqliteStore

from .test_api import Api, create, error_of, job_body, serve
from .test_api_auth import key_for


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


async def entries(api: Api, **params: Any) -> list[dict[str, Any]]:
    response = await api.client.get("/v1/audit", params=params)
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["entries"]
    return found


async def test_every_change_is_recorded_with_who_what_when_and_where(api: Api) -> None:
    job = await create(api, tenant="acme")  # also creates the tenant
    key = await key_for(api, "tenant-write", "acme")
    api.clock.advance(timedelta(seconds=5))
    async with api.client_with(key) as acme:
        assert (await acme.post(f"/v1/jobs/{job['id']}/pause")).status_code == 200
        assert (await acme.get("/v1/jobs")).status_code == 200  # a read: not recorded
        assert (await acme.post("/v1/tenants", json={"name": "mine"})).status_code == 403
    async with api.client_with(None) as anonymous:
        assert (await anonymous.delete(f"/v1/jobs/{job['id']}")).status_code == 401

    found = await entries(api)
    actions = [(e["action"], e["status"]) for e in found]
    assert actions == [
        ("POST /v1/tenants", 403),  # refused, but tried with a valid key
        ("POST /v1/jobs/{job_id}/pause", 200),
        ("POST /v1/keys", 201),
        ("POST /v1/jobs", 201),
        ("POST /v1/tenants", 201),
    ]
    pause = found[1]
    assert pause["resource"] == f"job {job['id']}"
    assert (pause["tenant"], pause["actor_tenant"], pause["role"]) == (
        "acme",
        "acme",
        "tenant-write",
    )
    assert pause["key_prefix"] == key[: len(pause["key_prefix"])]
    assert pause["client"] == "127.0.0.1"
    assert pause["at"] == "2026-01-15T12:00:05Z"
    made = found[3]
    assert (made["resource"], made["tenant"], made["role"]) == (f"job {job['id']}", "acme", "admin")


async def test_the_trail_pages_and_filters(api: Api) -> None:
    await create(api, tenant="acme")
    await create(api, tenant="globex")
    assert {e["tenant"] for e in await entries(api, tenant="globex")} == {"globex"}
    first = (await api.client.get("/v1/audit", params={"limit": 2})).json()
    assert len(first["entries"]) == 2
    rest = await entries(api, before=first["next_before"])
    assert [e["id"] for e in first["entries"] + rest] == sorted(
        (e["id"] for e in first["entries"] + rest), reverse=True
    )
    assert len(first["entries"] + rest) == 4  # two tenants, two jobs


async def test_only_admins_read_the_trail_and_it_holds_no_secrets(api: Api) -> None:
    secret = "whsec_" + "QUJD" * 8
    body = job_body(target={"type": "webhook", "url": "https://example.com/h", "secrets": [secret]})
    assert (await api.client.post("/v1/jobs", json=body)).status_code == 201
    assert secret not in str(await entries(api))
    key = await key_for(api, "tenant-read", "default")
    async with api.client_with(key) as reader:
        assert error_of(await reader.get("/v1/audit"), 403)["code"] == "forbidden"


@pytest.fixture
async def sqlite_api(tmp_path: Path) -> AsyncIterator[Api]:
    async for served in serve(SqliteStore(tmp_path / "tickwork.db")):  # type: ignore[arg-type]
        yield served


async def test_concurrent_changes_on_sqlite_are_each_recorded(sqlite_api: Api) -> None:
    """Regression: on SQLite, audit writes racing other writes were lost ("bad parameter or
    other API misuse"): each write's cursor was freed on the event loop's thread, resetting a
    prepared statement the writer thread was using again (store/sqlite/connection.py)."""
    api = sqlite_api
    jobs = [await create(api, name=f"job {n}") for n in range(4)]
    before = len(await entries(api, limit=1000))

    async def churn(job_id: str, n: int) -> int:
        path = f"/v1/jobs/{job_id}"
        if n % 3 == 0:
            response = await api.client.patch(path, json={"name": f"renamed {n}"})
        elif n % 3 == 1:
            response = await api.client.post(f"{path}/pause", json={"note": f"pause {n}"})
        else:
            response = await api.client.post(f"{path}/resume", json={"catch_up": n % 2 == 0})
        return response.status_code

    calls = [churn(job["id"], n) for job in jobs for n in range(100)]
    statuses = await asyncio.gather(*calls)
    assert set(statuses) <= {200, 409}  # a resume of a job not paused is refused, 409
    found = await entries(api, limit=1000)
    assert len(found) - before == len(calls)  # not one entry lost
    assert sorted(e["status"] for e in found[: len(calls)]) == sorted(statuses)
