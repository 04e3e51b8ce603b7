"""/v1/keys and /v1/tenants: who may call the API, and the tenants their jobs belong to.

Keys are an admin's business (every route here needs an admin key), except that a tenant key
may read its own tenant (`GET /v1/tenants`, `GET /v1/tenants/{name}`). A key's secret appears
once, in the answer to its creation; afterwards only its prefix identifies it.

`PATCH /v1/tenants/{name}` is a partial update of a tenant's settings (`egress`, its
destination lists, and `limits`): a field left out keeps its value. Within `limits` too: a
limit left out is kept, one given as null is removed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from tickwork.api.audit import noted
from tickwork.api.auth import Admin, Caller, visible_tenant
from tickwork.api.routes import ERROR_RESPONSES
from tickwork.api.schemas import Instant, InstantOut, documented
from tickwork.api.tenant_limits import LimitsIn, LimitsOut, UsageOut
from tickwork.clock import utc_iso
from tickwork.domain.audit import AuditEntry
from tickwork.domain.egress import MAX_PATTERN_CHARS, MAX_PATTERNS
from tickwork.domain.keys import ApiKey, Role
from tickwork.domain.tenant_limits import TenantLimits
from tickwork.domain.tenants import Tenant
from tickwork.services.keys import CreatedKey, KeyService
from tickwork.services.tenants import TENANT_NAME, NewSecret, TenantService, TenantUsage

# The prefix is declared here, not where the router is included: the audit trail names routes
# by their own path.
router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)

TenantPath = Annotated[str, Path(min_length=1, max_length=100, description="the tenant")]
KeyIdPath = Annotated[str, Path(min_length=1, max_length=64, description="a key's id")]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


class KeyCreate(_Input):
    name: str = Field(
        min_length=1, max_length=100, examples=["ci deploys"], **documented(pattern=r"\S")
    )
    role: Role
    tenant: str | None = Field(
        None, min_length=1, max_length=100, description="required for the tenant roles"
    )
    expires_at: Instant | None = Field(None, description="default: never")


class KeyOut(_Output):
    id: str
    prefix: str = Field(description="the key's first characters, to recognise it")
    name: str
    role: Role
    tenant: str | None
    created_at: InstantOut
    expires_at: InstantOut | None
    revoked_at: InstantOut | None
    last_used_at: InstantOut | None = Field(description="written at most every 30 s")

    @classmethod
    def of(cls, key: ApiKey) -> KeyOut:
        return cls(
            id=key.id,
            prefix=key.prefix,
            name=key.name,
            role=key.role,
            tenant=key.tenant,
            created_at=utc_iso(key.created_at),
            expires_at=_iso(key.expires_at),
            revoked_at=_iso(key.revoked_at),
            last_used_at=_iso(key.last_used_at),
        )


class KeyCreated(_Output):
    id: str
    key: str = Field(description="the whole key: shown in this answer only, store it now")
    prefix: str
    name: str
    role: Role
    tenant: str | None
    created_at: InstantOut
    expires_at: InstantOut | None

    @classmethod
    def of(cls, created: CreatedKey) -> KeyCreated:
        key = created.key
        return cls(
            id=key.id,
            key=created.plaintext,
            prefix=key.prefix,
            name=key.name,
            role=key.role,
            tenant=key.tenant,
            created_at=utc_iso(key.created_at),
            expires_at=_iso(key.expires_at),
        )


class KeyList(_Output):
    keys: list[KeyOut]


class TenantCreate(_Input):
    name: str = Field(
        min_length=1,
        max_length=100,
        examples=["payments"],
        **documented(pattern=TENANT_NAME.pattern.join("^$")),
    )
    limits: LimitsIn | None = Field(None, description="left out or null: no limits")


_PATTERN_HELP = (
    "host patterns: an exact host (api.partner.io), `*.example.com` for the names below a"
    " domain, or an IP address or network (203.0.113.0/24) for URLs with a literal address"
)


class EgressIn(_Input):
    allow: list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_PATTERNS,
        description=f"only these hosts (empty: any public host); {_PATTERN_HELP}",
        examples=[["*.example.com", "api.partner.io"]],
    )
    deny: list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_PATTERNS,
        description=f"never these hosts (wins over allow); {_PATTERN_HELP}",
        examples=[["internal.example.com"]],
    )


class EgressOut(_Output):
    allow: list[str]
    deny: list[str]


class TenantPatch(_Input):
    egress: EgressIn | None = Field(
        None,
        description="replaces the tenant's destination lists whole; null clears them; left out:"
        " unchanged. They narrow what the SSRF guard permits, never widen it",
    )
    limits: LimitsIn | None = Field(
        None,
        description="merged into the tenant's limits: a limit given is set, one given as null"
        " is removed, one left out is kept; null or {}: no change",
    )


class TenantOut(_Output):
    name: str
    created_at: InstantOut
    updated_at: InstantOut
    egress: EgressOut = Field(description="where the tenant's webhooks and alerts may go")
    limits: LimitsOut = Field(description="null: no such limit")
    usage: UsageOut = Field(description="what the tenant uses now, against its limits")

    @classmethod
    def of(cls, tenant: Tenant, usage: TenantUsage | None = None) -> TenantOut:
        return cls(
            name=tenant.tenant,
            created_at=utc_iso(tenant.created_at),
            updated_at=utc_iso(tenant.updated_at),
            egress=EgressOut(allow=list(tenant.egress.allow), deny=list(tenant.egress.deny)),
            limits=LimitsOut.of(tenant.limits),
            usage=UsageOut(jobs=0 if usage is None else usage.jobs),
        )


class TenantCreated(TenantOut):
    webhook_secret: str = Field(
        description="the tenant's generated signing secret (whsec_...): shown in this answer"
        " only; its jobs' webhooks are signed with it (Standard Webhooks)"
    )
    fingerprints: list[str] = Field(description="first 8 hex digits of SHA-256 of the secret")

    @classmethod
    def made(cls, tenant: Tenant, new: NewSecret) -> TenantCreated:
        return cls(
            **TenantOut.of(tenant).model_dump(),
            webhook_secret=new.secret,
            fingerprints=list(new.signing.fingerprints),
        )


class TenantList(_Output):
    tenants: list[TenantOut]


def _iso(when: datetime | None) -> str | None:
    return None if when is None else utc_iso(when)


def _keys(request: Request) -> KeyService:
    keys: KeyService = request.app.state.keys
    return keys


def _tenants(request: Request) -> TenantService:
    tenants: TenantService = request.app.state.tickwork.tenants
    return tenants


@router.post("/keys", status_code=201, tags=["keys"])
async def create_key(request: Request, who: Admin, body: KeyCreate) -> KeyCreated:
    """A new API key; `key` is in this answer only (the store keeps its hash)."""
    created = await _keys(request).create(
        name=body.name, role=body.role, tenant=body.tenant, expires_at=body.expires_at
    )
    noted(resource=f"key {created.key.id}", tenant=created.key.tenant)
    return KeyCreated.of(created)


@router.get("/keys", tags=["keys"])
async def list_keys(request: Request, who: Admin) -> KeyList:
    """Every key, revoked and expired ones too, oldest first (never their secrets)."""
    return KeyList(keys=[KeyOut.of(k) for k in await _keys(request).list()])


@router.delete("/keys/{key_id}", tags=["keys"])
async def revoke_key(request: Request, who: Admin, key_id: KeyIdPath) -> KeyOut:
    """Revoke a key: every API process refuses it within a second."""
    return KeyOut.of(await _keys(request).revoke(key_id))


class AuditOut(_Output):
    id: int
    at: InstantOut
    key_id: str | None
    key_prefix: str | None
    role: str | None
    actor_tenant: str | None = Field(description="the tenant of the key that made the change")
    action: str = Field(examples=["PATCH /v1/jobs/{job_id}"])
    resource: str | None = Field(examples=["job 0192b0c4d2a87f3e9c1b2a3d4e5f6a7b"])
    tenant: str | None = Field(description="the tenant the changed resource belongs to")
    status: int = Field(description="the HTTP status of the answer")
    client: str | None = Field(description="the caller's address")

    @classmethod
    def of(cls, e: AuditEntry) -> AuditOut:
        assert e.id is not None
        return cls(
            id=e.id,
            at=utc_iso(e.at),
            key_id=e.key_id,
            key_prefix=e.key_prefix,
            role=e.role,
            actor_tenant=e.actor_tenant,
            action=e.action,
            resource=e.resource,
            tenant=e.tenant,
            status=e.status,
            client=e.client,
        )


class AuditList(_Output):
    entries: list[AuditOut]
    next_before: int | None = Field(description="pass as `before` for the next (older) page")


@router.get("/audit", tags=["audit"])
async def list_audit(
    request: Request,
    who: Admin,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before: Annotated[int | None, Query(ge=1, le=2**63 - 1)] = None,
    tenant: Annotated[str | None, Query(min_length=1, max_length=100)] = None,
    key_id: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> AuditList:
    """Every change made through the API (and every refused attempt with a valid key), newest
    first: who (key), what (route, resource, tenant, status), when and from where."""
    store = request.app.state.tickwork.store
    found = await store.list_audit(limit=limit + 1, before_id=before, tenant=tenant, key_id=key_id)
    page = found[:limit]
    next_before = page[-1].id if len(found) > limit else None
    return AuditList(entries=[AuditOut.of(e) for e in page], next_before=next_before)


@router.post("/tenants", status_code=201, tags=["tenants"])
async def create_tenant(request: Request, who: Admin, body: TenantCreate) -> TenantCreated:
    """A new tenant, with its `limits` if given, and a generated webhook signing secret shown
    in this answer only; 409 `tenant_exists` if it exists."""
    noted(resource=f"tenant {body.name}", tenant=body.name)
    limits = TenantLimits() if body.limits is None else body.limits.to_domain()
    return TenantCreated.made(*await _tenants(request).create(body.name, limits))


@router.get("/tenants", tags=["tenants"])
async def list_tenants(request: Request, who: Caller) -> TenantList:
    """Every tenant (a tenant key: its own), with its limits and usage."""
    tenants = _tenants(request)
    shown = [t for t in await tenants.list() if who.sees(t.tenant)]
    usage = await tenants.usage(None if who.is_admin else who.tenant)
    return TenantList(tenants=[TenantOut.of(t, usage.get(t.tenant)) for t in shown])


@router.get("/tenants/{name}", tags=["tenants"])
async def get_tenant(request: Request, who: Caller, name: TenantPath) -> TenantOut:
    """One tenant, with its limits and usage (`usage.jobs`: how many jobs it has)."""
    visible_tenant(who, name)
    return await _tenant_out(_tenants(request), await _tenants(request).get(name))


@router.patch("/tenants/{name}", tags=["tenants"])
async def update_tenant(
    request: Request, who: Admin, name: TenantPath, body: TenantPatch
) -> TenantOut:
    """Change the tenant's settings given in the body (an admin key); the others stay.
    `egress`: hosts its jobs' webhooks and alerts may (`allow`) or may not (`deny`) reach.
    `limits`: merged (a limit set to null is removed); applied by this API process at once, by
    the others within 1.5 s."""
    noted(resource=f"tenant {name}", tenant=name)
    tenants = _tenants(request)
    tenant = await tenants.get(name)
    if body.limits is not None and body.limits.model_fields_set:
        tenant = await tenants.set_limits(name, body.limits.changes())
    if "egress" in body.model_fields_set:
        egress = body.egress
        allow, deny = (None, None) if egress is None else (egress.allow, egress.deny)
        tenant = await tenants.set_egress(name, allow, deny)
    return await _tenant_out(tenants, tenant)


async def _tenant_out(tenants: TenantService, tenant: Tenant) -> TenantOut:
    usage = await tenants.usage(tenant.tenant)
    return TenantOut.of(tenant, usage.get(tenant.tenant))


@router.delete("/tenants/{name}", status_code=204, tags=["tenants"])
async def delete_tenant(request: Request, who: Admin, name: TenantPath) -> Response:
    """Delete a tenant that has no jobs (409 `tenant_has_jobs` otherwise) and revoke its
    keys."""
    noted(tenant=name)
    await _tenants(request).delete(name)
    return Response(status_code=204)
