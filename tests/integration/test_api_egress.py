"""SSRF at create time: what the worker's guard would refuse whatever DNS says is refused when
the job is created or changed (422 `forbidden_address`), with the guard's own rules and the
same `webhook_allow` setting. Names pass: the guard decides on what they resolve to when fired
(tests/integration/test_ssrf_connect.py proves that side).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tickwork.api.app import create_app
from tickwork.clock import SystemClock
from tickwork.settings import Settings
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

from .test_api import error_of, job_body

FORBIDDEN = [
    "http://127.0.0.1/hook",
    "http://127.1/",
    "http://0.0.0.0:8080/",
    "http://10.0.0.5/",
    "http://172.16.3.4/",
    "http://192.168.1.1/",
    "http://100.100.100.200/",  # Alibaba Cloud's metadata service (CGNAT space)
    "http://169.254.169.254/latest/meta-data/",
    "https://[::1]/",
    "http://[::]/",
    "http://[fe80::1]/",
    "http://[fd00:ec2::254]/",  # AWS's IPv6 metadata service
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
    "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
    "http://[2002:a00:5::1]/",  # 6to4 of 10.0.0.5
    "http://[::127.0.0.1]/",  # IPv4-compatible
    "http://2130706433/",  # decimal 127.0.0.1
    "http://0x7f000001/",  # hex
    "http://0x7f.0.0.1/",
    "http://0177.0.0.1/",  # octal
    "http://017700000001/",
    "http://134744072/",  # decimal 8.8.8.8: public, but a form the guard never connects to
    "http://localhost:8080/",
    "http://api.localhost/",
    "http://LOCALHOST./",
    "http://user:pass@127.0.0.1/",
    "http://example.com@10.0.0.1/",  # userinfo trick: the host is 10.0.0.1
    "http://\uff11\uff12\uff17.0.0.1/",  # fullwidth digits, normalised to 127.0.0.1
]
ACCEPTED = [
    "https://example.com/hook",
    "http://93.184.215.14/",
    "http://[2606:4700::1111]/",
    "http://internal.example/",  # a name: the worker checks what it resolves to
    "http://10.0.0.5.nip.example/",
]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with await _client(Settings()) as c:
        yield c


async def _client(settings: Settings) -> httpx.AsyncClient:
    """A client of an app on a memory store, with an admin key."""
    store = MemoryStore()
    key = await mint_key(store)
    app = create_app(store=store, clock=SystemClock(), settings=settings)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(
        transport=transport,
        base_url="http://tickwork.test",
        headers={"Authorization": f"Bearer {key}"},
    )


def webhook(url: str) -> dict[str, Any]:
    return job_body(target={"url": url})


@pytest.mark.parametrize("url", FORBIDDEN)
async def test_forbidden_literal_addresses_are_refused_at_create(
    client: httpx.AsyncClient, url: str
) -> None:
    error = error_of(await client.post("/v1/jobs", json=webhook(url)), 422)
    assert (error["code"], error["field"]) == ("forbidden_address", "target.url")
    assert "public addresses" in error["message"]
    assert "webhook_allow" in error["message"]
    assert (await client.get("/v1/jobs")).json()["jobs"] == []


@pytest.mark.parametrize("url", FORBIDDEN[:: len(FORBIDDEN) // 8])
async def test_and_in_an_alert_and_in_an_edit(client: httpx.AsyncClient, url: str) -> None:
    alert = job_body(on_failure={"url": url})
    error = error_of(await client.post("/v1/jobs", json=alert), 422)
    assert (error["code"], error["field"]) == ("forbidden_address", "on_failure.url")
    job = (await client.post("/v1/jobs", json=job_body())).json()
    edits = [
        ({"target": {"url": url}}, "target.url"),
        ({"on_failure": {"url": url}}, "on_failure.url"),
    ]
    for edit, field in edits:
        error = error_of(await client.patch(f"/v1/jobs/{job['id']}", json=edit), 422)
        assert (error["code"], error["field"]) == ("forbidden_address", field)
    assert (await client.get(f"/v1/jobs/{job['id']}")).json()["target"]["url"] == (
        "https://example.com/hook"
    )


@pytest.mark.parametrize("url", ACCEPTED)
async def test_public_addresses_and_names_are_accepted(client: httpx.AsyncClient, url: str) -> None:
    response = await client.post("/v1/jobs", json=webhook(url))
    assert response.status_code == 201, response.text


async def test_the_reason_is_the_guards() -> None:
    async with await _client(Settings()) as client:
        response = await client.post("/v1/jobs", json=webhook("http://[64:ff9b::a9fe:a9fe]/"))
    message = error_of(response, 422)["message"]
    assert "NAT64 form of 169.254.169.254" in message
    assert "link-local" in message


async def test_the_allow_list_admits_what_it_admits_at_fire_time() -> None:
    settings = Settings(webhook_allow=["127.0.0.1/32", "10.1.0.0/16"])
    async with await _client(settings) as client:
        for url in [
            "http://127.0.0.1:9/x",
            "http://[::ffff:127.0.0.1]/",
            "http://10.1.2.3/",
            "http://localhost:8080/",
        ]:
            response = await client.post("/v1/jobs", json=webhook(url))
            assert response.status_code == 201, (url, response.text)
        for url in ["http://127.0.0.2/", "http://10.2.0.1/", "http://2130706433/"]:
            error = error_of(await client.post("/v1/jobs", json=webhook(url)), 422)
            assert error["code"] == "forbidden_address", url


async def test_task_targets_have_no_url_to_check(client: httpx.AsyncClient) -> None:
    body = job_body(target={"type": "task", "name": "reports.build"})
    assert (await client.post("/v1/jobs", json=body)).status_code == 201
