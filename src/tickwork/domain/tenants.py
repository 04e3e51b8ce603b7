"""Tenants: per-tenant settings shared by all of a tenant's jobs (signing secrets, the
destinations its webhooks may reach, its limits)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tickwork.domain.egress import EgressRules
from tickwork.domain.tenant_limits import TenantLimits


@dataclass(frozen=True, kw_only=True, slots=True)
class Tenant:
    tenant: str
    # 0-2 `whsec_...` secrets that sign the tenant's jobs that have none of their own.
    webhook_secrets: tuple[str, ...] = field(default=(), repr=False)
    created_at: datetime
    updated_at: datetime
    # Hosts the tenant's webhooks and alerts may (allow) or may not (deny) reach, within what
    # the SSRF guard permits (domain/egress.py); empty: no lists.
    egress: EgressRules = field(default_factory=EgressRules)
    # Quotas and rates (domain/tenant_limits.py); empty: no limits.
    limits: TenantLimits = field(default_factory=TenantLimits)
