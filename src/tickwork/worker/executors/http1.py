"""A lean HTTP/1.1 client for webhooks: pooled keep-alive connections, httptools' C parser.

Webhook delivery needs little of HTTP: send one request with a small body, read the status and
a header or two, reuse the connection. aiohttp's client spent ~200 µs of CPU per such request
on this machine, this one ~50 µs (ADR 0010), and at thousands of webhooks per second on two
cores that difference decides the end-to-end rate.

What it does:

* one pool of idle connections per origin (scheme, host, port) and proxy, reused last-in
  first-out and dropped after `idle_timeout_s` (servers close idle keep-alive connections on
  their own);
* the SSRF guard (`ssrf.py`) on every new connection: the URL is checked first (scheme, literal
  address), a hostname is resolved once, only permitted addresses are kept, and the connection
  goes to exactly an address that was checked, so a second DNS answer cannot swap in another;
* TLS for https, always verified (the system's trust store plus an optional CA bundle, the
  URL's host for SNI and verification); a context that would not verify is refused;
* an outbound HTTP proxy when one is configured (`proxy.py` decides which, NO_PROXY included):
  http:// targets as absolute-form requests to the proxy, https:// targets through a CONNECT
  tunnel with TLS to the target inside it. The worker cannot see where the proxy connects, so
  the guard checks what it can before asking: a literal address as always, and a name by what
  it resolves to here; if any of those addresses is forbidden the request is refused (a name
  that does not resolve here is left to the proxy, which must enforce egress itself). The
  proxy's own address is not checked: an operator chose it;
* a request whose pooled connection turns out to be closed by the server before any byte of a
  response is sent once more on a new connection (the request is a webhook, idempotent by its
  key); any other failure is the caller's to retry;
* no redirects, no cookies, no decompression: a webhook names its URL, and the body of the
  answer is only kept (up to `BODY_LIMIT`) for error reports.
"""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import re
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import httptools
from yarl import URL

from tickwork.clock import Clock, SystemClock
from tickwork.worker.deadlines import Deadlines
from tickwork.worker.executors.proxy import Proxy, ProxyRoutes
from tickwork.worker.executors.ssrf import (
    AddressPolicy,
    EgressRefused,
    ForbiddenAddress,
    ForbiddenHost,
    IPAddress,
    check_url_host,
)

BODY_LIMIT = 64 * 1024  # bytes of an answer kept; the rest is read and dropped
PARSED_URLS_KEPT = 4096  # webhook URLs repeat (one per job): parse each once
_DEFAULT_PORTS = {"http": 80, "https": 443}
CONNECT_ANSWER_LIMIT = 16 * 1024  # bytes of a proxy's answer to CONNECT
# Headers the client owns: a job's own value could break the framing (request smuggling) or
# speak for the operator's proxy.
_OWN_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "proxy-authorization"}
)
_FORBIDDEN_IN_VALUE = re.compile("[\r\n\0]")
# What a method and a header name may be (an RFC 9110 token). Anything else can rewrite the
# head: a space in a method makes an absolute-form target a proxy would fetch, a leading space
# in a name folds it into the Host line before it, and "Host " is a second Host to a lenient
# server.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# Header names already judged (sent as given, or the client's own): every request of a worker
# sends the same dozen, and lower-casing and matching each against _TOKEN per request was a
# visible share of a webhook's dispatch. Bounded (names come from jobs): past the bound, new
# names are judged every time.
_NAME_VERDICTS: dict[str, bool] = {}
_NAME_VERDICTS_KEPT = 4096

Resolve = Callable[[str, int], Awaitable[Sequence[str]]]


class ResponseBroken(OSError):
    """The server closed the connection or sent something that is not HTTP/1.1."""


