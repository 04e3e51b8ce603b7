"""API keys: minted, listed, revoked, and checked on every request (ADR 0018).

`authenticate` runs on every /v1 request, so it reads the store at most once a second per key:
a short cache of the lookup by hash, unknown keys included, which is also how long a
revocation takes to reach every API process. The last-used time is written in batches, at most
every `TOUCH_EVERY_S`, never on the request's own path to the store more than that.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from tickwork.clock import Clock, utc_iso
from tickwork.domain.keys import ApiKey, MintedKey, Principal, Role, hash_key, mint_key
from tickwork.errors import InvalidInput, RateLimited, Unauthenticated
from tickwork.services.rules import check_tenant
from tickwork.store.base import ScheduleStore
from tickwork.timing.rate_limit import Buckets, Limit

__all__ = ["CACHE_S", "CreatedKey", "KeyService"]

CACHE_S: Final = 1.0  # a revocation reaches every API process within this long
TOUCH_EVERY_S: Final = 30.0
MAX_NAME = 100
BEARER = "bearer"
NO_LIMIT: Final = Limit(rate=0, burst=0)


@dataclass(frozen=True, slots=True)
class CreatedKey:
    """A new key as stored, and the whole key, which is shown this once."""

    key: ApiKey
    plaintext: str


class KeyService:
    def __init__(self, store: ScheduleStore, clock: Clock, *, limit: Limit = NO_LIMIT) -> None:
        self._store = store
        self._clock = clock
        self._buckets = Buckets(limit)
        self._cache: dict[str, tuple[float, ApiKey | None]] = {}  # hash -> (read at, key)
        self._used: dict[str, datetime] = {}  # key id -> last use not yet written
        self._touched_at = float("-inf")  # the first use is written at once

    async def create(
        self,
        *,
        name: str,
        role: Role,
        tenant: str | None = None,
        expires_at: datetime | None = None,
        minted: MintedKey | None = None,
    ) -> CreatedKey:
        """A new key. Raises InvalidInput naming the field: a name that is empty or too long,
        a tenant missing for a tenant role (or given for admin, or unknown), an expiry not in
        the future."""
        name = name.strip()
        if not 1 <= len(name) <= MAX_NAME:
            raise InvalidInput("name", f"give the key a name of 1 to {MAX_NAME} characters")
        now = self._clock.now()
        if role is Role.ADMIN:
            if tenant is not None:
                raise InvalidInput(
                    "tenant",
                    "an admin key spans every tenant: leave tenant out",
                    code="tenant_for_role",
                )
        else:
            if tenant is None:
                raise InvalidInput(
                    "tenant",
                    f"a {role.value} key needs the tenant it is for",
                    code="tenant_for_role",
                )
            check_tenant(tenant)
            if await self._store.get_tenant(tenant) is None:
                raise InvalidInput(
                    "tenant",
                    f"no tenant {tenant!r}: create it first (POST /v1/tenants)",
                    code="unknown_tenant",
                )
        if expires_at is not None and expires_at <= now:
            raise InvalidInput(
                "expires_at",
                f"must be in the future (now is {utc_iso(now)})",
                code="expires_in_the_past",
            )
        minted = minted or mint_key()
        key = ApiKey(
            id=_key_id(minted),
            name=name,
            role=role,
            tenant=tenant,
            prefix=minted.prefix,
            secret_hash=minted.secret_hash,
            created_at=now,
            expires_at=expires_at,
        )
        await self._store.create_key(key)
        return CreatedKey(key=key, plaintext=minted.key)

    async def list(self, tenant: str | None = None) -> list[ApiKey]:
        return await self._store.list_keys(tenant=tenant)

    async def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key (again: no change). Raises NotFound."""
        revoked = await self._store.revoke_key(key_id, now=self._clock.now())
        self._cache = {h: v for h, v in self._cache.items() if v[1] is None or v[1].id != key_id}
        return revoked

    async def any_usable(self) -> bool:
        """Is there a key that is neither revoked nor expired?"""
        now = self._clock.now()
        return any(k.usable_at(now) for k in await self._store.list_keys())

    async def authenticate(self, authorization: str | None) -> Principal:
        """The principal of an `Authorization` header. Raises Unauthenticated saying what is
        wrong: no header, another scheme, an unknown, revoked or expired key."""
        if not authorization:
            raise Unauthenticated(
                "this route needs an API key: send the header Authorization: Bearer <key>"
            )
        scheme, _, presented = authorization.strip().partition(" ")
        presented = presented.strip()
        if scheme.lower() != BEARER or not presented:
            raise Unauthenticated("send the API key as Authorization: Bearer <key>")
        key = await self._lookup(hash_key(presented))
        now = self._clock.now()
        if key is None:
            raise Unauthenticated("the API key is not valid")
        if key.revoked_at is not None:
            raise Unauthenticated(f"the API key {key.prefix}... was revoked")
        if not key.usable_at(now):
            raise Unauthenticated(f"the API key {key.prefix}... has expired")
        await self._note_use(key.id, now)
        wait_s = self._buckets.take(key.id, self._clock.monotonic_s())
        if wait_s > 0:
            raise RateLimited(
                f"too many requests with key {key.prefix}...: this API process admits "
                f"{self._limit_text()} per key; retry after the Retry-After seconds",
                retry_after_s=wait_s,
            )
        return Principal(key_id=key.id, role=key.role, tenant=key.tenant, key_prefix=key.prefix)

    def _limit_text(self) -> str:
        limit = self._buckets.limit
        return f"{limit.rate:g} requests per second (bursts of {limit.burst})"

    async def _lookup(self, secret_hash: str) -> ApiKey | None:
        at = self._clock.monotonic_s()
        cached = self._cache.get(secret_hash)
        if cached is not None and at - cached[0] < CACHE_S:
            return cached[1]
        key = await self._store.key_by_hash(secret_hash)
        if len(self._cache) > 10_000:  # a flood of made-up keys must not grow it without end
            self._cache.clear()
        self._cache[secret_hash] = (at, key)
        return key

    async def _note_use(self, key_id: str, now: datetime) -> None:
        self._used[key_id] = now
        if self._clock.monotonic_s() - self._touched_at < TOUCH_EVERY_S:
            return
        used, self._used = self._used, {}
        self._touched_at = self._clock.monotonic_s()
        await self._store.touch_keys(used)


def _key_id(minted: MintedKey) -> str:
    """A key's id: random, and unrelated to the key itself (ids appear in URLs and logs)."""
    return "key_" + secrets.token_hex(8)
