"""Who may call what (ADR 0018).

Every /v1 route needs `Authorization: Bearer <key>` (the router depends on `caller`, so a new
route cannot be left open by forgetting it). Roles:

    admin         everything, every tenant; tenants, keys and the cluster
    tenant-write  read and change one tenant's jobs, runs, dead letters and secrets
    tenant-read   read them

A key without the right gets 403. A resource of another tenant is 404, worded exactly as for
one that does not exist, on every route (lists, runs, dead letters, redrives, secrets), so a
tenant learns nothing about the others, not even which ids exist.

A tenant key's requests also count against its tenant's `limits.max_api_rps`, in this API
process (services/tenant_rates.py); admin keys belong to no tenant and have no such limit.

/healthz stays open. /metrics, /docs and /openapi.json are open to clients on loopback, and
need a key from elsewhere unless `TICKWORK_OPEN_OPS=true` (`ops_guard`).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Final

from fastapi import Depends, Request
from starlette.types import ASGIApp, Receive, Scope, Send

from tickwork.api.audit import noted
from tickwork.api.errors import error_response
from tickwork.domain.jobs import Job
from tickwork.domain.keys import Principal
from tickwork.errors import Forbidden, NotFound, StoreError, Unauthenticated
from tickwork.services.keys import KeyService
from tickwork.services.tenant_rates import TenantRates

__all__ = [
    "OPS_PATHS",
    "Admin",
    "Caller",
    "OpsGuard",
    "Writer",
    "admin",
    "caller",
    "is_loopback",
    "job_for",
    "tenant_scope",
    "visible_tenant",
]

OPS_PATHS: Final = frozenset({"/metrics", "/docs", "/docs/oauth2-redirect", "/openapi.json"})


def _keys(request: Request) -> KeyService:
    keys: KeyService = request.app.state.keys
    return keys


async def caller(request: Request) -> Principal:
    """The principal of the request's key; Unauthenticated (401) without a usable one,
    RateLimited (429) over the key's limit or its tenant's `limits.max_api_rps`."""
    principal = await _keys(request).authenticate(request.headers.get("authorization"))
    noted(principal=principal)
    if principal.tenant is not None:
        rates: TenantRates = request.app.state.tenant_rates
        await rates.admit(principal.tenant)
    return principal


Caller = Annotated[Principal, Depends(caller)]


async def _writer(principal: Caller) -> Principal:
    if not principal.may_write:
        raise Forbidden("this key is read-only (tenant-read): changes need a tenant-write key")
    return principal


async def admin(principal: Caller) -> Principal:
    if not principal.is_admin:
        raise Forbidden(f"this needs an admin key; this key's role is {principal.role.value}")
    return principal


Writer = Annotated[Principal, Depends(_writer)]
Admin = Annotated[Principal, Depends(admin)]


def job_for(principal: Principal, job: Job) -> Job:
    """`job` if the principal may see it; NotFound as for a missing job otherwise."""
    if not principal.sees(job.tenant):
        raise NotFound("job", job.id)
    noted(tenant=job.tenant)
    return job


def tenant_scope(principal: Principal, asked: str | None) -> str | None:
    """The tenant a list is limited to: the asked one for an admin (None: all), the key's own
    for a tenant key. Check `principal.sees(asked)` first: a tenant key asking for another
    tenant gets an empty list, as for a tenant without any."""
    if principal.is_admin:
        return asked
    return principal.tenant


def visible_tenant(principal: Principal, tenant: str) -> str:
    """`tenant` if the principal may see it; NotFound as for a missing tenant otherwise."""
    if not principal.sees(tenant):
        raise NotFound("tenant", tenant)
    noted(tenant=tenant)
    return tenant


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a unix socket, a made-up test host: not loopback


class OpsGuard:
    """/metrics, /docs and /openapi.json: open on loopback; from elsewhere they need a key,
    unless `open_ops` (an operator who wants Prometheus to scrape from another host without a
    key says so)."""

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