class ProxyFailed(OSError):
    """The proxy would not open a tunnel (its answer to CONNECT), or broke off. `retryable`:
    whether asking again later may help (a 5xx, a dropped connection) or not (403, 407)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class ForbiddenBehindProxy(EgressRefused):
    """A name that resolves here to a forbidden address is not asked of the proxy."""

    def __init__(self, host: str, refused: Sequence[ForbiddenAddress]) -> None:
        detail = "; ".join(f"{r.ip}: {r.reason}" for r in refused)
        super().__init__(
            f"refused to ask the proxy for {host!r}: it resolves here to forbidden addresses"
            f" ({detail})"
        )
        self.host = host
        self.refused = tuple(refused)


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: Mapping[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes  # the first BODY_LIMIT bytes


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request ready to be written: where it goes and its bytes (`Http1Client.prepare`)."""

    target: _Target
    payload: bytes


@dataclass(frozen=True, slots=True)
class _Target:
    origin: tuple[str, str, int]  # (scheme, host, port)
    host_header: str
    path: str  # path and query, as sent on the request line
    literal: IPAddress | None  # the host, if it is an IP address
    authorization: str | None  # from user:password@ in the URL
    proxy: Proxy | None = None  # None: connect directly

    @property
    def pool_key(self) -> tuple[str, str, int, str]:
        """Connections are shared per origin and per proxy (a tunnel leads to one origin)."""
        return (*self.origin, "" if self.proxy is None else self.proxy.key)

    @property
    def request_target(self) -> str:
        """What the request line names: the path, or the whole URL for a plain-HTTP proxy."""
        if self.proxy is not None and self.origin[0] == "http":
            return f"http://{self.host_header}{self.path}"
        return self.path


