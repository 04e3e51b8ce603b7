"""The webhook HTTP/1.1 client against real servers on 127.0.0.1: pooling, framing, failures,
the SSRF guard and TLS. Servers are bare asyncio servers scripted per test, so each test
decides exactly what goes over the wire."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tickwork.clock import ManualClock
from tickwork.worker.executors.http1 import BODY_LIMIT, Http1Client, ResponseBroken
from tickwork.worker.executors.ssrf import AddressPolicy, ForbiddenAddress, ForbiddenHost

LOOPBACK = AddressPolicy(allow=["127.0.0.1/32"])
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, "Server"], Awaitable[None]]


@dataclass
class Server:
    port: int = 0
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)  # each request's head and body


async def read_request(reader: asyncio.StreamReader, server: Server) -> bytes | None:
    """One request (head + content-length body), recorded; None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    request = head + await reader.readexactly(length)
    server.requests.append(request)
    return request


async def answer_each(reply: bytes) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server) -> None:
        while await read_request(reader, s) is not None:
            writer.write(reply)
        writer.close()

    return handle


@asynccontextmanager
async def serving(handler: Handler, *, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        with suppress(ConnectionError, asyncio.IncompleteReadError):
            await handler(reader, writer, server)

    listening = await asyncio.start_server(on_connect, "127.0.0.1", 0, ssl=tls)
    server.port = listening.sockets[0].getsockname()[1]
    try:
        yield server
    finally:
        listening.close()


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


async def test_requests_reuse_one_kept_alive_connection() -> None:
    client = Http1Client(LOOPBACK)
    async with serving(await answer_each(OK)) as server:
        for n in range(3):
            response = await client.request(
                "POST", f"http://127.0.0.1:{server.port}/hook?n={n}",
                headers={"webhook-id": f"k{n}"}, body=b'{"a": 1}', timeout_s=5,
            )  # fmt: skip
            assert (response.status, response.body) == (200, b"ok")
        assert server.connections == 1
        first = server.requests[0]
        assert first.startswith(b"POST /hook?n=0 HTTP/1.1\r\n")
        assert f"host: 127.0.0.1:{server.port}\r\n".encode() in first
        assert b"webhook-id: k0\r\n" in first
        assert first.endswith(b'content-length: 8\r\n\r\n{"a": 1}')
    await client.close()


async def test_a_connection_the_server_closed_while_idle_is_replaced_transparently() -> None:
    async def one_per_connection(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader, s)
        writer.write(OK)  # says keep-alive (HTTP/1.1 default), then closes anyway
        await writer.drain()
        writer.close()

    client = Http1Client(LOOPBACK)
    async with serving(one_per_connection) as server:
        url = f"http://127.0.0.1:{server.port}/"
        for _ in range(3):
            response = await client.request("GET", url, headers={}, body=None, timeout_s=5)
            assert response.status == 200
        assert (server.connections, len(server.requests)) == (3, 3)
    await client.close()


async def test_an_idle_connection_is_dropped_after_idle_timeout_by_the_clients_clock() -> None:
    clock = ManualClock(datetime(2026, 3, 1, tzinfo=UTC))
    client = Http1Client(LOOPBACK, idle_timeout_s=15, clock=clock)
    async with serving(await answer_each(OK)) as server:
        url = f"http://127.0.0.1:{server.port}/"

        async def get() -> None:
            response = await client.request("GET", url, headers={}, body=None, timeout_s=5)
            assert response.status == 200

        await get()
        clock.advance(timedelta(seconds=14))
        await get()  # idle 14 s: reused
        assert server.connections == 1
        clock.advance(timedelta(seconds=15, milliseconds=1))
        await get()  # idle past 15 s: a server may have closed it, so a new one
        assert (server.connections, len(server.requests)) == (2, 3)
    await client.close()


async def test_connection_close_chunked_and_read_until_close_answers() -> None:
    replies = [
        b"HTTP/1.1 503 Busy\r\nretry-after: 7\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        b"HTTP/1.1 500 Oops\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        b"HTTP/1.0 201 Created\r\n\r\nuntil the end",  # no length: the body ends at close
    ]

    async def scripted(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while await read_request(reader, s) is not None:
            reply = replies[len(s.requests) - 1]
            writer.write(reply)
            if b"HTTP/1.0" in reply or b"connection: close" in reply:
                await writer.drain()
                writer.close()
                return

    client = Http1Client(LOOPBACK)
    async with serving(scripted) as server:
        url = f"http://127.0.0.1:{server.port}/"
        got = [await client.request("GET", url, headers={}, body=None, timeout_s=5)
               for _ in replies]  # fmt: skip
        assert [(r.status, r.body) for r in got] == [
            (503, b""), (500, b"abcde"), (201, b"until the end"),
        ]  # fmt: skip
        assert got[0].headers["retry-after"] == "7"
        # "connection: close" and the HTTP/1.0 answer each ended their connection.
        assert server.connections == 2
    await client.close()


async def test_a_long_answer_is_cut_to_the_limit_and_the_connection_still_reused() -> None:
    big = b"x" * (BODY_LIMIT + 10_000)
    reply = b"HTTP/1.1 500 Big\r\ncontent-length: %d\r\n\r\n%s" % (len(big), big)
    client = Http1Client(LOOPBACK)
    async with serving(await answer_each(reply)) as server:
        url = f"http://127.0.0.1:{server.port}/"
        for _ in range(2):
            response = await client.request("GET", url, headers={}, body=None, timeout_s=5)
            assert (response.status, len(response.body)) == (500, BODY_LIMIT)
        assert server.connections == 1
    await client.close()


def silent_on_first_connection(answer_when: asyncio.Event | None = None) -> Handler:
    """Never answers on the first connection; answers OK on the others (once `answer_when`
    is set, if given)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server) -> None:
        first = s.connections == 1
        while await read_request(reader, s) is not None:
            if not first:
                if answer_when is not None:
                    await answer_when.wait()
                writer.write(OK)

    return handle


async def test_silence_times_out_and_the_connection_is_not_reused() -> None:
    client = Http1Client(LOOPBACK)
    async with serving(silent_on_first_connection()) as server:
        url = f"http://127.0.0.1:{server.port}/"
        with pytest.raises(TimeoutError):
            await client.request("GET", url, headers={}, body=None, timeout_s=0.3)
        response = await client.request("GET", url, headers={}, body=None, timeout_s=5)
        assert response.status == 200
        assert server.connections == 2
    await client.close()


async def test_a_timeout_is_one_requests_own_and_leaves_its_task_uncancelled() -> None:
    # Timeouts share one loop timer (worker/deadlines.py): the silent request's deadline must
    # cancel only its own task, come out as a TimeoutError, and leave that task able to await
    # again; the request answered meanwhile on another connection is not disturbed.
    answer_now = asyncio.Event()
    client = Http1Client(LOOPBACK)
    async with serving(silent_on_first_connection(answer_now)) as server:
        url = f"http://127.0.0.1:{server.port}/"

        async def silent() -> str:
            try:
                await client.request("GET", url, headers={}, body=None, timeout_s=0.2)
            except TimeoutError:
                task = asyncio.current_task()
                assert task is not None
                assert task.cancelling() == 0
                await asyncio.sleep(0)  # a cancel left pending would be raised here
                answer_now.set()
                return "timed out"
            return "answered"

        async def answered() -> int:
            response = await client.request("GET", url, headers={}, body=None, timeout_s=5)
            return response.status

        silent_task = asyncio.create_task(silent())
        await asyncio.sleep(0)  # the silent request takes the first connection
        results = await asyncio.gather(silent_task, answered())
        assert results == ["timed out", 200]
    await client.close()


async def test_a_cancel_from_elsewhere_stays_a_cancel_not_a_timeout() -> None:
    received = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server) -> None:
        while await read_request(reader, s) is not None:
            received.set()

    client = Http1Client(LOOPBACK)
    async with serving(silent) as server:
        url = f"http://127.0.0.1:{server.port}/"
        task = asyncio.create_task(client.request("GET", url, headers={}, body=None, timeout_s=5))
        await received.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The cancelled request's connection is not handed to the next one.
        with pytest.raises(TimeoutError):
            await client.request("GET", url, headers={}, body=None, timeout_s=0.2)
        assert server.connections == 2
    await client.close()


async def test_garbage_and_a_half_answer_are_broken_responses() -> None:
    async def garbage(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        await read_request(reader, s)
        writer.write(b"SMTP ready\r\n\r\n" if s.connections == 1 else OK[:20])
        await writer.drain()
        writer.close()

    client = Http1Client(LOOPBACK)
    async with serving(garbage) as server:
        url = f"http://127.0.0.1:{server.port}/"
        with pytest.raises(ResponseBroken, match=r"not an HTTP/1\.1 answer"):
            await client.request("GET", url, headers={}, body=None, timeout_s=5)
        with pytest.raises(ResponseBroken, match="mid-answer"):
            await client.request("GET", url, headers={}, body=None, timeout_s=5)
    await client.close()


async def test_refused_connection_is_an_os_error() -> None:
    async with serving(await answer_each(OK)) as server:
        port = server.port
    client = Http1Client(LOOPBACK)
    with pytest.raises(ConnectionRefusedError):
        await client.request("GET", f"http://127.0.0.1:{port}/", headers={}, body=None,
                             timeout_s=5)  # fmt: skip


async def test_headers_cannot_smuggle_or_override_the_framing() -> None:
    client = Http1Client(LOOPBACK)
    async with serving(await answer_each(OK)) as server:
        url = f"http://user:pa%20ss@127.0.0.1:{server.port}/"
        with pytest.raises(ValueError, match="CR, LF or NUL"):
            await client.request("GET", url, headers={"x-a": "1\r\nx-b: 2"}, body=None,
                                 timeout_s=5)  # fmt: skip
        await client.request(
            "POST", url, headers={"Host": "evil", "Content-Length": "999"}, body=b"hi",
            timeout_s=5,
        )  # fmt: skip
        sent = server.requests[-1].lower()
        assert b"evil" not in sent
        assert b"999" not in sent
        assert sent.endswith(b"content-length: 2\r\n\r\nhi")
        assert b"authorization: basic dxnlcjpwysbzcw==\r\n" in sent  # user:pa ss
    await client.close()


async def test_a_redirect_is_an_answer_not_followed() -> None:
    reply = b"HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/\r\ncontent-length: 0\r\n\r\n"
    client = Http1Client(LOOPBACK)
    async with serving(await answer_each(reply)) as server:
        url = f"http://127.0.0.1:{server.port}/"
        response = await client.request("GET", url, headers={}, body=None, timeout_s=5)
        assert (response.status, len(server.requests)) == (302, 1)
    await client.close()


# -- the SSRF guard ------------------------------------------------------------------------------


def stub_resolver(answers: dict[str, list[str]]) -> Callable[[str, int], Awaitable[Sequence[str]]]:
    async def resolve(host: str, port: int) -> Sequence[str]:
        return answers[host]

    return resolve


async def test_loopback_is_refused_without_an_allow_list_before_any_connection() -> None:
    async with serving(await answer_each(OK)) as server:
        client = Http1Client(resolve=stub_resolver({"hooks.example": ["127.0.0.1"]}))
        with pytest.raises(ForbiddenAddress, match="loopback"):
            await client.request("GET", f"http://127.0.0.1:{server.port}/", headers={},
                                 body=None, timeout_s=5)  # fmt: skip
        with pytest.raises(ForbiddenHost, match=r"hooks\.example"):
            await client.request("GET", f"http://hooks.example:{server.port}/", headers={},
                                 body=None, timeout_s=5)  # fmt: skip
        assert server.connections == 0


async def test_a_mixed_answer_connects_only_to_the_permitted_address() -> None:
    resolve = stub_resolver({"hooks.example": ["169.254.169.254", "10.0.0.7", "127.0.0.1"]})
    client = Http1Client(LOOPBACK, resolve=resolve)
    async with serving(await answer_each(OK)) as server:
        response = await client.request("GET", f"http://hooks.example:{server.port}/x",
                                        headers={}, body=None, timeout_s=5)  # fmt: skip
        assert response.status == 200
        assert f"host: hooks.example:{server.port}\r\n".encode() in server.requests[0]
    await client.close()


async def test_metadata_and_bad_schemes_are_refused_before_any_lookup() -> None:
    looked_up: list[str] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        looked_up.append(host)
        return ["127.0.0.1"]

    client = Http1Client(LOOPBACK, resolve=resolve)
    for url in ("http://169.254.169.254/latest/meta-data", "file:///etc/passwd",
                "http://2130706433/"):  # fmt: skip
        with pytest.raises(OSError, match="refused"):
            await client.request("GET", url, headers={}, body=None, timeout_s=5)
    assert looked_up == []


# -- TLS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def localhost_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is needed to make a test certificate (apt-get install openssl)")
    tmp = tmp_path_factory.mktemp("tls")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=hooks.test", "-addext", "subjectAltName=DNS:hooks.test",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_verifies_the_certificate_for_the_urls_host(
    localhost_cert: tuple[Path, Path],
) -> None:
    cert, key = localhost_cert
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    resolve = stub_resolver({"hooks.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    trusting = ssl.create_default_context(cafile=str(cert))
    async with serving(await answer_each(OK), tls=server_tls) as server:
        client = Http1Client(LOOPBACK, resolve=resolve, ssl_context=trusting)
        response = await client.request("GET", f"https://hooks.test:{server.port}/",
                                         headers={}, body=None, timeout_s=5)  # fmt: skip
        assert response.status == 200
        # The same server under a name its certificate does not carry: refused.
        with pytest.raises(ssl.SSLCertVerificationError):
            await client.request("GET", f"https://other.test:{server.port}/", headers={},
                                 body=None, timeout_s=5)  # fmt: skip
        await client.close()
        # And with the system's trust store, the self-signed certificate is not trusted.
        default = Http1Client(LOOPBACK, resolve=resolve)
        with pytest.raises(ssl.SSLCertVerificationError):
            await default.request("GET", f"https://hooks.test:{server.port}/", headers={},
                                  body=None, timeout_s=5)  # fmt: skip
        await default.close()
