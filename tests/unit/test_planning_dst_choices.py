"""Misfire planning sees a cron job's DST choices: the occurrences it coalesces, counts and
skips over are the ones the choice gives (America/New_York, 01:30 twice on 2026-11-01)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tickwork.domain.jobs import CronTrigger, DstRepeat, MisfirePolicy, Schedule
from tickwork.scheduler.planning import plan_claim
from tickwork.store.base import DueJob

FIRST, SECOND, NEXT_DAY = (
    datetime(2026, 11, 1, 5, 30, tzinfo=UTC),  # 01:30 EDT
    datetime(2026, 11, 1, 6, 30, tzinfo=UTC),  # 01:30 EST
    datetime(2026, 11, 2, 6, 30, tzinfo=UTC),
)
LATE = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)  # the scheduler was down over both 01:30s


def due(repeat: DstRepeat, policy: MisfirePolicy, next_run_at: datetime) -> DueJob:
    schedule = Schedule(
        trigger=CronTrigger(expr="30 1 * * *", timezone="America/New_York"),
        misfire=policy,
        dst_repeat=repeat,
    )
    return DueJob(job_id="j", fence_token=1, next_run_at=next_run_at, schedule=schedule)


@pytest.mark.parametrize(
    ("repeat", "policy", "next_run_at", "fire", "coalesced"),
    [
        # both: two occurrences were missed; coalesce fires the second, folding the first
        (DstRepeat.BOTH, MisfirePolicy.COALESCE, FIRST, SECOND, 1),
        (DstRepeat.BOTH, MisfirePolicy.SKIP, FIRST, None, 2),
        # first: only one occurrence that day, nothing folded
        (DstRepeat.FIRST, MisfirePolicy.COALESCE, FIRST, FIRST, 0),
        # second: the job was due at the second instant only
        (DstRepeat.SECOND, MisfirePolicy.COALESCE, SECOND, SECOND, 0),
        (DstRepeat.SECOND, MisfirePolicy.SKIP, SECOND, None, 1),
    ],
)
def test_misfire_after_a_fall_back_counts_the_chosen_occurrences(
    repeat: DstRepeat,
    policy: MisfirePolicy,
    next_run_at: datetime,
    fire: datetime | None,
    coalesced: int,
) -> None:
    plan = plan_claim(due(repeat, policy, next_run_at), LATE)
    assert (plan.scheduled_for, plan.coalesced, plan.new_next_run_at) == (
        fire,
        coalesced,
        NEXT_DAY,
    )


def test_on_time_both_advances_to_the_second_instant() -> None:
    plan = plan_claim(due(DstRepeat.BOTH, MisfirePolicy.COALESCE, FIRST), FIRST)
    assert (plan.scheduled_for, plan.new_next_run_at) == (FIRST, SECOND)
