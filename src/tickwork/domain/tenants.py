"""Tenants: per-tenant settings shared by all of a tenant's jobs (today: signing secrets)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class Tenant:
    tenant: str
    # 0-2 `whsec_...` secrets that sign the tenant's jobs that have none of their own.
    webhook_secrets: tuple[str, ...] = field(default=(), repr=False)
    created_at: datetime
    updated_at: datetime
