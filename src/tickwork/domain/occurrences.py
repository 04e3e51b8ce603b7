"""The occurrence ledger's records: occurrences a schedule implied that got no run of their own.

A fired occurrence is its run (tw_runs); the ledger (tw_occurrences) holds the rest, as ranges
of consecutive occurrences that share one reason: `first` and `last` are the nominal instants
of the first and last occurrence of the range, `count` how many the schedule implied there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class LedgerReason(StrEnum):
    SKIPPED_OVERLAP = "skipped_overlap"  # run_id: the run that was still going
    SKIPPED_MISFIRE = "skipped_misfire"  # missed past the grace, misfire policy `skip`
    COALESCED_INTO = "coalesced_into"  # run_id: the run fired instead (misfire `coalesce`)
    PAUSED = "paused"  # fell while the job was paused and it resumed from then
    THROTTLED = "throttled"


@dataclass(frozen=True, kw_only=True, slots=True)
class LedgerRange:
    job_id: str
    first: datetime
    last: datetime
    count: int
    reason: LedgerReason
    run_id: int | None
    recorded_at: datetime
    id: int | None = None  # set by the store
