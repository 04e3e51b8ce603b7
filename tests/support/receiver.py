"""A real HTTP webhook receiver on 127.0.0.1 that records every delivery it gets."""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from aiohttp import web

from tickwork.webhooks import parse_webhook_id


@dataclass(frozen=True, kw_only=True, slots=True)
class Delivery:
    path: str
    method: str
    headers: dict[str, str]
    body: bytes
    arrived_at: datetime
    arrived_mono: float

    @property
    def key(self) -> str:
        """The occurrence: `webhook-id` without the lease's fence (the same on every attempt)."""
        occurrence, _ = parse_webhook_id(self.headers["webhook-id"])
        return occurrence

    @property
    def fence(self) -> int | None:
        """The fence signed into `webhook-id` (None for alerts and task deliveries)."""
        _, fence = parse_webhook_id(self.headers["webhook-id"])
        return fence

    @property
    def scheduled_for(self) -> datetime:
        text = self.headers["tickwork-scheduled-for"].replace("Z", "+00:00")
        return datetime.fromisoformat(text)


@dataclass
class Receiver:
    """Answers each request with the status set for its path (200 by default) and records it.

    A path's status may be a list: each request takes the next one, the last one repeats.
    """

    statuses: dict[str, int | list[int]] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    retry_after: dict[str, str] = field(default_factory=dict)  # path -> Retry-After header
    hold: dict[str, int] = field(default_factory=dict)  # path -> how many requests to hang
    _held: dict[str, list[asyncio.Event]] = field(default_factory=dict)
    port: int = 0
    tls: ssl.SSLContext | None = None  # a server context: the receiver speaks https
    # Notice clients that close the connection while their request is held: such a request
    # is recorded in `aborted` (by path) and leaves the held ones.
    notice_aborts: bool = False
    aborted: list[str] = field(default_factory=list)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    _runner: web.AppRunner | None = None

    async def start(self) -> Receiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=self.notice_aborts)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.tls).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{host}:{self.port}{path}"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        delivery = Delivery(
            path=request.path,
            method=request.method,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            arrived_at=datetime.now(UTC),
            arrived_mono=time.monotonic(),
        )
        async with self._changed:
            self.deliveries.append(delivery)
            self._changed.notify_all()
        if self.hold.get(request.path, 0) > 0:
            self.hold[request.path] -= 1
            gate = asyncio.Event()
            self._held.setdefault(request.path, []).append(gate)
            try:
                await gate.wait()
            except asyncio.CancelledError:  # the client closed the connection (notice_aborts)
                self._held[request.path].remove(gate)
                async with self._changed:
                    self.aborted.append(request.path)
                    self._changed.notify_all()
                raise
        headers = {}
        if request.path in self.retry_after:
            headers["retry-after"] = self.retry_after[request.path]
        return web.Response(status=self._status_for(request.path), text="ok", headers=headers)

    def _status_for(self, path: str) -> int:
        status = self.statuses.get(path, 200)
        if isinstance(status, int):
            return status
        return status.pop(0) if len(status) > 1 else status[0]

    def release(self, path: str) -> None:
        """Let the oldest request held on `path` answer."""
        self._held[path].pop(0).set()

    def release_all(self, path: str) -> None:
        """Let every request held on `path` answer (those of a dead client, too: harmless)."""
        while self._held.get(path):
            self.release(path)

    def for_path(self, path: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.path == path]

    async def wait_for_abort(self, path: str, timeout_s: float = 30.0) -> None:
        """Wait until a client closed its connection while its request on `path` was held
        (needs `notice_aborts`)."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: path in self.aborted)

    async def wait_for(self, path: str, count: int, timeout_s: float = 30.0) -> list[Delivery]:
        """Wait until `path` got at least `count` deliveries (an event, not a sleep)."""
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: len(self.for_path(path)) >= count)
        return self.for_path(path)
