"""The SSRF guard of the path fires take (`WebhookRunner` over `Http1Client`) against the vector
table in tests/support/ssrf_vectors.py, DNS rebinding, redirects and request-head tricks.

Counting receivers listen on 127.0.0.1, 127.0.0.2 and ::1, all on one port, and count every
connection they accept; every vector's URL names that port, so a vector that got through would
be counted. Each family also has a permitted control that must land on a receiver: proof that
the harness sees a connection when one happens.

A tripwire on the event loop (tests/support/ssrf_harness.py) records every address a socket
connects to and refuses any outside loopback, and refuses any name lookup (the stub resolvers
answer every name), so even a broken guard sends nothing off this machine.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import suppress
from dataclasses import dataclass, field

import pytest

from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.webhook import WebhookRunner

from ..support.ssrf_harness import (
    StubResolver,
    Tripwire,
    assert_refused_by_guard,
    fire_for,
    fire_once,
    install_tripwire,
)
from ..support.ssrf_vectors import (
    ALLOW_ALL_LOOPBACK,
    ALLOW_STAND_IN,
    CONTROLS,
    FAMILIES,
    PUBLIC_STAND_IN,
    VECTORS,
    Control,
    Vector,
)

V4_RECEIVERS = ("127.0.0.1", PUBLIC_STAND_IN)
V6_RECEIVER = "::1"
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
CLOSE_AFTER_OK = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"


def ipv6_loopback_available() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


HAS_IPV6 = ipv6_loopback_available()


# -- the counting receivers ---------------------------------------------------------------------


@dataclass
class Receiver:
    address: str
    accepts: int = 0
    requests: list[bytes] = field(default_factory=list)  # each request's head


@dataclass
class Receivers:
    """Servers on every loopback address a vector could reach, sharing one port."""

    port: int = 0
    reply: bytes = OK
    by_address: dict[str, Receiver] = field(default_factory=dict)

    def accepts(self) -> dict[str, int]:
        return {address: r.accepts for address, r in self.by_address.items()}

    def untouched(self) -> dict[str, int]:
        return dict.fromkeys(self.by_address, 0)

    def request_heads(self) -> list[bytes]:
        return [head for r in self.by_address.values() for head in r.requests]


async def _serve_one_connection(
    receivers: Receivers, receiver: Receiver, reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:  # fmt: skip
    receiver.accepts += 1
    with suppress(ConnectionError, asyncio.IncompleteReadError):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            receiver.requests.append(head)
            length = _content_length(head)
            if length:
                await reader.readexactly(length)
            writer.write(receivers.reply)
            await writer.drain()
            if b"connection: close" in receivers.reply:
                break
    writer.close()


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


async def _listen_on_one_port(
    receivers: Receivers, addresses: Sequence[str]
) -> list[asyncio.Server]:
    """Bind every address to one port (a free port on the first may be taken on another)."""
    for _ in range(50):
        servers: list[asyncio.Server] = []
        try:
            for address in addresses:
                receiver = Receiver(address)

                async def on_connect(
                    reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    receiver: Receiver = receiver,
                ) -> None:  # fmt: skip
                    await _serve_one_connection(receivers, receiver, reader, writer)

                server = await asyncio.start_server(on_connect, address, receivers.port)
                servers.append(server)
                receivers.port = server.sockets[0].getsockname()[1]
                receivers.by_address[address] = receiver
        except OSError:
            for server in servers:
                server.close()
            receivers.port, receivers.by_address = 0, {}
            continue
        return servers
    raise RuntimeError("no port was free on every loopback address in 50 tries")


@pytest.fixture
async def receivers() -> AsyncIterator[Receivers]:
    found = Receivers()
    addresses = [*V4_RECEIVERS, V6_RECEIVER] if HAS_IPV6 else list(V4_RECEIVERS)
    servers = await _listen_on_one_port(found, addresses)
    yield found
    for server in servers:
        server.close()
        await server.wait_closed()


# -- the tripwire -------------------------------------------------------------------------------


@pytest.fixture
async def tripwire(monkeypatch: pytest.MonkeyPatch) -> Tripwire:
    return install_tripwire(monkeypatch)


# -- the vector table -----------------------------------------------------------------------------


def test_the_table_has_at_least_40_distinct_vectors_and_a_control_per_family() -> None:
    ids = [v.id for v in VECTORS]
    assert len(set(ids)) == len(ids) >= 40
    distinct = {
        (v.url, v.allow, tuple(sorted((name, tuple(a)) for name, a in v.names.items())))
        for v in VECTORS
    }
    assert len(distinct) == len(VECTORS)
    assert {c.family for c in CONTROLS} == FAMILIES


@pytest.mark.parametrize("vector", VECTORS, ids=[v.id for v in VECTORS])
async def test_a_vector_is_refused_before_any_connection(
    vector: Vector, receivers: Receivers, tripwire: Tripwire
) -> None:
    resolve = StubResolver(vector.names)
    attempt = await fire_once(
        vector.url.format(port=receivers.port), allow=vector.allow, resolve=resolve
    )
    assert_refused_by_guard(attempt, vector.refusal)
    assert tripwire.connects == []
    assert receivers.accepts() == receivers.untouched()
    assert tripwire.lookups == []
    # Only names were looked up, and each at most once: the address checked is the one used.
    assert resolve.asked == ([next(iter(vector.names))] if vector.names else [])


@pytest.mark.parametrize("control", CONTROLS, ids=[c.id for c in CONTROLS])
async def test_a_permitted_control_of_each_family_lands_on_its_receiver(
    control: Control, receivers: Receivers, tripwire: Tripwire
) -> None:
    if control.lands_on not in receivers.by_address:
        pytest.skip(f"no {control.lands_on} on this machine")
    port = receivers.port
    attempt = await fire_once(
        control.url.format(port=port), allow=control.allow, resolve=StubResolver(control.names)
    )
    assert (attempt.ok, attempt.http_status) == (True, 200), attempt.error
    assert tripwire.connects == [(control.connects_to, port)]
    assert receivers.accepts() == {**receivers.untouched(), control.lands_on: 1}
    (head,) = receivers.by_address[control.lands_on].requests
    assert f"\r\nhost: {control.host_header.format(port=port)}\r\n".encode() in head


# -- DNS rebinding ------------------------------------------------------------------------------


async def test_rebinding_to_loopback_after_a_permitted_answer_never_reaches_loopback(
    receivers: Receivers, tripwire: Tripwire
) -> None:
    # Each answer closes its connection, so every fire needs a new one and a new lookup.
    receivers.reply = CLOSE_AFTER_OK
    resolve = StubResolver({"hooks.test": [PUBLIC_STAND_IN]}, {"hooks.test": ["127.0.0.1"]})
    url = f"http://hooks.test:{receivers.port}/"
    async with WebhookRunner(policy=AddressPolicy(allow=ALLOW_STAND_IN), resolve=resolve) as run:
        first = await run(fire_for(url))
        assert (first.ok, resolve.asked) == (True, ["hooks.test"])  # one lookup per connection
        second = await run(fire_for(url))
    assert_refused_by_guard(second, "127.0.0.1: loopback")
    assert resolve.asked == ["hooks.test", "hooks.test"]
    assert tripwire.connects == [(PUBLIC_STAND_IN, receivers.port)]
    assert receivers.accepts() == {**receivers.untouched(), PUBLIC_STAND_IN: 1}


async def test_rebinding_from_loopback_to_a_permitted_answer_connects_only_to_that(
    receivers: Receivers, tripwire: Tripwire
) -> None:
    resolve = StubResolver({"hooks.test": ["127.0.0.1"]}, {"hooks.test": [PUBLIC_STAND_IN]})
    url = f"http://hooks.test:{receivers.port}/"
    async with WebhookRunner(policy=AddressPolicy(allow=ALLOW_STAND_IN), resolve=resolve) as run:
        first = await run(fire_for(url))
        assert_refused_by_guard(first, "127.0.0.1: loopback")
        assert tripwire.connects == []
        second = await run(fire_for(url))
    assert (second.ok, second.http_status) == (True, 200)
    assert resolve.asked == ["hooks.test", "hooks.test"]
    assert tripwire.connects == [(PUBLIC_STAND_IN, receivers.port)]
    assert receivers.accepts() == {**receivers.untouched(), PUBLIC_STAND_IN: 1}


async def test_a_failed_permitted_address_does_not_fall_back_to_a_refused_one(
    receivers: Receivers, tripwire: Tripwire
) -> None:
    # Nothing listens on 127.0.0.3: its connect fails, and 127.0.0.1 (refused) is not tried.
    resolve = StubResolver({"hooks.test": ["127.0.0.3", "127.0.0.1"]})
    attempt = await fire_once(
        f"http://hooks.test:{receivers.port}/", allow=["127.0.0.3/32"], resolve=resolve
    )
    assert attempt.ok is False
    assert attempt.retryable is True  # a refused connection, not the guard
    assert attempt.error is not None
    assert attempt.error.startswith("ConnectionRefusedError"), attempt.error
    assert tripwire.connects == [("127.0.0.3", receivers.port)]
    assert receivers.accepts() == receivers.untouched()


# -- redirects ----------------------------------------------------------------------------------

REDIRECT_TARGETS = {
    "loopback": "http://127.0.0.1:{port}/landed",
    "metadata": "http://169.254.169.254/latest/meta-data/",
}


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("where", list(REDIRECT_TARGETS))
async def test_a_redirect_is_recorded_as_the_answer_and_never_followed(
    status: int, where: str, receivers: Receivers, tripwire: Tripwire
) -> None:
    location = REDIRECT_TARGETS[where].format(port=receivers.port)
    receivers.reply = (
        f"HTTP/1.1 {status} Moved\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n".encode()
    )
    # The policy allows all of loopback: a followed redirect to 127.0.0.1 would be counted.
    attempt = await fire_once(
        f"http://{PUBLIC_STAND_IN}:{receivers.port}/hook", allow=ALLOW_ALL_LOOPBACK
    )
    assert (attempt.ok, attempt.http_status, attempt.error) == (False, status, f"HTTP {status}")
    assert tripwire.connects == [(PUBLIC_STAND_IN, receivers.port)]
    assert receivers.accepts() == {**receivers.untouched(), PUBLIC_STAND_IN: 1}
    assert [head.split(b"\r\n")[0] for head in receivers.request_heads()] == [
        b"POST /hook HTTP/1.1"
    ]


# -- the request head: Host, request target, CR/LF ------------------------------------------------


def header_lines(head: bytes) -> list[bytes]:
    return head.split(b"\r\n")[1:-2]


@pytest.mark.parametrize(
    "name", ["Host", "host", "HOST", "hOsT"], ids=["title", "lower", "upper", "mixed"]
)
async def test_a_jobs_host_header_is_dropped_the_client_owns_host(
    name: str, receivers: Receivers, tripwire: Tripwire
) -> None:
    port = receivers.port
    headers = {name: f"127.0.0.1:{port}", "x-kept": "1"}
    attempt = await fire_once(
        f"http://hooks.test:{port}/", allow=ALLOW_STAND_IN, headers=headers,
        resolve=StubResolver({"hooks.test": [PUBLIC_STAND_IN]}),
    )  # fmt: skip
    assert attempt.ok, attempt.error
    (head,) = receivers.request_heads()
    hosts = [line for line in header_lines(head) if line.split(b":")[0].strip().lower() == b"host"]
    assert hosts == [f"host: hooks.test:{port}".encode()]
    assert b"x-kept: 1" in header_lines(head)
    assert receivers.accepts() == {**receivers.untouched(), PUBLIC_STAND_IN: 1}
    assert tripwire.connects == [(PUBLIC_STAND_IN, port)]


# Header names and values, and methods, that would add a line or a second Host to the request
# head (a leading space folds into the previous header, the client's own Host).
HEAD_INJECTIONS: dict[str, tuple[dict[str, str], str]] = {
    "crlf-in-value": ({"x-a": "1\r\nHost: 127.0.0.1:{port}"}, "POST"),
    "lf-in-value": ({"x-a": "1\nHost: 127.0.0.1:{port}"}, "POST"),
    "cr-in-value": ({"x-a": "1\rHost: 127.0.0.1:{port}"}, "POST"),
    "nul-in-value": ({"x-a": "1\0"}, "POST"),
    "crlf-in-name": ({"x-a\r\nHost": "127.0.0.1:{port}"}, "POST"),
    "colon-in-name": ({"Host: 127.0.0.1:{port}\r\nx-a": "1"}, "POST"),
    "folded-host": ({" Host": "127.0.0.1:{port}"}, "POST"),
    "space-before-colon": ({"Host ": "127.0.0.1:{port}"}, "POST"),
    "tab-before-colon": ({"Host\t": "127.0.0.1:{port}"}, "POST"),
    "non-ascii-name": ({"\u0130ost": "127.0.0.1:{port}"}, "POST"),
    "empty-name": ({"": "127.0.0.1:{port}"}, "POST"),
    "absolute-form-method": ({}, "GET http://127.0.0.1:{port}/ HTTP/1.1\r\nx-a:"),
    "space-in-method": ({}, "GET http://127.0.0.1:{port}/"),
}


@pytest.mark.parametrize("case", list(HEAD_INJECTIONS))
async def test_a_head_injection_is_refused_before_any_connection(
    case: str, receivers: Receivers, tripwire: Tripwire
) -> None:
    port = receivers.port
    raw_headers, raw_method = HEAD_INJECTIONS[case]
    headers = {k.format(port=port): v.format(port=port) for k, v in raw_headers.items()}
    attempt = await fire_once(
        f"http://{PUBLIC_STAND_IN}:{port}/", allow=ALLOW_STAND_IN, headers=headers,
        method=raw_method.format(port=port),
    )  # fmt: skip
    assert attempt.ok is False
    assert attempt.retryable is False  # the job must change, not be retried
    assert attempt.error is not None
    assert "may not contain" in attempt.error or "not a valid HTTP token" in attempt.error
    assert tripwire.connects == []
    assert receivers.accepts() == receivers.untouched()


URL_HEAD_TRICKS = {
    "encoded-crlf-in-path": "/%0d%0aHost:%20127.0.0.1:{port}%0d%0a",
    "raw-crlf-in-path": "/\r\nHost: 127.0.0.1:{port}\r\n\r\n",
    "raw-crlf-in-query": "/?a=\r\nHost: 127.0.0.1:{port}",
    "space-http-version-in-path": "/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nx:",
    "absolute-url-in-path": "//127.0.0.1:{port}/",
    "absolute-url-after-slash": "/http://127.0.0.1:{port}/",
}


@pytest.mark.parametrize("case", list(URL_HEAD_TRICKS))
async def test_a_url_cannot_add_a_line_or_an_absolute_form_target(
    case: str, receivers: Receivers, tripwire: Tripwire
) -> None:
    # The request reaches the permitted receiver; what matters is its head: one request line
    # in origin form (a path, never an absolute URL a proxy would fetch), one Host, no
    # injected line, and nothing reaching 127.0.0.1.
    port = receivers.port
    url = f"http://{PUBLIC_STAND_IN}:{port}" + URL_HEAD_TRICKS[case].format(port=port)
    attempt = await fire_once(url, allow=ALLOW_STAND_IN)
    assert attempt.ok, attempt.error
    (head,) = receivers.request_heads()
    request_line, *_ = head.split(b"\r\n")
    method, target, version = request_line.split(b" ")
    assert (method, version) == (b"POST", b"HTTP/1.1")
    assert target.startswith(b"/")
    assert not target.lower().startswith(b"http")
    names = [line.split(b":")[0].lower() for line in header_lines(head)]
    assert names.count(b"host") == 1
    assert set(names) <= {
        b"host", b"content-length", b"user-agent", b"idempotency-key", b"webhook-id",
        b"tickwork-job-id", b"tickwork-scheduled-for", b"tickwork-attempt", b"tickwork-fence",
    }  # fmt: skip
    assert f"host: {PUBLIC_STAND_IN}:{port}".encode() in header_lines(head)
    assert receivers.accepts() == {**receivers.untouched(), PUBLIC_STAND_IN: 1}
    assert tripwire.connects == [(PUBLIC_STAND_IN, port)]
