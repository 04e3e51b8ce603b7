"""The tenant service: tenants as a resource, and their settings (signing secrets, destination
lists).

A job names an existing tenant (`default` exists in every database). An admin creates and
deletes tenants; a tenant with jobs cannot be deleted, and deleting one revokes its keys.
Secrets are write-only here as everywhere: callers get a `TenantSigning` with fingerprints,
never the secrets, except a secret tickwork generates, shown once in the answer that made it.

Limits (domain/tenant_limits.py) are set when a tenant is created and changed field by field
(`set_limits`: a field given as None removes that limit). A change is announced to
`on_limits_changed` (the API's request-rate cache), so this process applies it at once.

Signed by default: a new tenant gets a generated signing secret, and a tenant whose signing was
never configured (`default` and the tenants an upgrade created) gets one when an API process
starts (`sign_unconfigured`); `rotate` makes a new one and keeps the old one beside it until
`retire_previous`, so receivers can switch without a failed delivery.

Destination lists (`egress`, domain/egress.py) narrow where a tenant's webhooks and alerts may
go; `check_job_egress` applies them to a job's URLs (the job service when a job is created or
changed, the worker at fire time through its own cache).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from tickwork.clock import Clock
from tickwork.domain.egress import BadPattern, parse_rules, tenant_refusal
from tickwork.domain.tenant_limits import NO_LIMITS, TenantLimits, check_limits, merged
from tickwork.domain.tenants import Tenant
from tickwork.errors import InvalidInput, NotFound, StaleTenant
from tickwork.services.rules import MAX_TENANT_CHARS, check_secrets, check_tenant
from tickwork.store.base import ScheduleStore
from tickwork.webhooks import fingerprint, generate_secret

__all__ = ["NewSecret", "TenantService", "TenantSigning", "TenantUsage", "check_job_egress"]

SECRETS_FIELD: Final = "secrets"
EGRESS_FIELD: Final = "egress"
EGRESS_REFUSED: Final = "tenant_egress_refused"
BAD_PATTERN: Final = "invalid_host_pattern"
TENANT_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Read-merge-write rounds before a limits change gives up (each loses only to another write).
_MERGE_ATTEMPTS: Final = 5


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantSigning:
    """What may be shown about a tenant's signing secrets."""

    tenant: str
    fingerprints: tuple[str, ...]  # one per secret, in order; empty: the tenant has none
    updated_at: datetime | None  # None: never set


@dataclass(frozen=True, kw_only=True, slots=True)
class NewSecret:
    """A secret tickwork generated, to show once, and the signing it is part of."""

    secret: str = field(repr=False)
    signing: TenantSigning


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantUsage:
    """What a tenant uses of its limits."""

    jobs: int  # every job of the tenant, whatever its state (what limits.max_jobs counts)


