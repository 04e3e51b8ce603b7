"""Pure: how a tick's capacity is shared among tenants when more is due than it can claim.

Tenants share a batch by weighted max-min fairness (water-filling): every tenant with due work
gets capacity in proportion to its weight, a tenant that needs less than its share takes only
what it needs, and what it leaves is shared among the others the same way. So:

- the split uses the whole batch whenever enough is due (work-conserving);
- no tenant gets more than it has due;
- a tenant with a small load (B's 100 jobs a second) always gets all of it while a tenant
  with a backlog (A's million) takes the rest: B stays on time and A drains at nearly the
  full rate.

`fair_shares` is called once per overloaded tick with each tenant's due count, counted no
further than the batch (a tenant with more due than the batch needs no exact count), and
`interleave` orders the claimed plans round-robin, so that the fires go out fairly within
the batch too. Ties in the water-filling (capacity that does not divide evenly) go to the
tenants in name order, so a split is reproducible.

No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

__all__ = ["fair_shares", "interleave"]

T = TypeVar("T")


def fair_shares(
    due: Mapping[str, int], weights: Mapping[str, int], capacity: int
) -> dict[str, int]:
    """Each tenant's share of `capacity`: weighted max-min fair, never above its `due`.

    `weights` maps tenant -> weight (missing: 1; at least 1). Tenants with nothing due get 0.
    """
    if capacity < 0:
        raise ValueError("capacity must be 0 or more")
    shares = {tenant: 0 for tenant in due}
    wanting = sorted(tenant for tenant, count in due.items() if count > 0)
    left = capacity
    while wanting and left > 0:
        total_weight = sum(_weight(weights, t) for t in wanting)
        # Whole units per weight this round; at least one round of one unit each.
        per_weight = left // total_weight
        if per_weight == 0:
            # Fewer units left than the total weight: one at a time, each to the tenant whose
            # share per weight would stay the smallest (then first by name).
            while left > 0 and wanting:
                tenant = min(wanting, key=lambda t: _next_unit(shares[t], _weight(weights, t), t))
                shares[tenant] += 1
                left -= 1
                if shares[tenant] >= due[tenant]:
                    wanting.remove(tenant)
            break
        satisfied = []
        for tenant in wanting:
            grant = min(per_weight * _weight(weights, tenant), due[tenant] - shares[tenant])
            shares[tenant] += grant
            left -= grant
            if shares[tenant] >= due[tenant]:
                satisfied.append(tenant)
        if not satisfied:
            continue  # everyone took a full round; the remainder goes round again
        wanting = [t for t in wanting if t not in satisfied]
    return shares


def _next_unit(share: int, weight: int, tenant: str) -> tuple[float, float, str]:
    """Who gets the next unit: the smallest share per weight after it, then before it."""
    return ((share + 1) / weight, share / weight, tenant)


def _weight(weights: Mapping[str, int], tenant: str) -> int:
    return max(1, weights.get(tenant, 1))


def interleave(groups: Mapping[str, Sequence[T]], weights: Mapping[str, int]) -> list[T]:
    """The items of every tenant's group in round-robin order, `weight` items per turn
    (weighted round-robin), each group keeping its own order; tenants in name order."""
    cursors = {tenant: 0 for tenant in sorted(groups)}
    out: list[T] = []
    while cursors:
        for tenant in list(cursors):
            group, at = groups[tenant], cursors[tenant]
            take = _weight(weights, tenant)
            out.extend(group[at : at + take])
            if at + take >= len(group):
                del cursors[tenant]
            else:
                cursors[tenant] = at + take
    return out
