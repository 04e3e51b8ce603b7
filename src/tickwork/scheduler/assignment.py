"""Pure partition assignment: which live scheduler should hold which partition.

Every scheduler computes the same assignment from the same inputs (the live members and who
holds what now) and then acts only on its own share: it renews what it keeps, releases what it
should give up and takes what is free. So there is no coordinator to elect, and the store's
compare-and-set on each lease keeps two schedulers from holding one partition whatever their
views of the cluster are at that moment.

The assignment is:

* even: every member gets P // n partitions, and P % n of them one more;
* sticky: a member keeps the partitions it holds, up to its share, so a steady membership
  changes nothing (no flapping) and a join or a leave moves only what must move;
* deterministic: members and partitions are taken in sorted order, ties are broken by id.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping


def plan_assignment(
    partitions: int, members: Collection[str], holders: Mapping[int, str | None]
) -> dict[str, frozenset[int]]:
    """Each member's partitions. `holders` maps a partition to its current live holder (None,
    or missing, when nobody holds it); a holder that is not among `members` holds nothing."""
    ordered = sorted(set(members))
    if not ordered:
        return {}
    held: dict[str, list[int]] = {m: [] for m in ordered}
    for partition in range(partitions):
        holder = holders.get(partition)
        if holder in held:
            held[holder].append(partition)
    share = _shares(partitions, ordered, held)
    kept = {m: held[m][: share[m]] for m in ordered}
    taken = {p for ps in kept.values() for p in ps}
    free = iter(p for p in range(partitions) if p not in taken)
    for member in ordered:
        while len(kept[member]) < share[member]:
            kept[member].append(next(free))
    return {m: frozenset(ps) for m, ps in kept.items()}


def _shares(partitions: int, ordered: list[str], held: Mapping[str, list[int]]) -> dict[str, int]:
    """P // n each; the P % n extra ones go to the members holding the most already (then by
    id), so that an uneven split does not move a partition from one member to another."""
    base, extra = divmod(partitions, len(ordered))
    by_claim = sorted(ordered, key=lambda m: (-len(held[m]), m))
    bigger = set(by_claim[:extra])
    return {m: base + (m in bigger) for m in ordered}


def moves(
    me: str, target: frozenset[int], mine: Collection[int], holders: Mapping[int, str | None]
) -> tuple[frozenset[int], frozenset[int], frozenset[int]]:
    """What `me` does to reach `target` from holding `mine`: (keep, release, acquire). Only a
    partition nobody live holds is acquired; one still held by another member is left to that
    member to release first (the next round takes it)."""
    held = frozenset(mine)
    keep = held & target
    release = held - target
    acquire = frozenset(p for p in target - held if holders.get(p) in (None, me))
    return keep, release, acquire
