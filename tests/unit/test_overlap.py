"""What a claim does with an occurrence whose job still has a run going: the table of
`decide` (the PostgreSQL claim spells the same table as a CASE; the contract tests in
tests/contract/test_store_overlap.py check every store against it)."""

from __future__ import annotations

import pytest

from tickwork.domain.jobs import OverlapPolicy
from tickwork.domain.overlap import FIRE, Decision, Verdict, decide

A, S, B, C = (
    OverlapPolicy.ALLOW,
    OverlapPolicy.SKIP,
    OverlapPolicy.BUFFER_ONE,
    OverlapPolicy.CANCEL_PREVIOUS,
)


@pytest.mark.parametrize(
    ("policy", "active", "held", "expected"),
    [
        # nothing going: every policy fires
        *((p, [], [], FIRE) for p in OverlapPolicy),
        # allow never looks
        (A, [4, 2], [], FIRE),
        # skip names the oldest run going (or the held one, if that is all there is)
        (S, [4, 2], [], Decision(Verdict.SKIP, 2)),
        (S, [4], [9], Decision(Verdict.SKIP, 4)),
        (S, [], [9], Decision(Verdict.SKIP, 9)),
        # buffer_one holds one back behind the oldest run going; a second is skipped, naming
        # the one held
        (B, [4, 2], [], Decision(Verdict.HOLD, 2)),
        (B, [4], [9], Decision(Verdict.SKIP, 9)),
        # cancel_previous cancels whatever is pending, held runs too
        (C, [4], [], Decision(Verdict.CANCEL)),
        (C, [4], [9], Decision(Verdict.CANCEL)),
    ],
)
def test_the_overlap_table(
    policy: OverlapPolicy, active: list[int], held: list[int], expected: Decision
) -> None:
    assert decide(policy, active, held) == expected
