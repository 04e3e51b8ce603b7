"""The tenant service: per-tenant settings (today: webhook signing secrets).

Secrets are write-only here as everywhere: callers get a `TenantSigning` with fingerprints,
never the secrets. A tenant needs no registration: setting its secrets creates its row,
clearing them keeps the row (stage 3's per-tenant limits will live there too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.clock import Clock
from tickwork.errors import InvalidInput
from tickwork.services.rules import check_secrets, check_tenant
from tickwork.store.base import ScheduleStore
from tickwork.webhooks import fingerprint

__all__ = ["TenantService", "TenantSigning"]

SECRETS_FIELD: Final = "secrets"


@dataclass(frozen=True, kw_only=True, slots=True)
class TenantSigning:
    """What may be shown about a tenant's signing secrets."""

    tenant: str
    fingerprints: tuple[str, ...]  # one per secret, in order; empty: the tenant has none
    updated_at: datetime | None  # None: never set


class TenantService:
    """A tenant's signing secrets: set, shown as fingerprints, cleared."""

    def __init__(self, store: ScheduleStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

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


def _signing(tenant: str, secrets: Sequence[str], updated_at: datetime) -> TenantSigning:
    return TenantSigning(
        tenant=tenant, fingerprints=tuple(fingerprint(s) for s in secrets), updated_at=updated_at
    )
