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
need a key from elsewhere unless `TICKWORK_OPEN_OPS=true` (api/ops_guard.py).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from tickwork.api.audit import noted
from tickwork.domain.jobs import Job
from tickwork.domain.keys import Principal
from tickwork.errors import Forbidden, NotFound
from tickwork.services.keys import KeyService
from tickwork.services.tenant_rates import TenantRates

__all__ = [
    "Admin",
    "Caller",
    "Writer",
    "admin",
    "caller",
    "job_for",
    "tenant_scope",
    "visible_tenant",
]


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
