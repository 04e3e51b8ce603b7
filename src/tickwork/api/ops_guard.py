"""Who may read a process's operational endpoints (ADR 0018).

/healthz stays open. /metrics, /docs and /openapi.json are open to clients on loopback and
need an API key from elsewhere, unless `TICKWORK_OPEN_OPS=true` says a scraper on another host
may read them without one. The API's app and the scheduler's and worker's ops server
(api/ops_app.py) both put `OpsGuard` in front of themselves; neither needs FastAPI for it.
"""

from __future__ import annotations

import ipaddress
from typing import Final

from starlette.types import ASGIApp, Receive, Scope, Send

from tickwork.api.error_body import error_response
from tickwork.errors import StoreError, Unauthenticated
from tickwork.services.keys import KeyService

__all__ = ["OPS_PATHS", "OpsGuard", "is_loopback"]

OPS_PATHS: Final = frozenset({"/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json"})


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a unix socket, a made-up test host: not loopback


class OpsGuard:
    """ASGI middleware: an OPS_PATHS request from off loopback needs a usable key (401
    otherwise, 503 when the store cannot say), unless `open_ops`."""

    def __init__(self, app: ASGIApp, *, keys: KeyService, open_ops: bool) -> None:
        self.app = app
        self.keys = keys
        self.open_ops = open_ops

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.open_ops or scope["path"] not in OPS_PATHS:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        if is_loopback(client[0] if client else None):
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or ()).get(b"authorization")
        try:
            await self.keys.authenticate(header.decode("latin-1") if header else None)
        except Unauthenticated as exc:
            answer = error_response(
                401,
                exc.code,
                f"{exc} ({scope['path']} is open on loopback only)",
                headers={"WWW-Authenticate": 'Bearer realm="tickwork"'},
            )
            await answer(scope, receive, send)
            return
        except StoreError as exc:
            await error_response(503, "store_unavailable", str(exc))(scope, receive, send)
            return
        await self.app(scope, receive, send)
