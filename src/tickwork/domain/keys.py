"""API keys and what they allow (ADR 0018).

A key is `tw_<prefix>_<secret>`: the prefix (8 characters, shown in lists and logs) names it
without revealing it; the whole key carries 256 random bits. The store keeps only its SHA-256.
A fast unsalted hash is enough for a random 256-bit secret, which no dictionary or brute force
reaches, and it costs a microsecond per request where a password hash (bcrypt, argon2) would
cost tens of milliseconds on every call: password hashes protect low-entropy secrets that
people choose, which keys are not.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

__all__ = ["ApiKey", "MintedKey", "Principal", "Role", "hash_key", "mint_key"]

KEY_PREFIX = "tw_"
PREFIX_CHARS = 8


class Role(StrEnum):
    ADMIN = "admin"  # every tenant, tenants and keys, the cluster
    TENANT_WRITE = "tenant-write"  # one tenant: read and change its jobs, runs, secrets
    TENANT_READ = "tenant-read"  # one tenant: read only


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiKey:
    id: str
    name: str
    role: Role
    tenant: str | None  # None for admin keys; the tenant of a tenant role
    prefix: str  # what identifies the key in lists: "tw_" + 8 characters
    secret_hash: str = field(repr=False)  # hex SHA-256 of the whole key
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None

    def usable_at(self, now: datetime) -> bool:
        """Neither revoked nor expired at `now`."""
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or now < self.expires_at


@dataclass(frozen=True, slots=True)
class MintedKey:
    key: str = field(repr=False)  # the whole key: shown once, never stored
    prefix: str
    secret_hash: str = field(repr=False)


def mint_key() -> MintedKey:
    """A new random key, its visible prefix and the hash the store keeps."""
    prefix = KEY_PREFIX + secrets.token_hex(PREFIX_CHARS // 2)
    key = f"{prefix}_{secrets.token_urlsafe(32)}"
    return MintedKey(key=key, prefix=prefix, secret_hash=hash_key(key))


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def key_prefix(key: str) -> str:
    """The visible part of a presented key (for logs), or "" when it has none."""
    head = key[: len(KEY_PREFIX) + PREFIX_CHARS]
    return (
        head if head.startswith(KEY_PREFIX) and len(head) == len(KEY_PREFIX) + PREFIX_CHARS else ""
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """Who makes a request: the key's id, role and tenant."""

    key_id: str
    role: Role
    tenant: str | None
    key_prefix: str | None = None  # for the audit trail and logs

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN

    @property
    def may_write(self) -> bool:
        return self.role is not Role.TENANT_READ

    def sees(self, tenant: str) -> bool:
        """May this principal see `tenant`'s resources at all?"""
        return self.is_admin or tenant == self.tenant