class Http1Client:
    """Sends requests over pooled HTTP/1.1 connections to addresses `policy` permits."""

    def __init__(
        self,
        policy: AddressPolicy | None = None,
        *,
        max_connections: int = 256,
        idle_timeout_s: float = 15.0,
        resolve: Resolve | None = None,
        ssl_context: ssl.SSLContext | None = None,
        ca_bundle: str | None = None,
        proxies: ProxyRoutes | None = None,
        clock: Clock | None = None,
    ) -> None:
        """`resolve(host, port)` returns addresses as text (default: the system's getaddrinfo,
        so /etc/hosts applies); tests pass a stub to check the guard's decisions. `clock`
        times idle connections (its monotonic reading).

        TLS: `ssl_context` if given (it must verify certificates and host names: ValueError
        otherwise), else the system's trust store plus the PEM file `ca_bundle` if given.
        `proxies`: which outbound proxy each target goes through (default: none)."""
        self._policy = policy or AddressPolicy()
        self._slots = asyncio.Semaphore(max_connections)
        self._deadlines = Deadlines()
        self._idle_timeout_s = idle_timeout_s
        self._resolve = resolve or _system_resolve
        self._ssl_context = _verifying(ssl_context, ca_bundle)
        self._proxies = proxies or ProxyRoutes()
        self._clock = clock or SystemClock()
        self._idle: dict[tuple[str, str, int, str], list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None,
        timeout_s: float,
    ) -> Response:
        """One request; raises EgressRefused (the guard said no), TimeoutError, OSError
        (connecting, or a broken answer: ResponseBroken) or ValueError (a bad header)."""
        return await self.send(self.prepare(method, url, headers=headers, body=body), timeout_s)

    def prepare(
        self, method: str, url: str, *, headers: Mapping[str, str], body: bytes | None
    ) -> Prepared:
        """A request checked and encoded, to `send` now or later (a webhook due at an instant
        is prepared before it: ADR 0027). Raises EgressRefused for a URL the guard refuses
        outright and ValueError for a header that cannot be sent."""
        target = self._target(url)
        return Prepared(target, _encode_request(method, target, headers, body))

    async def send(self, prepared: Prepared, timeout_s: float) -> Response:
        """Send a prepared request; raises as `request` does."""
        target, payload = prepared.target, prepared.payload
        # The timeout is one entry in a shared table with one loop timer (worker/deadlines.py),
        # not an asyncio.timeout: arming and cancelling a timer per request was ~10 µs, a
        # seventh of a webhook's dispatch (issue 22's aligned load).
        task = asyncio.current_task()
        assert task is not None
        self._deadlines.begin(task, timeout_s)
        timed_out = False
        try:
            try:
                async with self._slots:
                    connection, reused = await self._acquire(target)
                    try:
                        try:
                            response = await connection.exchange(payload)
                        except ResponseBroken as exc:
                            if not (reused and str(exc) == _CLOSED_BEFORE_ANSWER):
                                raise
                            # The server closed this idle connection as we reused it: once
                            # more, anew.
                            connection, _ = await self._acquire(target, reuse=False)
                            response = await connection.exchange(payload)
                    except BaseException:
                        connection.close()  # a timeout or a cancel: its answer may still come
                        raise
            finally:
                timed_out = self._deadlines.settle(task)
        except asyncio.CancelledError:
            # Our deadline's cancel becomes a TimeoutError; one from elsewhere (the executor
            # stopping a refused lease, a shutdown) goes on as a cancel.
            if timed_out:
                raise TimeoutError from None
            raise
        self._release(target, connection)
        return response

    async def close(self) -> None:
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()

    # -- internals ---------------------------------------------------------------------------

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = _parse_target(url, self._policy, self._proxies)
            if len(self._targets) >= PARSED_URLS_KEPT:
                self._targets.clear()
            self._targets[url] = target
        return target

    async def _acquire(self, target: _Target, *, reuse: bool = True) -> tuple[_Connection, bool]:
        idle = self._idle.get(target.pool_key)
        if reuse and idle:
            stale_before = self._clock.monotonic_s() - self._idle_timeout_s
            while idle:
                connection = idle.pop()
                if connection.usable and connection.idle_since > stale_before:
                    return connection, True
                connection.close()
        return await self._connect(target), False

    def _release(self, target: _Target, connection: _Connection) -> None:
        if not connection.usable:
            connection.close()
            return
        connection.idle_since = self._clock.monotonic_s()
        self._idle.setdefault(target.pool_key, []).append(connection)

    async def _connect(self, target: _Target) -> _Connection:
        if target.proxy is not None:
            return await self._connect_through(target.proxy, target)
        scheme, host, port = target.origin
        addresses = (
            [target.literal] if target.literal is not None else await self._permitted(host, port)
        )
        loop = asyncio.get_running_loop()
        tls = self._tls() if scheme == "https" else None
        failure: OSError | None = None
        for ip in addresses:
            self._policy.check(ip)  # the address connected to is the address checked
            try:
                _, protocol = await loop.create_connection(
                    _Connection, str(ip), port, ssl=tls, server_hostname=host if tls else None
                )
            except OSError as exc:
                failure = exc
                continue
            return protocol
        assert failure is not None
        raise failure

    async def _permitted(self, host: str, port: int) -> list[IPAddress]:
        kept: list[IPAddress] = []
        refused: list[ForbiddenAddress] = []
        for text in await self._resolve(host, port):
            ip = ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone
            try:
                self._policy.check(ip)
            except ForbiddenAddress as exc:
                refused.append(exc)
            else:
                if ip not in kept:
                    kept.append(ip)
        if not kept:
            raise ForbiddenHost(host, refused)
        return kept

    async def _connect_through(self, proxy: Proxy, target: _Target) -> _Connection:
        scheme, host, port = target.origin
        if target.literal is None:
            await self._check_before_proxy(host, port)
        loop = asyncio.get_running_loop()
        sock = await _open_socket(proxy.host, proxy.port)
        try:
            if scheme == "https":
                await _open_tunnel(sock, proxy, target)
                _, protocol = await loop.create_connection(
                    _Connection, sock=sock, ssl=self._tls(), server_hostname=host
                )
            else:
                _, protocol = await loop.create_connection(_Connection, sock=sock)
        except BaseException:
            sock.close()
            raise
        return protocol

    async def _check_before_proxy(self, host: str, port: int) -> None:
        """Refuse a name that resolves here to any forbidden address: the proxy may pick any
        of them. A name unknown here is the proxy's to resolve (and to police)."""
        try:
            texts = await self._resolve(host, port)
        except OSError:
            return
        refused: list[ForbiddenAddress] = []
        for text in texts:
            try:
                self._policy.check(ipaddress.ip_address(text.split("%", 1)[0]))
            except ForbiddenAddress as exc:
                refused.append(exc)
        if refused:
            raise ForbiddenBehindProxy(host, refused)

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = ssl.create_default_context()
        return self._ssl_context


