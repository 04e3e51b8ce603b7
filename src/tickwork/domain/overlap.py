"""What a claim does with an occurrence whose job still has a run going (issue 20).

Pure: the stores find the job's pending runs (its active ones, and the one held back by
buffer_one, if any) and this says what the claim does. The SQL of the PostgreSQL claim spells
the same table as a CASE (store/sql/postgres.sql, claim_jobs); tests/unit/test_overlap.py
holds the table.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

from tickwork.domain.jobs import OverlapPolicy


class Verdict(StrEnum):
    FIRE = "fire"  # insert the occurrence's run as usual
    SKIP = "skip"  # no run: a skipped_overlap ledger row naming the blocking run
    HOLD = "hold"  # insert the run held back until the blocking run ends (buffer_one)
    CANCEL = "cancel"  # cancel the job's pending runs, then insert the new run as usual


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    blocker: int | None = None  # the run still going (SKIP, HOLD), or the held run (SKIP)


FIRE = Decision(Verdict.FIRE)


def decide(policy: OverlapPolicy, active: Collection[int], held: Collection[int]) -> Decision:
    """The claim's decision for one occurrence of a job with `policy` whose pending runs are
    `active` (waiting, leased or between retries) and `held` (held back by buffer_one).

    The blocker named is the oldest such run (lowest id), as the SQL stores pick it."""
    if policy is OverlapPolicy.ALLOW or not (active or held):
        return FIRE
    if policy is OverlapPolicy.CANCEL_PREVIOUS:
        return Decision(Verdict.CANCEL)
    if policy is OverlapPolicy.BUFFER_ONE:
        if held:
            return Decision(Verdict.SKIP, min(held))  # one is waiting already
        return Decision(Verdict.HOLD, min(active))
    return Decision(Verdict.SKIP, min(active) if active else min(held))
