"""How the API's uvicorn server reads requests: a bounded request head, and closes that let
the client read the answer.

* uvicorn's h11 implementation refuses a request line plus headers over its
  `h11_max_incomplete_event_size` (16 KiB by default), but its httptools implementation (the
  faster one, used when httptools is installed, as it is with tickwork) has no bound at all: a
  5 MB header was read and handed to the app, and a header value that never ends was buffered
  without end. `BoundedHttpTools` counts the bytes of a request's head as they arrive and,
  past `MAX_HEAD_BYTES`, answers 431 in the API's error shape and closes the connection. With
  h11 the same bound is its own setting (its refusal is uvicorn's plain-text 400).
* A connection closed while the client is still sending (a 413 for an upload over the limit,
  the 431 above) is closed the way web servers do it, a "lingering close": the answer is
  written, the sending side shut (EOF), and what still arrives is read and dropped for up to
  `LINGER_S` or `LINGER_BYTES`, then the socket is closed. Closing at once with unread data
  makes the kernel reset the connection, and the client loses the answer it was sent.

The middleware (`api.middleware`) caps the number of headers (100) and the body.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES: Final = 32 * 1024  # request line and headers; nginx's default allows 32 KiB
LINGER_S: Final = 1.0
LINGER_BYTES: Final = 1024 * 1024

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # httptools is not installed: uvicorn uses h11
    HttpToolsProtocol = None  # type: ignore[assignment,misc]


class _LingeringTransport:
    """The connection's transport as uvicorn sees it: `close()` lingers while the request
    is unfinished (see the module's doc); everything else is the real transport's."""

    def __init__(self, transport: asyncio.Transport, protocol: _Lingering) -> None:
        self._transport = transport
        self._protocol = protocol
        self._closing = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self._closing or self._transport.is_closing()

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        transport = self._transport
        if not self._protocol.request_unfinished() or not transport.can_write_eof():
            transport.close()
            return
        self._protocol.lingering = 0
        transport.write_eof()
        transport.resume_reading()
        asyncio.get_running_loop().call_later(LINGER_S, transport.close)


class _Lingering:
    """Mixin for a uvicorn HTTP protocol: lingering closes (see the module's doc)."""

    lingering: int | None = None  # bytes dropped since a lingering close began
    _raw: asyncio.Transport
    cycle: Any

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._raw = cast(asyncio.Transport, transport)
        super().connection_made(_LingeringTransport(self._raw, self))  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        if self.lingering is not None:
            self.lingering += len(data)
            if self.lingering > LINGER_BYTES:
                self._raw.close()
            return
        super().data_received(data)  # type: ignore[misc]

    def request_unfinished(self) -> bool:
        """True if the client may still be sending: a body not read to its end."""
        return self.cycle is not None and bool(self.cycle.more_body)


class LingeringH11(_Lingering, H11Protocol):
    """uvicorn's h11 protocol with lingering closes."""

    def request_unfinished(self) -> bool:
        # ERROR: h11 refused what it was reading (a head over its bound, say) mid-request
        return self.conn.their_state in (h11.SEND_BODY, h11.ERROR) or super().request_unfinished()


if HttpToolsProtocol is not None:

    class BoundedHttpTools(_Lingering, HttpToolsProtocol):
        """uvicorn's httptools protocol with a bound on the request head, and lingering closes.

        httptools keeps a header value in its own buffer until the value ends, so counting
        has to happen on the bytes received: while a request's head is incomplete, every
        chunk counts, and past the bound the connection is answered and closed. (The chunk
        that starts a request is not counted: the bound is loose by one socket read.)"""

        _head_done = False
        _head_bytes = 0
        _in_head = False  # a request has begun and its head is not complete

        def data_received(self, data: bytes) -> None:
            if self.lingering is None and not self._head_done:
                self._head_bytes += len(data)
            super().data_received(data)
            if (
                self.lingering is None
                and not self._head_done
                and self._head_bytes > MAX_HEAD_BYTES
                and not self.transport.is_closing()
            ):
                self._refuse_head()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_done = False
            self._head_bytes = 0
            self._in_head = True

        def on_headers_complete(self) -> None:
            self._head_done = True
            self._in_head = False
            super().on_headers_complete()

        def request_unfinished(self) -> bool:
            return self._in_head or super().request_unfinished()

        def _refuse_head(self) -> None:
            message = f"the request line and headers are over the {MAX_HEAD_BYTES}-byte limit"
            error = {"code": "request_headers_too_large", "message": message, "field": None}
            body = json.dumps({"error": error}).encode()
            head = (
                "HTTP/1.1 431 Request Header Fields Too Large\r\n"
                "content-type: application/json\r\n"
                f"content-length: {len(body)}\r\n"
                "connection: close\r\n\r\n"
            ).encode()
            self.transport.write(head + body)
            self.transport.close()


def server_options(http: str = "auto") -> dict[str, Any]:
    """uvicorn.Config keywords for the API's server; `http` as uvicorn's ("auto": httptools
    when it is installed, else h11)."""
    options: dict[str, Any] = {"h11_max_incomplete_event_size": MAX_HEAD_BYTES}
    if http in ("auto", "httptools") and HttpToolsProtocol is not None:
        options["http"] = BoundedHttpTools
    else:
        options["http"] = LingeringH11
    return options
