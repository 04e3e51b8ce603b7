"""Pure: per-tenant `max_concurrent_runs`, as the lease statements apply it (issue 21, ADR 0024).

A tenant with a cap of N never has more than N runs *running* across the cluster: pending
with a live lease held by a worker (owner set, lease end after the lease's `now`). A lease
call takes, of a capped tenant's free runs, at most its room (cap minus running); a tenant at
its cap has none leased, and its runs stay pending, unowned, no attempt consumed, until a
slot frees. Tenants without a cap are never counted.

The SQL stores count and lease in their statements; the rules are here so that the memory
store, SQLite (which picks in Python inside its write transaction) and the tests agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from tickwork.domain.tenant_limits import TenantLimits

__all__ = ["caps_of", "pick_within_caps", "room_left"]

K = TypeVar("K")


def caps_of(limits: Iterable[tuple[str, TenantLimits]]) -> dict[str, int]:
    """{tenant: max_concurrent_runs} of the tenants that have that limit (empty: none has,
    and the lease statements take their plain form)."""
    return {
        tenant: limit.max_concurrent_runs
        for tenant, limit in limits
        if limit.max_concurrent_runs is not None
    }


def room_left(caps: Mapping[str, int], running: Mapping[str, int]) -> dict[str, int]:
    """{capped tenant: how many more of its runs may be leased now} (0 when at or over)."""
    return {tenant: max(cap - running.get(tenant, 0), 0) for tenant, cap in caps.items()}


def pick_within_caps(
    candidates: Sequence[tuple[K, str]], room: Mapping[str, int], limit: int
) -> list[K]:
    """Of `candidates` (key, tenant), in their order (soonest free first), the first `limit`
    that fit: a tenant in `room` gets at most its room, any other tenant is not counted."""
    left = dict(room)
    chosen: list[K] = []
    for key, tenant in candidates:
        if len(chosen) >= limit:
            break
        if tenant in left:
            if left[tenant] <= 0:
                continue
            left[tenant] -= 1
        chosen.append(key)
    return chosen
