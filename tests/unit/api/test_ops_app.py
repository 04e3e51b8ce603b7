"""The ops server of a scheduler or worker process (api/ops_app.py): /healthz and /metrics
answered as the API's app answers them, the same guard in front, and nothing else served."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import httpx
import pytest
from starlette.types import ASGIApp

from tickwork.api.app import create_app
from tickwork.api.ops_app import create_ops_app
from tickwork.clock import ManualClock
from tickwork.services.keys import KeyService
from tickwork.settings import Settings
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
REMOTE = ("10.1.2.3", 4000)

AppMaker = Callable[[MemoryStore, ManualClock, bool], ASGIApp]


def ops_app(store: MemoryStore, clock: ManualClock, open_ops: bool) -> ASGIApp:
    keys = KeyService(store, clock)
    return create_ops_app(store=store, keys=keys, open_ops=open_ops, max_body_bytes=1024)


def api_app(store: MemoryStore, clock: ManualClock, open_ops: bool) -> ASGIApp:
    return create_app(store=store, clock=clock, settings=Settings(open_ops=open_ops))


@pytest.fixture
async def store() -> AsyncIterator[tuple[MemoryStore, ManualClock]]:
    clock = ManualClock(NOW)
    opened = MemoryStore(clock=clock)
    await opened.open()
    try:
        yield opened, clock
    finally:
        await opened.close()


def client(app: ASGIApp, peer: tuple[str, int] = ("127.0.0.1", 5000)) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=peer)
    return httpx.AsyncClient(transport=transport, base_url="http://tickwork.test")


both_apps = pytest.mark.parametrize("make", [ops_app, api_app], ids=["ops", "api"])


@both_apps
async def test_health_and_metrics_answer_alike_on_loopback(
    make: AppMaker, store: tuple[MemoryStore, ManualClock]
) -> None:
    async with client(make(*store, False)) as http:
        health = await http.get("/healthz")
        metrics = await http.get("/metrics")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain; version=")
    assert "# TYPE" in metrics.text


@both_apps
async def test_metrics_need_a_key_from_another_address(
    make: AppMaker, store: tuple[MemoryStore, ManualClock]
) -> None:
    key = await mint_key(store[0], clock=store[1])
    async with client(make(*store, False), peer=REMOTE) as http:
        refused = await http.get("/metrics")
        wrong = await http.get("/metrics", headers={"Authorization": "Bearer tw_nope"})
        allowed = await http.get("/metrics", headers={"Authorization": f"Bearer {key}"})
        health = await http.get("/healthz")
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthenticated"
    assert "open on loopback only" in refused.json()["error"]["message"]
    assert refused.headers["www-authenticate"] == 'Bearer realm="tickwork"'
    assert wrong.status_code == 401
    assert allowed.status_code == 200
    assert health.status_code == 200  # /healthz stays open


@both_apps
async def test_open_ops_serves_metrics_to_anyone(
    make: AppMaker, store: tuple[MemoryStore, ManualClock]
) -> None:
    async with client(make(*store, True), peer=REMOTE) as http:
        assert (await http.get("/metrics")).status_code == 200


async def test_the_ops_server_serves_nothing_else(store: tuple[MemoryStore, ManualClock]) -> None:
    async with client(ops_app(*store, False)) as http:
        missing = await http.get("/v1/jobs")
        slash = await http.get("/healthz/")
        posted = await http.post("/healthz", json={})
        head = await http.head("/metrics")
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "code": "not_found",
            "message": "no such route: GET /v1/jobs (this process serves only /healthz and "
            "/metrics)",
            "field": None,
        }
    }
    assert slash.status_code == 404
    assert posted.status_code == 405
    assert posted.json()["error"]["code"] == "method_not_allowed"
    assert posted.headers["allow"] == "GET, HEAD"
    assert head.status_code == 200


async def test_the_ops_server_bounds_what_it_reads(store: tuple[MemoryStore, ManualClock]) -> None:
    async with client(ops_app(*store, False)) as http:
        big = await http.post("/healthz", content=b"x" * 2048)
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "body_too_large"
