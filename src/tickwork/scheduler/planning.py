"""Pure tick planning: what claiming a due job does, given the instant of the claim.

No I/O and no clock: `plan_claim(due, now)` is a function of its arguments, so every
misfire rule is a table test (tests/unit/test_planning.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tickwork.domain.jobs import MisfirePolicy
from tickwork.store.base import ClaimPlan, DueJob
from tickwork.timing.triggers import count_occurrences, latest_occurrence, next_occurrence


def plan_claim(due: DueJob, now: datetime) -> ClaimPlan:
    """Plan the claim of one due job (`due.next_run_at` may be slightly after `now` when the
    scheduler claims ahead; the fire itself then waits for its instant).

    A job is on time while `now - next_run_at` is within its misfire grace: it fires its due
    occurrence and advances to the next one, even if that one is already due too (it is then
    claimed in the next batch). Past the grace, the misfire policy decides:
    coalesce fires the latest missed occurrence once and counts the ones folded into it;
    fire_all fires the oldest and lets the following ones come due one by one;
    skip fires nothing and moves on to the first occurrence after `now`.
    """
    schedule = due.schedule
    late = now - due.next_run_at
    policy = schedule.misfire
    if (
        late <= timedelta(milliseconds=schedule.misfire_grace_ms)
        or policy is MisfirePolicy.FIRE_ALL
    ):
        return _plan(due, fire=due.next_run_at, coalesced=0)
    latest = latest_occurrence(schedule, at_or_before=now, not_before=due.next_run_at)
    latest = due.next_run_at if latest is None else latest
    folded = count_occurrences(schedule, after=due.next_run_at, until=latest)
    if policy is MisfirePolicy.COALESCE:
        return _plan(due, fire=latest, coalesced=folded)
    return ClaimPlan(
        job_id=due.job_id,
        expected_fence=due.fence_token,
        expected_next_run_at=due.next_run_at,
        scheduled_for=None,
        coalesced=folded + 1,
        new_next_run_at=next_occurrence(schedule, now),
    )


def _plan(due: DueJob, *, fire: datetime, coalesced: int) -> ClaimPlan:
    return ClaimPlan(
        job_id=due.job_id,
        expected_fence=due.fence_token,
        expected_next_run_at=due.next_run_at,
        scheduled_for=fire,
        coalesced=coalesced,
        new_next_run_at=next_occurrence(due.schedule, fire),
    )


def sleep_seconds(
    next_due: datetime | None, now: datetime, *, lookahead_ms: int, max_idle_ms: int
) -> float:
    """How long the scheduler may sleep before the earliest due job needs claiming.

    It wakes `lookahead_ms` before the job is due, but never sooner than half the look-ahead
    once the job is beyond reach of this tick: under an even load (jobs due every millisecond)
    waking for each one would mean a tick per fire; this way each tick claims half a
    look-ahead's worth, still at least that much ahead of its instant.
    """
    ceiling = max_idle_ms / 1000
    if next_due is None:
        return ceiling
    until_due = (next_due - now).total_seconds()
    lookahead = lookahead_ms / 1000
    if until_due <= lookahead:
        return 0.0  # claimable now (it was not in the last batch: claim it)
    return min(max(until_due - lookahead, lookahead / 2), ceiling)
