"""The audit log: one entry per change made through the API (or a CLI command with database
access), kept for the history retention and pruned with it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["AuditEntry"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEntry:
    id: int | None = None  # assigned by the store (ascending)
    at: datetime  # when the change was made (UTC)
    key_id: str | None  # the API key that made it (None: a CLI command with db access)
    key_prefix: str | None
    role: str | None  # the key's role
    actor_tenant: str | None  # the key's tenant (None for admin keys)
    action: str  # e.g. "POST /v1/jobs/{job_id}/pause"
    resource: str | None  # e.g. "job 0192..." or "key key_ab12"
    tenant: str | None  # the tenant the changed resource belongs to, when known
    status: int  # the HTTP status of the answer
    client: str | None  # the caller's address
