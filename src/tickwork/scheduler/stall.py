"""Pure: which partitions held elsewhere a scheduler may take work over from (ADR 0017).

A takeover claims the overdue work of a partition this scheduler does not hold, so that a dead
owner's jobs wait the takeover grace and not a lease TTL. Overdue work alone is the wrong cue:
in a burst, a live owner is behind by more than the grace for a while, and every other
scheduler taking its work then races it row by row (conflicts, and three schedulers slower
than one). So a partition qualifies only when

* nobody holds it (released, or its lease ran out and it is not reassigned yet), or
* its owner is gone: the store saw no session of its process (`gone`, ADR 0032), so there is
  nobody to race and nothing to watch for; or
* its owner is stalled: none of the heads of its partitions (each one's oldest unclaimed due
  job, `DueHead`) has moved for the grace. A live owner claims from the front of its due
  work, so it moves some head within one claim; a dead or paused one moves none. Heads that
  appear meanwhile (new work coming due) do not count as progress.

A verdict of "stalled" holds until the owner renews one of its leases after it (it is alive
after all), or for one lease TTL (by then a dead owner's leases have run out and its
partitions are free anyway). While it holds, this scheduler's own takeover claims move the
owner's heads, which must not read as the owner's progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from tickwork.domain.partitions import DueHead, PartitionLease


@dataclass(frozen=True, slots=True)
class _Verdict:
    until_s: float  # monotonic
    at: datetime  # a lease renewed after this instant shows the owner alive


@dataclass(slots=True)
class _Reference:
    since_s: float  # monotonic: when these heads were first seen, all of them unchanged since
    heads: dict[int, DueHead] = field(default_factory=dict)


class StallWatch:
    """Remembers, per owner, the heads it last saw move; `eligible()` is its verdict."""

    def __init__(self, *, grace_s: float, verdict_ttl_s: float) -> None:
        self._grace_s = grace_s
        self._verdict_ttl_s = verdict_ttl_s
        self._references: dict[str, _Reference] = {}
        self._verdicts: dict[str, _Verdict] = {}

    def eligible(
        self,
        *,
        at_s: float,
        now: datetime,
        leases: Mapping[int, PartitionLease | None],
        heads: Mapping[int, DueHead],
        gone: frozenset[str] = frozenset(),
    ) -> frozenset[int]:
        """The partitions of `leases` (those held elsewhere, as last read; None: no lease
        known) whose overdue work may be taken over now. `heads` are their current heads,
        `at_s` the monotonic time and `now` the wall time of that read; `gone` the owners the
        store found no process of."""
        free: set[int] = set()
        by_owner: dict[str, list[PartitionLease]] = {}
        for partition, lease in leases.items():
            if lease is None or lease.owner is None or lease.owner in gone:
                free.add(partition)
            else:
                by_owner.setdefault(lease.owner, []).append(lease)
        for owner in set(self._references) - set(by_owner):
            self._forget(owner)  # gone from the view: its partitions changed hands
        for owner, held in by_owner.items():
            theirs = {le.partition: heads[le.partition] for le in held if le.partition in heads}
            renewed = max((le.renewed_at for le in held if le.renewed_at is not None), default=None)
            if self._stalled(owner, at_s, now, theirs, renewed):
                free.update(le.partition for le in held)
        return frozenset(free)

    def stalled_owners(self) -> frozenset[str]:
        """The owners judged stalled now (for logs and tests)."""
        return frozenset(self._verdicts)

    def _stalled(
        self,
        owner: str,
        at_s: float,
        now: datetime,
        heads: dict[int, DueHead],
        renewed: datetime | None,
    ) -> bool:
        verdict = self._verdicts.get(owner)
        if verdict is not None:
            alive = renewed is not None and renewed > verdict.at
            if at_s < verdict.until_s and not alive:
                return True
            self._forget(owner)  # judge it afresh from here
        reference = self._references.get(owner)
        if reference is None or not reference.heads or _moved(reference.heads, heads):
            self._references[owner] = _Reference(since_s=at_s, heads=heads)
            return False
        if at_s - reference.since_s < self._grace_s:
            return False
        self._verdicts[owner] = _Verdict(until_s=at_s + self._verdict_ttl_s, at=now)
        return True

    def _forget(self, owner: str) -> None:
        self._references.pop(owner, None)
        self._verdicts.pop(owner, None)


def _moved(before: Mapping[int, DueHead], now: Mapping[int, DueHead]) -> bool:
    """Has any head seen before moved (claimed: another head, or none left)? New heads, where
    none was before, are work coming due, not progress."""
    return any(now.get(partition) != head for partition, head in before.items())
