"""A no-op webhook receiver, run as its own process so the bench driver does not compete.

    python -m bench.receiver --out FILE

Listens on 127.0.0.1 (a free port), prints `ready <port>` when it accepts connections, answers
every request 200 at once, and remembers (arrival time, `tickwork-scheduled-for` header, key)
per request; the key is the `idempotency-key` header (the occurrence's key; `webhook-id`, which
also carries the lease's fence, only when it is absent). `GET /__count` answers the number of
requests remembered so far (and is not one of
them). On SIGTERM or SIGINT it writes them to FILE as JSON and exits.

It is a bare asyncio protocol around httptools' C parser rather than an aiohttp app: the
receiver shares the machine's two cores with the processes being measured, and a real
deployment's receivers run elsewhere. The aiohttp app it replaced cost ~60 µs of CPU per
request (0.3 cores at 5,000 webhooks/s); this costs about a fifth of that (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from pathlib import Path
from typing import cast

import httptools

COUNT_PATH = "/__count"
Arrival = tuple[float, str, str]  # (epoch seconds, scheduled-for header, idempotency key)

_SCHEDULED_FOR = b"tickwork-scheduled-for"
_KEYS = (b"idempotency-key", b"webhook-id")
_OK_EMPTY = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
_BAD_REQUEST = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class _Connection(asyncio.Protocol):
    """One keep-alive connection: parse requests as bytes arrive, answer each when complete."""

    def __init__(self, arrivals: list[Arrival]) -> None:
        self._arrivals = arrivals
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[bytes, bytes] = {}
        self._arrived = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            assert self._transport is not None
            self._transport.write(_BAD_REQUEST)
            self._transport.close()

    # httptools callbacks -------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._arrived = time.time()  # when the request's first bytes were parsed

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_message_complete(self) -> None:
        assert self._transport is not None
        if self._url.split(b"?", 1)[0] == COUNT_PATH.encode():
            body = str(len(self._arrivals)).encode()
            head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            self._transport.write(head + body)
        else:
            key = next((self._headers[k] for k in _KEYS if self._headers.get(k)), b"")
            scheduled_for = self._headers.get(_SCHEDULED_FOR, b"")
            self._arrivals.append((self._arrived, scheduled_for.decode(), key.decode()))
            self._transport.write(_OK_EMPTY)
        if not self._parser.should_keep_alive():
            self._transport.close()


async def listen(arrivals: list[Arrival]) -> tuple[asyncio.Server, int]:
    """Accept connections on a free 127.0.0.1 port, appending each request to `arrivals`."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Connection(arrivals), "127.0.0.1", 0, backlog=2048)
    return server, server.sockets[0].getsockname()[1]


async def serve(out: Path) -> None:
    arrivals: list[Arrival] = []
    loop = asyncio.get_running_loop()
    server, port = await listen(arrivals)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"ready {port}", flush=True)
    await stop.wait()
    server.close()
    _save(out, arrivals)


def _save(out: Path, arrivals: list[Arrival]) -> None:
    out.write_text(json.dumps(arrivals), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.out))
    else:
        uvloop.run(serve(args.out))


if __name__ == "__main__":
    main()