def _verifying(context: ssl.SSLContext | None, ca_bundle: str | None) -> ssl.SSLContext | None:
    """The TLS context to use (None: the default one, made on first use). Verification cannot
    be turned off: a context that skips it is refused."""
    if context is not None:
        if context.verify_mode != ssl.CERT_REQUIRED or not context.check_hostname:
            raise ValueError(
                "ssl_context: webhooks always verify certificates and host names; for a"
                " private CA, give its certificate as a CA bundle instead"
            )
        if ca_bundle:
            context.load_verify_locations(cafile=ca_bundle)
        return context
    if not ca_bundle:
        return None
    context = ssl.create_default_context()  # the system's trust store...
    try:
        context.load_verify_locations(cafile=ca_bundle)  # ...plus the operator's CAs
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(
            f"webhook_ca_bundle: cannot load {ca_bundle!r} as PEM certificates ({exc}); give"
            " the path of a readable file of -----BEGIN CERTIFICATE----- blocks"
        ) from None
    return context


async def _open_socket(host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket to the proxy (its address is not the guard's: the
    operator configured it)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    failure: OSError | None = None
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise failure or OSError(f"the proxy {host}:{port} has no address")


async def _open_tunnel(sock: socket.socket, proxy: Proxy, target: _Target) -> None:
    """CONNECT host:port through `proxy` on `sock`; returns once the tunnel is open."""
    loop = asyncio.get_running_loop()
    _, host, port = target.origin
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {authority} HTTP/1.1", f"host: {authority}"]
    if proxy.authorization is not None:
        lines.append(f"proxy-authorization: {proxy.authorization}")
    await loop.sock_sendall(sock, ("\r\n".join(lines) + "\r\n\r\n").encode())
    answer = bytearray()
    while b"\r\n\r\n" not in answer:
        chunk = await loop.sock_recv(sock, 4096)
        if not chunk:
            raise ProxyFailed(
                f"the proxy {proxy.shown} closed the connection before opening a tunnel to"
                f" {authority}",
                retryable=True,
            )
        answer += chunk
        if len(answer) > CONNECT_ANSWER_LIMIT:
            raise ProxyFailed(f"the proxy {proxy.shown} answered CONNECT at length", retryable=True)
    status_line = bytes(answer).split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    if not 200 <= status < 300:
        raise ProxyFailed(
            f"the proxy {proxy.shown} refused to open a tunnel to {authority}:"
            f" {status_line[:200]!r}",
            retryable=status == 0 or status >= 500,
        )


async def _system_resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _parse_target(url: str, policy: AddressPolicy, proxies: ProxyRoutes) -> _Target:
    """Check and split a URL (yarl, as the guard parses it); raises ForbiddenURL/Address."""
    check_url_host(url, policy)
    parsed = URL(url)
    host = cast(str, parsed.raw_host)  # check_url_host refused a URL without one
    port = parsed.port or _DEFAULT_PORTS[parsed.scheme]
    literal = _literal(host)
    shown = f"[{host}]" if isinstance(literal, ipaddress.IPv6Address) else host
    default_port = port == _DEFAULT_PORTS[parsed.scheme]
    authorization = None
    if parsed.user is not None:
        pair = f"{parsed.user}:{parsed.password or ''}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    return _Target(
        origin=(parsed.scheme, host, port),
        host_header=shown if default_port else f"{shown}:{port}",
        path=parsed.raw_path_qs or "/",
        literal=literal,
        authorization=authorization,
        proxy=proxies.proxy_for(parsed.scheme, host, port),
    )


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _encode_request(
    method: str, target: _Target, headers: Mapping[str, str], body: bytes | None
) -> bytes:
    if not _TOKEN.fullmatch(method):
        raise ValueError(f"method {method[:40]!r} is not a valid HTTP token")
    lines = [f"{method} {target.request_target} HTTP/1.1", f"host: {target.host_header}"]
    proxy = target.proxy
    if proxy is not None and proxy.authorization is not None and target.origin[0] == "http":
        # To a plain-HTTP proxy the request itself carries the credentials (https: CONNECT).
        lines.append(f"proxy-authorization: {proxy.authorization}")
    if target.authorization is not None and "authorization" not in {h.lower() for h in headers}:
        lines.append(f"authorization: {target.authorization}")
    values = []
    for name, value in headers.items():
        if _is_sent(name):
            lines.append(f"{name}: {value}")
            values.append(value)
    # One search over every value (they rarely hold anything to refuse), then the culprit's
    # name for the error.
    if _FORBIDDEN_IN_VALUE.search("".join(values)):
        name = next(n for n, v in headers.items() if _is_sent(n) and _FORBIDDEN_IN_VALUE.search(v))
        raise ValueError(f"header {name!r}: values may not contain CR, LF or NUL")
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def _is_sent(name: str) -> bool:
    """Whether header `name` goes out as given (False: the client writes its own); raises
    ValueError if it is not a valid name. Each verdict is kept (see _NAME_VERDICTS)."""
    verdict = _NAME_VERDICTS.get(name)
    if verdict is None:
        verdict = name.lower() not in _OWN_HEADERS
        if verdict and not _TOKEN.fullmatch(name):
            raise ValueError(f"header name {name[:60]!r} is not a valid HTTP token")
        if len(_NAME_VERDICTS) < _NAME_VERDICTS_KEPT:
            _NAME_VERDICTS[name] = verdict
    return verdict


