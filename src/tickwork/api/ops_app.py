"""The HTTP server of a scheduler or worker process that serves no API: /healthz and /metrics
only, answered exactly as the API's app answers them, without FastAPI.

Why not the API's app with only those routes: importing it (FastAPI, pydantic's schemas of
every route, the services) took about 0.45 s of the 1.1 s a worker spent importing before its
first lease, and after a crash a restarted scheduler or worker is late by all of it. This app
needs Starlette's responses, prometheus_client and the store, all loaded by then anyway.

    GET|HEAD /healthz   200 {"status": "ok"} once the store answers a cheap query; 503
                        "store_unavailable" otherwise
    GET|HEAD /metrics   Prometheus text; a key needed from off loopback (api/ops_guard.py)
    another method      405 "method_not_allowed", with Allow
    another path        404 "not_found"

In front of it, as in front of the API: OpsGuard, and EdgeMiddleware's bounds on headers and
body and its logged 500 for anything unexpected.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from tickwork.api.error_body import error_response
from tickwork.api.middleware import EdgeMiddleware
from tickwork.api.ops_guard import OpsGuard
from tickwork.services.keys import KeyService
from tickwork.store.base import ScheduleStore

__all__ = ["ALLOWED", "OpsApp", "create_ops_app"]

log = logging.getLogger("tickwork.api")
ALLOWED: Final = "GET, HEAD"


class OpsApp:
    """The two routes, by exact path (no parameters, no trailing-slash redirects)."""

    def __init__(self, store: ScheduleStore) -> None:
        self.store = store
        self.routes: dict[str, Callable[[], Awaitable[Response]]] = {
            "/healthz": self.healthz,
            "/metrics": self.metrics,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; a websocket is refused by the server when we return
        path, method = scope["path"], scope["method"]
        route = self.routes.get(path)
        if route is None:
            served = " and ".join(self.routes)
            message = f"no such route: {method} {path} (this process serves only {served})"
            answer: Response = error_response(404, "not_found", message)
        elif method not in ("GET", "HEAD"):
            message = f"{method} is not allowed on {path}; use {ALLOWED}"
            answer = error_response(405, "method_not_allowed", message, headers={"Allow": ALLOWED})
        else:
            answer = await route()
        await answer(scope, receive, send)

    async def healthz(self) -> Response:
        try:
            await self.store.ping()
        except Exception as exc:
            log.warning("health check failed: %s", exc, extra={"action": "api.health_failed"})
            return error_response(503, "store_unavailable", f"the schedule store failed: {exc}")
        return JSONResponse({"status": "ok"})

    async def metrics(self) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def create_ops_app(
    *, store: ScheduleStore, keys: KeyService, open_ops: bool, max_body_bytes: int
) -> ASGIApp:
    guarded = OpsGuard(OpsApp(store), keys=keys, open_ops=open_ops)
    return EdgeMiddleware(guarded, max_body_bytes=max_body_bytes)
