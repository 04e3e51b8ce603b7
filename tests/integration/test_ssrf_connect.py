"""The SSRF guard in a real aiohttp client against a real server on 127.0.0.1.

Every connect the client makes is recorded; the recorder itself refuses anything outside
127.0.0.0/8, so even a broken guard cannot send a packet to the metadata range.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from tickwork.worker.executors.ssrf import (
    AddressPolicy,
    ForbiddenAddress,
    ForbiddenHost,
    refusal_of,
)
from tickwork.worker.executors.ssrf_aiohttp import guarded_connector

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
ALLOW_LOOPBACK = AddressPolicy(allow=["127.0.0.1/32"])


@dataclass
class Server:
    """Records every request; /redirect answers 302 to the metadata service."""

    requests: list[str] = field(default_factory=list)
    port: int = 0
    runner: web.AppRunner | None = None

    async def start(self) -> Server:
        app = web.Application()
        app.router.add_get("/redirect", self._redirect)
        app.router.add_get("/{tail:.*}", self._ok)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        assert site._server is not None
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def _ok(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.Response(text="ok")

    async def _redirect(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")


class StubResolver(AbstractResolver):
    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host, host=address, port=port, family=socket.AF_INET, proto=0, flags=0
            )
            for address in self.table[host]
        ]

    async def close(self) -> None:
        pass


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = await Server().start()
    yield srv
    assert srv.runner is not None
    await srv.runner.cleanup()


@pytest.fixture
async def connects(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Addresses the client connected to; a non-loopback connect fails instead of happening."""
    loop = asyncio.get_running_loop()
    original = loop.sock_connect
    seen: list[tuple[str, int]] = []

    async def recording(sock: socket.socket, address: Any) -> None:
        seen.append((address[0], address[1]))
        if ipaddress.ip_address(address[0]) not in LOOPBACK:
            raise OSError(f"test safety net: refused to connect to {address[0]}")
        await original(sock, address)

    monkeypatch.setattr(loop, "sock_connect", recording)
    return seen


async def get(
    url: str, policy: AddressPolicy, resolver: AbstractResolver | None = None, **kw: Any
) -> int:
    connector = guarded_connector(policy, resolver=resolver)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(url, timeout=aiohttp.ClientTimeout(total=10), **kw) as response,
    ):
        await response.read()
        return response.status


async def refused(
    url: str, policy: AddressPolicy, resolver: AbstractResolver | None = None, **kw: Any
) -> BaseException:
    with pytest.raises(aiohttp.ClientConnectorError) as info:
        await get(url, policy, resolver, **kw)
    assert refusal_of(info.value) is not None, info.value
    return info.value


async def test_loopback_literal_is_refused_without_an_allow_list(
    server: Server, connects: list[tuple[str, int]]
) -> None:
    exc = await refused(f"http://127.0.0.1:{server.port}/hook", AddressPolicy())
    assert isinstance(refusal_of(exc), ForbiddenAddress)
    assert "127.0.0.1: loopback" in str(exc)
    assert connects == []
    assert server.requests == []


async def test_loopback_literal_is_reached_with_the_allow_list(
    server: Server, connects: list[tuple[str, int]]
) -> None:
    assert await get(f"http://127.0.0.1:{server.port}/hook", ALLOW_LOOPBACK) == 200
    assert server.requests == ["/hook"]
    assert connects == [("127.0.0.1", server.port)]


@pytest.mark.parametrize("host", ["localhost", "0x7f000001"])
async def test_names_that_resolve_to_loopback_are_refused(
    host: str, server: Server, connects: list[tuple[str, int]]
) -> None:
    # The real system resolver (getaddrinfo): /etc/hosts and numeric parsing, no network.
    exc = await refused(f"http://{host}:{server.port}/hook", AddressPolicy())
    assert isinstance(refusal_of(exc), ForbiddenHost)
    assert connects == []
    assert server.requests == []


async def test_metadata_name_is_refused_before_any_socket(
    connects: list[tuple[str, int]],
) -> None:
    stub = StubResolver({"metadata.test": ["169.254.169.254"]})
    exc = await refused("http://metadata.test/latest/meta-data/", ALLOW_LOOPBACK, stub)
    refusal = refusal_of(exc)
    assert isinstance(refusal, ForbiddenHost)
    assert "169.254.169.254: link-local" in str(refusal)
    assert connects == []


async def test_mixed_answer_connects_only_to_the_permitted_address(
    server: Server, connects: list[tuple[str, int]]
) -> None:
    stub = StubResolver({"mixed.test": ["169.254.169.254", "10.0.0.5", "127.0.0.1"]})
    assert await get(f"http://mixed.test:{server.port}/hook", ALLOW_LOOPBACK, stub) == 200
    assert connects == [("127.0.0.1", server.port)]
    assert server.requests == ["/hook"]


async def test_a_followed_redirect_to_metadata_is_refused(
    server: Server, connects: list[tuple[str, int]]
) -> None:
    # The executor never follows redirects; this shows the guard holds even if someone does.
    exc = await refused(f"http://127.0.0.1:{server.port}/redirect", ALLOW_LOOPBACK)
    assert "169.254.169.254: link-local" in str(exc)
    assert connects == [("127.0.0.1", server.port)]
    assert server.requests == ["/redirect"]


async def test_without_following_the_redirect_is_just_an_answer(
    server: Server, connects: list[tuple[str, int]]
) -> None:
    url = f"http://127.0.0.1:{server.port}/redirect"
    assert await get(url, ALLOW_LOOPBACK, allow_redirects=False) == 302
    assert connects == [("127.0.0.1", server.port)]