_CLOSED_BEFORE_ANSWER = "the server closed the connection before answering"


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request in flight, its answer parsed as bytes arrive."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[Response] | None = None
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body = bytearray()
        self._answered = False  # a byte of the current answer arrived
        self._complete = False
        self.usable = True  # may carry another request
        self.idle_since = 0.0

    async def exchange(self, payload: bytes) -> Response:
        assert self._transport is not None
        assert self._waiter is None, "one request at a time per connection"
        self._waiter = asyncio.get_running_loop().create_future()
        self._status, self._headers, self._body = 0, {}, bytearray()
        self._answered = self._complete = False
        self._transport.write(payload)
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        self.usable = False
        if self._transport is not None:
            self._transport.abort()

    # asyncio.Protocol --------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:
            self.close()  # bytes nobody asked for: the connection's framing is lost
            return
        self._answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ResponseBroken(f"not an HTTP/1.1 answer: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        if self._waiter is None or self._waiter.done():
            return
        if self._status >= 200 and not self._complete:
            self._finish()  # an answer without a length ends when the connection does
        elif not self._answered:
            self._fail(ResponseBroken(_CLOSED_BEFORE_ANSWER))
        else:
            self._fail(ResponseBroken("the server closed the connection mid-answer"))

    # httptools callbacks ---------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        room = BODY_LIMIT - len(self._body)
        if room > 0:
            self._body += body[:room]

    def on_message_complete(self) -> None:
        if self._status < 200:  # 1xx: an interim answer, the real one follows
            self._headers = {}
            return
        self.usable = self.usable and self._parser.should_keep_alive()
        self._finish()

    def _finish(self) -> None:
        self._complete = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(Response(self._status, self._headers, bytes(self._body)))

    def _fail(self, exc: Exception) -> None:
        self.usable = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
