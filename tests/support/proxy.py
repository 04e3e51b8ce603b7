"""A small real HTTP proxy on 127.0.0.1 for the outbound-proxy tests.

It speaks the two forms a client uses: `CONNECT host:port` (a tunnel, for https targets) and
absolute-form requests (`GET http://host:port/path`, for http targets), which it forwards in
origin form without the `proxy-authorization` header. After the first request of a connection
it pipes the rest of that connection's bytes to the same target (a keep-alive connection to a
proxy is used for one origin only by the client under test).

It records what it forwarded (`Forwarded`: one per client connection) and can require Basic
credentials (407 without them). `names` maps a host to the address it connects to instead of
resolving it, standing in for the proxy's own DNS.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class Forwarded:
    kind: str  # "connect" or "absolute"
    authority: str  # host:port as the client named it
    proxy_authorization: str | None
    request_line: str  # as sent to the target ("" for a tunnel)


@dataclass
class ForwardProxy:
    credentials: tuple[str, str] | None = None  # (user, password) required, if set
    names: dict[str, str] = field(default_factory=dict)  # host -> address it connects to
    forwarded: list[Forwarded] = field(default_factory=list)
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self) -> ForwardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task
        if self._server is not None:
            await self._server.wait_closed()

    def url(self, userinfo: str = "") -> str:
        return f"http://{userinfo}127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._relay(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ", 2)
        headers = [line for line in header_lines if line]
        authorization = next(
            (h.split(":", 1)[1].strip() for h in headers if _named(h, "proxy-authorization")),
            None,
        )
        if not self._authorized(authorization):
            writer.write(
                b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                b'proxy-authenticate: Basic realm="test"\r\ncontent-length: 0\r\n\r\n'
            )
            await writer.drain()
            return
        if method == "CONNECT":
            authority = target
            upstream_reader, upstream_writer = await self._open(authority)
            self.forwarded.append(Forwarded("connect", authority, authorization, ""))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            parts = urlsplit(target)
            authority = parts.netloc
            upstream_reader, upstream_writer = await self._open(authority)
            origin_form = f"{method} {parts.path or '/'}{'?' + parts.query if parts.query else ''}"
            line = f"{origin_form} {version}"
            self.forwarded.append(Forwarded("absolute", authority, authorization, line))
            kept = [h for h in headers if not _named(h, "proxy-authorization")]
            upstream_writer.write("\r\n".join([line, *kept, "", ""]).encode("latin-1"))
        try:
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            upstream_writer.close()

    def _authorized(self, header: str | None) -> bool:
        if self.credentials is None:
            return True
        user, password = self.credentials
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return header == expected

    async def _open(self, authority: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, _, port = authority.rpartition(":")
        host = host.strip("[]")
        return await asyncio.open_connection(self.names.get(host, host), int(port))


def _named(header: str, name: str) -> bool:
    return header.split(":", 1)[0].strip().lower() == name


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
    finally:
        with contextlib.suppress(OSError):
            if sink.can_write_eof():
                sink.write_eof()