class TenantService:
    """Tenants: created, listed, deleted; their signing secrets, lists and limits."""

    def __init__(
        self,
        store: ScheduleStore,
        clock: Clock,
        *,
        on_limits_changed: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._on_limits_changed = on_limits_changed

    async def create(self, name: str, limits: TenantLimits = NO_LIMITS) -> tuple[Tenant, NewSecret]:
        """A new tenant with a generated signing secret (returned to show once). Raises
        InvalidInput for a bad name or limit, TenantExists if it exists."""
        check_tenant_name(name)
        check_limits(limits)
        secret = generate_secret()
        tenant = await self._store.create_tenant(
            name, now=self._clock.now(), webhook_secrets=(secret,), limits=limits
        )
        self._limits_changed(name)
        signing = _signing(name, tenant.webhook_secrets, tenant.updated_at)
        return tenant, NewSecret(secret=secret, signing=signing)

    async def rotate(self, tenant: str) -> NewSecret:
        """A new signing secret first, the current one kept after it (both sign) until
        `retire_previous`; a tenant without secrets gets just the new one."""
        current = await self.get(tenant)
        secret = generate_secret()
        kept = (secret, *current.webhook_secrets[:1])
        stored = await self._store.set_tenant_secrets(tenant, kept, now=self._clock.now())
        return NewSecret(
            secret=secret, signing=_signing(tenant, stored.webhook_secrets, stored.updated_at)
        )

    async def retire_previous(self, tenant: str) -> TenantSigning:
        """Keep only the newest secret (the end of a rotation); nothing to do is not an error."""
        current = await self.get(tenant)
        kept = current.webhook_secrets[:1]
        if kept == current.webhook_secrets:
            return _signing(tenant, kept, current.updated_at)
        stored = await self._store.set_tenant_secrets(tenant, kept, now=self._clock.now())
        return _signing(tenant, stored.webhook_secrets, stored.updated_at)

    async def sign_unconfigured(self) -> list[str]:
        """Give every tenant whose signing was never configured (no secrets, never updated
        since created) a generated secret; returns their names. A tenant whose secrets were
        cleared on purpose has been updated since, and stays unsigned."""
        signed = []
        for tenant in await self._store.list_tenants():
            if not tenant.webhook_secrets and tenant.updated_at == tenant.created_at:
                await self._store.set_tenant_secrets(
                    tenant.tenant, (generate_secret(),), now=self._clock.now()
                )
                signed.append(tenant.tenant)
        return signed

    async def get(self, name: str) -> Tenant:
        found = await self._store.get_tenant(name)
        if found is None:
            raise NotFound("tenant", name)
        return found

    async def list(self) -> builtins.list[Tenant]:
        return await self._store.list_tenants()

    async def set_egress(
        self, name: str, allow: Sequence[str] | None, deny: Sequence[str] | None
    ) -> Tenant:
        """Replace the tenant's destination lists (None or empty: no list). Raises InvalidInput
        naming `egress.allow[i]` for a bad pattern, NotFound for an unknown tenant. Jobs that
        exist are not re-checked here: workers refuse their fires once the lists refuse them."""
        try:
            rules = parse_rules(allow or (), deny or ())
        except BadPattern as exc:
            where = EGRESS_FIELD if exc.where is None else f"{EGRESS_FIELD}.{exc.where}"
            raise InvalidInput(where, exc.detail, code=BAD_PATTERN) from None
        return await self._store.set_tenant_egress(name, rules, now=self._clock.now())

    async def set_limits(self, name: str, changes: Mapping[str, int | float | None]) -> Tenant:
        """Change the given limits (None removes that limit), keep the others. Raises
        InvalidInput naming `limits.<field>`, NotFound for an unknown tenant. A lower
        `max_jobs` than the tenant's jobs is accepted: its existing jobs stay, and it can add
        none until it is under the limit again."""
        for attempt in range(_MERGE_ATTEMPTS):
            current = await self.get(name)
            limits = merged(current.limits, changes)
            try:
                stored = await self._store.set_tenant_limits(
                    name, limits, now=self._clock.now(), expected_updated_at=current.updated_at
                )
            except StaleTenant:
                # Changed by another request between our read and write: merge into that.
                if attempt + 1 == _MERGE_ATTEMPTS:
                    raise
                continue
            self._limits_changed(name)
            return stored
        raise AssertionError("unreachable")

    async def usage(self, name: str | None = None) -> dict[str, TenantUsage]:
        """Usage by tenant (every tenant, or `name` only); a tenant without jobs is absent."""
        counts = await self._store.count_tenant_jobs(name)
        return {tenant: TenantUsage(jobs=n) for tenant, n in counts.items()}

    async def delete(self, name: str) -> None:
        """Delete a tenant without jobs and revoke its keys. Raises NotFound, TenantHasJobs."""
        await self._store.delete_tenant(name, now=self._clock.now())
        self._limits_changed(name)

    def _limits_changed(self, name: str) -> None:
        if self._on_limits_changed is not None:
            self._on_limits_changed(name)

    async def signing(self, tenant: str) -> TenantSigning:
        check_tenant(tenant)
        found = await self._store.get_tenant(tenant)
        if found is None:
            return TenantSigning(tenant=tenant, fingerprints=(), updated_at=None)
        return _signing(tenant, found.webhook_secrets, found.updated_at)

    async def set_secrets(self, tenant: str, secrets: Sequence[str]) -> TenantSigning:
        check_tenant(tenant)
        if not secrets:
            raise InvalidInput(SECRETS_FIELD, "give 1 or 2 secrets; to remove them, DELETE instead")
        checked = check_secrets(SECRETS_FIELD, secrets)
        stored = await self._store.set_tenant_secrets(tenant, checked, now=self._clock.now())
        return _signing(tenant, stored.webhook_secrets, stored.updated_at)

    async def clear_secrets(self, tenant: str) -> None:
        check_tenant(tenant)
        if await self._store.get_tenant(tenant) is not None:
            await self._store.set_tenant_secrets(tenant, (), now=self._clock.now())


def check_tenant_name(name: str) -> None:
    """A new tenant's name: letters, digits, `.`, `_`, `-`, starting with a letter or digit
    (it appears in URLs and in keys' scopes)."""
    if not 1 <= len(name) <= MAX_TENANT_CHARS:
        raise InvalidInput("name", f"give a name of 1 to {MAX_TENANT_CHARS} characters")
    if not TENANT_NAME.fullmatch(name):
        raise InvalidInput(
            "name",
            "use letters, digits, '.', '_' and '-', starting with a letter or digit",
        )


def check_job_egress(tenant: Tenant, urls: Sequence[tuple[str, str]]) -> None:
    """Raise InvalidInput (422, code `tenant_egress_refused`) naming the field of the first of
    `urls` ((field, url) pairs) that the tenant's lists refuse."""
    for field_name, url in urls:
        reason = tenant_refusal(tenant.tenant, tenant.egress, url)
        if reason is not None:
            hint = f"an admin can change the lists with PATCH /v1/tenants/{tenant.tenant}"
            raise InvalidInput(field_name, f"{reason}; {hint}", code=EGRESS_REFUSED)


def _signing(tenant: str, secrets: Sequence[str], updated_at: datetime) -> TenantSigning:
    return TenantSigning(
        tenant=tenant, fingerprints=tuple(fingerprint(s) for s in secrets), updated_at=updated_at
    )
