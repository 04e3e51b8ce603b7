"""The API's outer guard, as plain ASGI (it must run before anything reads the body).

* It refuses a request with more than `MAX_HEADERS` headers (431) before reading its body.
* It caps the request body at `max_body_bytes`: a declared Content-Length over the cap is
  refused without reading, and a body streamed without one (chunked) is counted while read and
  refused as soon as it passes the cap. Either way nothing parses an oversized body, and the
  413 carries `Connection: close`, which makes uvicorn close the connection once the answer is
  out instead of reading (and discarding) the rest of an upload that may never end.
* It reads a JSON body as strict JSON (`api.strict_json`): no NaN or Infinity, no duplicate
  keys, no NUL or lone surrogate, no 1,000+ digit integer, UTF-8 only; each refused with the
  offending field's path.
* It turns an exception nobody handled into a 500 in the API's error shape, logged with its
  traceback, instead of a bare text page.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwork.api.error_body import error_response
from tickwork.api.strict_json import check_json_body, is_json_media_type

log = logging.getLogger("tickwork.api")

MAX_HEADERS = 100  # a browser sends about 20; uvicorn itself caps only their total size
# An oversized upload is not read to its end: the 413 closes the connection.
_CLOSE = {"Connection": "close"}
Refusal = tuple[int, str, str, str | None, dict[str, str] | None]


class EdgeMiddleware:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._check_headers(scope)
        body: bytes | None = None
        if refusal is None:
            body, refusal = await self._read_body(receive)
        if refusal is None and body:
            refusal = self._check_json(scope, body)
        if refusal is not None:
            status, code, message, field, headers = refusal
            await error_response(status, code, message, field, headers)(scope, receive, send)
            return
        if body is None:  # the client went away mid-body
            return
        await self._call_app(scope, _replay(body, receive), send)

    def _check_headers(self, scope: Scope) -> Refusal | None:
        headers = scope.get("headers", ())
        if len(headers) > MAX_HEADERS:
            message = f"the request has {len(headers)} headers; at most {MAX_HEADERS} are accepted"
            return 431, "too_many_headers", message, None, _CLOSE
        for name, value in headers:
            if name != b"content-length":
                continue
            try:
                declared = int(value)
            except ValueError:
                return 400, "bad_request", "Content-Length is not a number", None, _CLOSE
            if declared > self.max_body_bytes:
                return self._too_large()
        return None

    @staticmethod
    def _check_json(scope: Scope, body: bytes) -> Refusal | None:
        content_type = next(
            (value for name, value in scope.get("headers", ()) if name == b"content-type"), None
        )
        if content_type is None or not is_json_media_type(content_type.decode("latin-1")):
            return None  # not JSON to FastAPI either (it answers 415 where it wants JSON)
        problem = check_json_body(body)
        if problem is None:
            return None
        return problem.status, problem.code, problem.message, problem.field, None

    async def _read_body(self, receive: Receive) -> tuple[bytes | None, Refusal | None]:
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

    def _too_large(self) -> Refusal:
        limit = self.max_body_bytes
        message = f"the request body is over the {limit}-byte limit (max_body_bytes)"
        return 413, "body_too_large", message, None, _CLOSE

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
