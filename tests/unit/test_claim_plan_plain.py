"""ClaimPlan.plain: which plans the SQL stores may claim with the lean statement.

A plan wrongly called plain would lose its ledger range or its overlap decision (the lean
statement has neither), so every policy field that needs the full claim must make it not plain.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.jobs import OverlapPolicy
from tickwork.store.base import ClaimPlan, all_plain

T = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
ON_TIME = ClaimPlan(
    job_id="j",
    expected_fence=1,
    expected_next_run_at=T,
    scheduled_for=T,
    coalesced=0,
    new_next_run_at=T + timedelta(minutes=1),
)


def test_an_on_time_allow_fire_is_plain() -> None:
    assert ON_TIME.plain
    assert replace(ON_TIME, epoch=7).plain
    assert replace(ON_TIME, new_next_run_at=None).plain  # the last fire of a one-shot


@pytest.mark.parametrize(
    "changes",
    [
        {"missed_first": T - timedelta(minutes=3), "missed_last": T - timedelta(minutes=1)},
        {"overlap": OverlapPolicy.SKIP},
        {"overlap": OverlapPolicy.BUFFER_ONE},
        {"overlap": OverlapPolicy.CANCEL_PREVIOUS},
        {"next_if_skipped": T + timedelta(minutes=1)},
        {
            "catchup_first": T - timedelta(minutes=3),
            "catchup_last": T - timedelta(minutes=1),
            "catchup_total": 3,
        },
        {"throttled_ms": 1500},  # the fire ceiling's record on the run (ADR 0025)
    ],
)
def test_policy_work_makes_a_plan_not_plain(changes: dict[str, object]) -> None:
    plan = replace(ON_TIME, **changes)  # type: ignore[arg-type]
    assert not plan.plain
    assert not all_plain([ON_TIME, plan, ON_TIME])


def test_an_overlap_policy_without_a_fire_is_plain() -> None:
    # Nothing fires (misfire skip without a ledger range): there is nothing to overlap.
    assert replace(ON_TIME, scheduled_for=None, overlap=OverlapPolicy.SKIP).plain
