"""The API's outer guard, as plain ASGI (it must run before anything reads the body).

* It caps the request body at `max_body_bytes`: a declared Content-Length over the cap is
  refused without reading, and a body streamed without one (chunked) is counted while read and
  refused as soon as it passes the cap. Either way nothing parses an oversized body.
* It turns an exception nobody handled into a 500 in the API's error shape, logged with its
  traceback, instead of a bare text page.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwork.api.errors import error_response

log = logging.getLogger("tickwork.api")


class EdgeMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._check_declared_length(scope)
        body: bytes | None = None
        if refusal is None:
            body, refusal = await self._read_body(receive)
        if refusal is not None:
            await error_response(*refusal)(scope, receive, send)
            return
        if body is None:  # the client went away mid-body
            return
        await self._call_app(scope, _replay(body, receive), send)

    def _check_declared_length(self, scope: Scope) -> tuple[int, str, str] | None:
        for name, value in scope.get("headers", ()):
            if name != b"content-length":
                continue
            try:
                declared = int(value)
            except ValueError:
                return 400, "bad_request", "Content-Length is not a number"
            if declared > self.max_body_bytes:
                return self._too_large()
        return None

    async def _read_body(
        self, receive: Receive
    ) -> tuple[bytes | None, tuple[int, str, str] | None]:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None, None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None, self._too_large()
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None

    def _too_large(self) -> tuple[int, str, str]:
        limit = self.max_body_bytes
        return 413, "body_too_large", f"the request body is over the {limit}-byte limit"

    async def _call_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            log.exception(
                "unhandled error in %s %s",
                scope.get("method"),
                scope.get("path"),
                extra={"action": "api.unhandled_error"},
            )
            if started:
                raise
            message = "internal error; the server log has the details"
            await error_response(500, "internal_error", message)(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the buffered body over once, then defers to the real one."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
