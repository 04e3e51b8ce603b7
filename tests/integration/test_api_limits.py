"""Limits that hold under abuse, on a real uvicorn server spoken to through raw sockets.

An over-limit upload used to get its 413 while the server went on reading (and discarding)
the rest: 251 MB in 40 s on one connection. Now the 413 closes the connection. Both of
uvicorn's HTTP/1.1 implementations are tried: httptools (what `tickwork up` uses when it is
installed) and h11.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import uvicorn

from tickwork.api.app import create_app
from tickwork.api.http_server import MAX_HEAD_BYTES, server_options
from tickwork.clock import SystemClock
from tickwork.settings import Settings
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

MAX_BODY = 64 * 1024
CHUNK = b"x" * 65536
# What the server may read before it must have closed the connection: the limit, plus what
# the kernel's socket buffers hold on both ends (several MB on loopback), plus slack.
MAX_ACCEPTED_BYTES = 32 * 1024 * 1024
CLOSE_WITHIN_S = 5.0


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    key: str  # an admin key

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    store = MemoryStore()
    asyncio.run(store.open())
    key = asyncio.run(mint_key(store))
    app = create_app(store=store, clock=SystemClock(), settings=Settings(max_body_bytes=MAX_BODY))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # as `tickwork up` configures it (api.http_server), with either HTTP/1.1 implementation
    options = server_options(request.param)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", **options)
    http = uvicorn.Server(config)
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    served = Server("127.0.0.1", sock.getsockname()[1], key)
    for _ in range(200):
        try:
            if httpx.get(f"{served.url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            threading.Event().wait(0.025)  # uvicorn starting in its thread: nothing to await
    try:
        yield served
    finally:
        http.should_exit = True
        thread.join(timeout=10)
        sock.close()


@dataclass
class Upload:
    sent: int  # body bytes the socket accepted
    response: bytes  # what came back
    closed: bool  # the server closed the connection (EOF, reset or broken pipe)
    seconds: float


def keep_sending(server: Server, head: bytes, *, chunked: bool) -> Upload:
    """Send `head`, then body chunks without end, reading whatever comes back, until the server
    closes the connection or CLOSE_WITHIN_S passes."""
    conn = socket.create_connection((server.host, server.port), timeout=CLOSE_WITHIN_S)
    conn.sendall(head)
    conn.setblocking(False)
    frame = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK
    sent, response, closed, pending = 0, b"", False, b""
    started = time.monotonic()
    try:
        while not closed and time.monotonic() - started < CLOSE_WITHIN_S:
            try:
                data = conn.recv(65536)
                closed = not data
                response += data
            except BlockingIOError:
                pass
            except ConnectionError:
                closed = True
            if closed:
                break
            pending = pending or frame
            try:
                n = conn.send(pending)
            except BlockingIOError:
                time.sleep(0.001)  # the buffers are full; a raw socket has nothing to await
                continue
            except ConnectionError:
                closed = True
                break
            sent += n
            pending = pending[n:]
    finally:
        conn.close()
    return Upload(sent, response, closed, time.monotonic() - started)


def test_a_chunked_upload_over_the_limit_gets_413_and_the_connection_closed(
    server: Server,
) -> None:
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    upload = keep_sending(server, head, chunked=True)
    assert upload.response.startswith(b"HTTP/1.1 413"), upload.response[:200]
    assert b"connection: close" in upload.response.lower()
    assert b'"body_too_large"' in upload.response
    assert upload.closed, f"still open after {upload.seconds:.1f} s and {upload.sent} bytes"
    assert upload.sent < MAX_ACCEPTED_BYTES


def test_a_declared_length_over_the_limit_gets_413_and_the_connection_closed(
    server: Server,
) -> None:
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Content-Length: 300000000\r\n\r\n"
    )
    upload = keep_sending(server, head, chunked=False)
    assert upload.response.startswith(b"HTTP/1.1 413"), upload.response[:200]
    assert b"connection: close" in upload.response.lower()
    assert upload.closed, f"still open after {upload.seconds:.1f} s and {upload.sent} bytes"
    assert upload.sent < MAX_ACCEPTED_BYTES


def test_a_body_within_the_limit_keeps_the_connection(server: Server) -> None:
    with httpx.Client(base_url=server.url, headers=server.auth) as client:
        first = client.post("/v1/jobs", json={"name": "x"})
        second = client.get("/healthz")
    assert first.status_code == 422
    assert "connection" not in first.headers or first.headers["connection"] != "close"
    assert second.status_code == 200


def test_more_than_100_headers_are_refused_with_431(server: Server) -> None:
    headers = [(f"x-h{n}", "1") for n in range(101)]
    response = httpx.get(f"{server.url}/v1/jobs", headers=headers)
    assert response.status_code == 431
    error = response.json()["error"]
    assert error["code"] == "too_many_headers"
    assert "at most 100" in error["message"]
    fine = httpx.get(f"{server.url}/v1/jobs", headers=[*headers[:90], *server.auth.items()])
    assert fine.status_code == 200


def test_a_request_head_over_the_limit_is_refused_before_the_rest_is_read(server: Server) -> None:
    # httptools read a 5 MB header whole and handed it to the app; now the head is bounded
    # (h11 had its own bound, answered with uvicorn's plain 400)
    head = b"GET /v1/jobs HTTP/1.1\r\nHost: t\r\nX-Big: "
    upload = keep_sending(server, head, chunked=False)
    assert upload.response.startswith((b"HTTP/1.1 431", b"HTTP/1.1 400")), upload.response[:200]
    assert b"connection: close" in upload.response.lower()
    assert upload.closed, f"still open after {upload.seconds:.1f} s and {upload.sent} bytes"
    assert upload.sent < MAX_ACCEPTED_BYTES
    if upload.response.startswith(b"HTTP/1.1 431"):
        assert b'"request_headers_too_large"' in upload.response


def test_a_request_head_within_the_limit_is_served(server: Server) -> None:
    value = "v" * (MAX_HEAD_BYTES - 1024)
    response = httpx.get(f"{server.url}/v1/jobs", headers={"x-big": value, **server.auth})
    assert response.status_code == 200
