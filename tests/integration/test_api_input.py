"""Bad input at the API's edge, against real stores: SQLite and PostgreSQL.

Each value here was once let through: a NUL reached PostgreSQL (a 503 with the driver's words)
or was stored by SQLite, NaN and 1e999 were stored as null, a duplicate key silently won, a
bad cursor answered an empty page, and invalid UTF-8 or a 5,000-digit integer were answered
"is it nested too deeply?". Each is now refused with a 4xx naming the field, and nothing is
stored.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tickwork.api.app import create_app
from tickwork.clock import SystemClock
from tickwork.settings import Settings
from tickwork.store.base import JobQuery, ScheduleStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore
from tickwork.testing import mint_key

from .test_api import error_of, job_body

JSON = {"content-type": "application/json"}
NUL, SURROGATE = "\u0000", "\ud800"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file, or a fresh database on the shared PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "tickwork.db")
    dsn: str = request.getfixturevalue("pg_dsn")
    return dsn


@pytest.fixture
async def store(backend: str) -> AsyncIterator[ScheduleStore]:
    opened: ScheduleStore
    if backend.startswith("postgresql://"):
        opened = PostgresStore(backend, pool_size=2)
    else:
        opened = SqliteStore(backend)
    await opened.open()
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def client(store: ScheduleStore) -> AsyncIterator[httpx.AsyncClient]:
    key = await mint_key(store)
    app = create_app(store=store, clock=SystemClock(), settings=Settings())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        transport=transport, base_url="http://tickwork.test", headers=headers
    ) as c:
        yield c


async def nothing_stored(store: ScheduleStore) -> bool:
    return await store.list_jobs(JobQuery(limit=10)) == []


def raw_job(**replace: str) -> bytes:
    """A job body as text, with placeholders swapped for raw JSON (NaN, duplicate keys...)."""
    body = job_body(target={"url": "https://example.com/hook", "body": {"x": "@X@"}})
    text = json.dumps(body)
    for placeholder, raw in replace.items():
        text = text.replace(f'"@{placeholder}@"', raw)
    return text.encode()


# -- 1. NUL and lone surrogates ---------------------------------------------------------------


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "surrogate"])
@pytest.mark.parametrize(
    ("where", "field"),
    [
        ({"name": "nightly@"}, "name"),
        ({"tenant": "acme@"}, "tenant"),
        ({"schedule": {"cron": "0 2 * * *@"}}, "schedule.cron"),
        ({"schedule": {"cron": "0 2 * * *", "timezone": "UTC@"}}, "schedule.timezone"),
        ({"target": {"url": "https://example.com/@"}}, "target.url"),
        ({"target": {"url": "https://example.com/", "body": {"k": ["@"]}}}, "target.body.k.0"),
        ({"target": {"url": "https://example.com/", "body": {"k@": 1}}}, "target.body.k@"),
        ({"target": {"type": "task", "name": "t@", "args": "@"}}, "target.name"),
    ],
)
async def test_nul_and_lone_surrogates_in_the_body_are_refused_and_not_stored(
    client: httpx.AsyncClient,
    store: ScheduleStore,
    bad: str,
    where: dict[str, Any],
    field: str,
) -> None:
    # json.dumps escapes both as \u0000 / \ud800, exactly what a client sends
    raw = json.dumps(job_body(**where)).replace("@", "\\u0000" if bad == NUL else "\\ud800")
    response = await client.post("/v1/jobs", content=raw.encode(), headers=JSON)
    error = error_of(response, 422)
    assert error["code"] == "invalid_character"
    # a bad key is named with the character escaped
    assert error["field"] == field.replace("@", "\\u0000" if bad == NUL else "\\ud800")
    assert ("NUL" if bad == NUL else "surrogate") in error["message"]
    assert "store" not in error["message"].lower()
    assert await nothing_stored(store)


@pytest.mark.parametrize(
    ("method", "path", "params", "field"),
    [
        ("GET", "/v1/jobs", {"tenant": "a\x00b"}, "tenant"),
        ("GET", "/v1/jobs", {"name_prefix": "\x00"}, "name_prefix"),
        ("GET", "/v1/dead-letters", {"job_id": "j\x00"}, "job_id"),
        ("POST", "/v1/dead-letters/redrive", {"job_id": "\x00"}, "job_id"),
        ("DELETE", "/v1/dead-letters", {"job_id": "\x00"}, "job_id"),
        ("GET", "/v1/preview", {"cron": "* * * * *\x00"}, "cron"),
        ("GET", "/v1/preview", {"cron": "* * * * *", "timezone": "UTC\x00"}, "timezone"),
        ("GET", "/v1/jobs/%00", {}, "job_id"),
        ("DELETE", "/v1/jobs/abc%00", {}, "job_id"),
        ("GET", "/v1/jobs/%00/runs", {}, "job_id"),
        ("GET", "/v1/tenants/%00/webhook-secrets", {}, "tenant"),
        ("DELETE", "/v1/tenants/a%00/webhook-secrets", {}, "tenant"),
    ],
)
async def test_nul_in_query_and_path_parameters_is_refused_naming_it(
    client: httpx.AsyncClient,
    store: ScheduleStore,
    method: str,
    path: str,
    params: dict[str, str],
    field: str,
) -> None:
    response = await client.request(method, path, params=params)
    error = error_of(response, 422)
    assert (error["code"], error["field"]) == ("invalid_character", field)
    assert "NUL" in error["message"]


async def test_nul_in_a_tenant_path_is_refused_before_storing_secrets(
    client: httpx.AsyncClient,
) -> None:
    from tickwork.webhooks import generate_secret

    response = await client.put(
        "/v1/tenants/acme%00/webhook-secrets", json={"secrets": [generate_secret()]}
    )
    assert error_of(response, 422)["field"] == "tenant"
    listed = await client.get("/v1/tenants/acme/webhook-secrets")
    assert listed.json()["fingerprints"] == []


# -- 2. numbers JSON does not have ------------------------------------------------------------


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "2E+400"])
async def test_non_finite_numbers_anywhere_are_refused_naming_the_path(
    client: httpx.AsyncClient, store: ScheduleStore, number: str
) -> None:
    response = await client.post("/v1/jobs", content=raw_job(X=number), headers=JSON)
    error = error_of(response, 422)
    assert (error["code"], error["field"]) == ("invalid_number", "target.body.x")
    assert "finite number" in error["message"]
    assert await nothing_stored(store)


async def test_a_non_finite_number_in_a_list_names_its_index(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/jobs", content=raw_job(X="[1, 2, NaN]"), headers=JSON)
    assert error_of(response, 422)["field"] == "target.body.x.2"


# -- 3. duplicate keys ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field", "key"),
    [
        (b'{"name": "a", "name": "b", "schedule": {"every": 60}, "target": {"type": "task",'
         b' "name": "t"}}', "name", "'name'"),
        (b'{"name": "a", "schedule": {"every": 60, "every": 30}, "target": {"type": "task",'
         b' "name": "t"}}', "schedule.every", "'every'"),
        (b'{"name": "a", "schedule": {"every": 60}, "target": {"url": "https://example.com",'
         b' "headers": {"X-A": "1", "X-A": "2"}}}', "target.headers.X-A", "'X-A'"),
    ],
)  # fmt: skip
async def test_duplicate_keys_are_refused_naming_the_key(
    client: httpx.AsyncClient, store: ScheduleStore, raw: bytes, field: str, key: str
) -> None:
    error = error_of(await client.post("/v1/jobs", content=raw, headers=JSON), 422)
    assert (error["code"], error["field"]) == ("duplicate_key", field)
    assert key in error["message"]
    assert await nothing_stored(store)


async def test_duplicate_keys_in_a_patch_are_refused(client: httpx.AsyncClient) -> None:
    created = await client.post("/v1/jobs", json=job_body())
    job_id = created.json()["id"]
    raw = b'{"name": "one", "name": "two"}'
    error = error_of(await client.patch(f"/v1/jobs/{job_id}", content=raw, headers=JSON), 422)
    assert (error["code"], error["field"]) == ("duplicate_key", "name")
    assert (await client.get(f"/v1/jobs/{job_id}")).json()["name"] == "nightly report"


# -- 4. the list cursor -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "after", ["zzzz", "", "0191B0C4D2A87F3E9C1B2A3D4E5F6A7B", "1" * 33, "g" * 32]
)
async def test_a_cursor_no_page_gave_is_400_invalid_cursor(
    client: httpx.AsyncClient, after: str
) -> None:
    await client.post("/v1/jobs", json=job_body())
    error = error_of(await client.get("/v1/jobs", params={"after": after}), 400)
    assert (error["code"], error["field"]) == ("invalid_cursor", "after")
    assert "next_after" in error["message"]


async def test_a_cursor_from_a_page_still_pages(client: httpx.AsyncClient) -> None:
    for n in range(3):
        await client.post("/v1/jobs", json=job_body(name=f"job {n}"))
    first = (await client.get("/v1/jobs", params={"limit": 2})).json()
    rest = (await client.get("/v1/jobs", params={"after": first["next_after"]})).json()
    assert [j["name"] for j in first["jobs"] + rest["jobs"]] == ["job 0", "job 1", "job 2"]


# -- 5. unreadable bodies and huge integers ---------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"name": "\xff"}',
        b'{"name": "caf\xe9"}',  # Latin-1
        b'{"name": "\xed\xa0\x80"}',  # a surrogate encoded as if it were a character
        '{"name": "x"}'.encode("utf-16"),
    ],
)
async def test_a_body_that_is_not_utf8_is_400_saying_so(
    client: httpx.AsyncClient, store: ScheduleStore, raw: bytes
) -> None:
    error = error_of(await client.post("/v1/jobs", content=raw, headers=JSON), 400)
    assert error["code"] == "malformed_json"
    assert "not UTF-8" in error["message"]
    assert "nested" not in error["message"]
    assert await nothing_stored(store)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (raw_job(X="9" * 5000), "target.body.x"),
        (raw_job(X="-" + "9" * 1001), "target.body.x"),
        (json.dumps(job_body(retry={})).replace("{}", '{"max_attempts": ' + "1" * 4500 + "}"),
         "retry.max_attempts"),
    ],
)  # fmt: skip
async def test_integers_over_a_thousand_digits_are_422_naming_the_field(
    client: httpx.AsyncClient, store: ScheduleStore, raw: bytes | str, field: str
) -> None:
    content = raw.encode() if isinstance(raw, str) else raw
    error = error_of(await client.post("/v1/jobs", content=content, headers=JSON), 422)
    assert (error["code"], error["field"]) == ("invalid_number", field)
    assert "at most 1000" in error["message"]
    assert await nothing_stored(store)


async def test_a_thousand_digit_integer_is_still_a_number(client: httpx.AsyncClient) -> None:
    big = "9" * 1000
    response = await client.post("/v1/jobs", content=raw_job(X=big), headers=JSON)
    assert response.status_code == 201, response.text
    assert response.json()["target"]["body"] == {"x": int(big)}
