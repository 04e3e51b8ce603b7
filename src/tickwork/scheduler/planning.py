"""Pure tick planning: what claiming a due job does, given the instant of the claim.

No I/O and no clock: `plan_claim(due, now)` is a function of its arguments, so every
misfire rule is a table test (tests/unit/test_planning.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tickwork.domain.backfills import MAX_BACKFILL_OCCURRENCES
from tickwork.domain.jobs import AtTrigger, EveryTrigger, MisfirePolicy, OverlapPolicy, Schedule
from tickwork.store.base import ClaimPlan, DueJob
from tickwork.timing.shift import is_shifted, nominal_of, planned_of, window_seconds
from tickwork.timing.triggers import count_occurrences, latest_occurrence, next_occurrence


def plan_claim(
    due: DueJob, now: datetime, *, epoch: int | None = None, throttled: bool = False
) -> ClaimPlan:
    """Plan the claim of one due job: `_plan_nominal` on its nominal instant, then the job's
    next occurrence moved by its jitter (ADR 0022).

    A jittered or windowed job's `next_run_at` is its next occurrence's planned instant; the
    plan fires the occurrence under its nominal instant (its identity: key, scheduled_for,
    ledger), judges lateness from the planned one (a jittered fire is not late by its delay),
    and compares-and-sets on the stored one. A windowed job's next occurrence is left at its
    nominal instant here: `place_windows` places it, against the load read for the batch.
    """
    schedule = due.schedule
    if not is_shifted(schedule):
        return _plan_nominal(due, now, epoch=epoch, throttled=throttled)
    nominal = nominal_of(schedule, due.next_run_at)
    plan = _plan_nominal(
        replace(due, next_run_at=nominal),
        now,
        epoch=epoch,
        planned=due.next_run_at,
        throttled=throttled,
    )
    plan = replace(plan, expected_next_run_at=due.next_run_at)
    if not schedule.jitter_ms:
        return plan
    return _shifted(plan, due, load=None)


def place_windows(
    plans: Sequence[ClaimPlan], due: Sequence[DueJob], load: Mapping[int, int]
) -> list[ClaimPlan]:
    """`plans` (of `due`, in the same order) with each windowed job's next occurrence placed in
    its window, in a least loaded second by `load` (a `LoadMap` is counted each placement, so a
    batch spreads itself). Plans of other jobs are returned as they are."""
    return [
        _shifted(plan, job, load=load) if job.schedule.window_ms else plan
        for plan, job in zip(plans, due, strict=True)
    ]


def window_ranges(plans: Sequence[ClaimPlan], due: Sequence[DueJob]) -> list[tuple[int, int]]:
    """The epoch seconds [first, last] `place_windows` will read the load of, one range per
    windowed plan with a next occurrence."""
    found = []
    for plan, job in zip(plans, due, strict=True):
        for nominal in (plan.new_next_run_at, plan.next_if_skipped):
            if nominal is not None and job.schedule.window_ms:
                span = window_seconds(job.schedule, nominal)
                if span is not None:
                    found.append(span)
    return found


def _shifted(plan: ClaimPlan, due: DueJob, *, load: Mapping[int, int] | None) -> ClaimPlan:
    """`plan` with its next occurrence (and the one it falls back to if skipped) moved from its
    nominal instant to its planned one."""

    def shift(nominal: datetime | None) -> datetime | None:
        return None if nominal is None else planned_of(due.job_id, due.schedule, nominal, load=load)

    return replace(
        plan,
        new_next_run_at=shift(plan.new_next_run_at),
        next_if_skipped=shift(plan.next_if_skipped),
    )


def _plan_nominal(
    due: DueJob,
    now: datetime,
    *,
    epoch: int | None,
    planned: datetime | None = None,
    throttled: bool = False,
) -> ClaimPlan:
    """Plan the claim of one due job (`due.next_run_at` may be slightly after `now` when the
    scheduler claims ahead; the fire itself then waits for its instant). `epoch` is the epoch
    of the job's partition lease the claimer holds (ADR 0015), carried to the store's check.

    A job is on time while `now - next_run_at` is within its misfire grace: it fires its due
    occurrence and advances to the next one, even if that one is already due too (it is then
    claimed in the next batch). Past the grace, the misfire policy decides:
    coalesce fires the latest missed occurrence once and counts the ones folded into it;
    fire_all fires the latest on time too, and hands the missed ones within the schedule's
    catchup_window to one paced catch-up backfill, skipping the older ones (`_fire_all`);
    skip fires nothing and moves on to the first occurrence after `now`.
    The plan names the range of occurrences folded or skipped (`missed_first`..`missed_last`,
    `coalesced` of them) for the claim to record in the occurrence ledger.

    `throttled`: the occurrence waited because of the global fire ceiling, not a downtime
    (`timing.pacing.held_back`): it fires as if on time, however late (ADR 0025).
    """
    # In UTC: arithmetic on an instant given in a zone with DST is wall-clock arithmetic in
    # Python, and inside a fall-back hour it planned a different occurrence (a property test
    # found it with `now` in America/New_York). The scheduler's clock is UTC already.
    now = now.astimezone(UTC)
    schedule = due.schedule
    late = now - (due.next_run_at if planned is None else planned)
    policy = schedule.misfire
    if throttled or late <= timedelta(milliseconds=schedule.misfire_grace_ms):
        return _plan(due, fire=due.next_run_at, coalesced=0, epoch=epoch)
    latest = latest_occurrence(schedule, at_or_before=now, not_before=due.next_run_at)
    latest = due.next_run_at if latest is None else latest
    if policy is MisfirePolicy.FIRE_ALL:
        return _fire_all(due, now, latest, epoch)
    folded = count_occurrences(schedule, after=due.next_run_at, until=latest)
    if policy is MisfirePolicy.COALESCE:
        # Folded: the occurrences from the due one up to (not including) the one fired.
        before = latest_occurrence(
            schedule, at_or_before=latest.astimezone(UTC) - _ONE_US, not_before=due.next_run_at
        )
        missed = (due.next_run_at, before) if folded and before is not None else None
        return _plan(due, fire=latest, coalesced=folded, epoch=epoch, missed=missed)
    return ClaimPlan(
        job_id=due.job_id,
        expected_fence=due.fence_token,
        expected_next_run_at=due.next_run_at,
        scheduled_for=None,
        coalesced=folded + 1,
        new_next_run_at=next_occurrence(schedule, now),
        missed_first=due.next_run_at,
        missed_last=latest,
        epoch=epoch,
    )


_ONE_US = timedelta(microseconds=1)


def _fire_all(due: DueJob, now: datetime, latest: datetime, epoch: int | None) -> ClaimPlan:
    """fire_all past its grace: the latest occurrence at or before `now` fires on time (it is
    what the job would be doing now had it never been down) and the job moves past `now`; the
    missed ones before it, from the due one on, are replayed by one paced catch-up backfill,
    oldest first, so a long downtime never floods the queue ahead of other jobs' on-time
    fires. Those older than `now - catchup_window` are skipped: the bound on how far back a
    catch-up goes (Temporal's catchupWindow)."""
    schedule = due.schedule
    first = due.next_run_at
    before = latest_occurrence(schedule, at_or_before=_earlier(latest), not_before=first)
    if before is None:  # only the due occurrence was missed: it is the one that fires
        return _plan(due, fire=latest, coalesced=0, epoch=epoch)
    cutoff = now - timedelta(milliseconds=schedule.catchup_window_ms)
    # The last occurrence strictly older than the window (an occurrence at the cutoff is in).
    old_last = latest_occurrence(
        schedule, at_or_before=min(_earlier(cutoff), before), not_before=first
    )
    skipped = None
    skipped_count = None
    if old_last is not None:
        skipped = (first, old_last)
        skipped_count = 1 + count_occurrences(schedule, after=first, until=old_last)
    caught_from = first if old_last is None else next_occurrence(schedule, old_last)
    plan = _plan(due, fire=latest, coalesced=0, epoch=epoch, missed=skipped)
    plan = replace(plan, missed_count=skipped_count)
    if caught_from is None or caught_from > before:
        return plan  # every missed occurrence is older than the window
    total = 1 + count_occurrences(
        schedule, after=caught_from, until=before, cap=_catchup_count_cap(schedule)
    )
    return replace(plan, catchup_first=caught_from, catchup_last=before, catchup_total=total)


def _catchup_count_cap(schedule: Schedule) -> int:
    """How far the claim counts a catch-up's occurrences. An interval's are counted by
    arithmetic, at any size; a cron's are walked one by one (about 1 s per 100,000), inside the
    tick that also claims other jobs' on-time fires, so no further than coalesce counts: past
    that, the catch-up's `total` is a lower bound (the lane replays the whole range anyway)."""
    if isinstance(schedule.trigger, EveryTrigger):
        return MAX_BACKFILL_OCCURRENCES - 1
    return _COUNT_CAP


# count_occurrences' own default: what a late coalesce claim counts at most.
_COUNT_CAP = 10_000


def _earlier(instant: datetime) -> datetime:
    return instant.astimezone(UTC) - _ONE_US


def _plan(
    due: DueJob,
    *,
    fire: datetime,
    coalesced: int,
    epoch: int | None,
    missed: tuple[datetime, datetime] | None = None,
) -> ClaimPlan:
    max_runs = due.schedule.max_runs
    last = max_runs is not None and due.fired_count + 1 >= max_runs
    overlap = overlap_of(due.schedule)
    # If the overlap policy skips the max_runs-th fire, the job has not had it: it goes on.
    skipped_last = last and overlap is not OverlapPolicy.ALLOW
    return ClaimPlan(
        job_id=due.job_id,
        expected_fence=due.fence_token,
        expected_next_run_at=due.next_run_at,
        scheduled_for=fire,
        coalesced=coalesced,
        # The fire that reaches max_runs completes the job (the claim counts it).
        new_next_run_at=None if last else next_occurrence(due.schedule, fire),
        missed_first=None if missed is None else missed[0],
        missed_last=None if missed is None else missed[1],
        epoch=epoch,
        overlap=overlap,
        next_if_skipped=next_occurrence(due.schedule, fire) if skipped_last else None,
    )


def overlap_of(schedule: Schedule) -> OverlapPolicy:
    """The overlap policy a claim applies: the schedule's, except for a one-shot, which has no
    earlier occurrence to overlap (ALLOW makes the claim probe nothing)."""
    if isinstance(schedule.trigger, AtTrigger):
        return OverlapPolicy.ALLOW
    return schedule.overlap


def settled_bound(
    plans: Sequence[ClaimPlan], reach: datetime, *, conflicts: int
) -> datetime | None:
    """The instant before which a tick left no scheduled job unclaimed, or None.

    `reach` is how far the tick's scan saw every due job: its horizon, or for a scan cut
    off by its batch limit, the instant of the last job it returned. If every job it
    returned was claimed, what is still scheduled before `reach` is only a claimed job whose
    next occurrence is already that close (a short interval) or a job written after the
    scan (which wakes the scheduler). So the next scan and next-due query may start at the
    earlier of `reach` and those next occurrences, and skip the claimed versions below it.
    A conflict leaves a due job behind, and a skipped occurrence is not counted as one, so
    either voids the bound."""
    if conflicts or any(plan.scheduled_for is None for plan in plans):
        return None
    return min([reach, *(p.new_next_run_at for p in plans if p.new_next_run_at is not None)])


def sleep_seconds(
    next_due: datetime | None,
    now: datetime,
    *,
    scanned_to: datetime | None = None,
    lookahead_ms: int,
    max_idle_ms: int,
) -> float:
    """How long the scheduler may sleep before the earliest due job needs claiming.

    `scanned_to` is how far the last tick's due scan reached (its `now` + look-ahead; by
    default `now` + look-ahead). A job within it that is still due was left over (a full
    batch, a conflict): claim again at once. Otherwise wake `lookahead_ms` before the job,
    but no sooner than half the look-ahead: under an even load (a job due every millisecond)
    waking for each one would mean a tick per fire, and this way each tick claims about half a
    look-ahead's worth. The floor gives way only to wake at least half a look-ahead before
    the job's instant, when the last tick itself took that long.

    Whether a job is beyond the last tick's reach is judged against `scanned_to`, not against
    the time now: the tick took time, so a job just past its reach is already less than a
    look-ahead away when this runs, and treating it as left over made the scheduler tick
    back to back (200 ticks/s of ~10 fires each at 2,000 fires/s, measured).
    """
    ceiling = max_idle_ms / 1000
    if next_due is None:
        return ceiling
    lookahead = lookahead_ms / 1000
    reach = scanned_to if scanned_to is not None else now + timedelta(milliseconds=lookahead_ms)
    if next_due <= reach:
        return 0.0  # it was within the last scan and is still due: claim it now
    until_due = (next_due - now).total_seconds()
    floor = min(lookahead / 2, max(until_due - lookahead / 2, 0.0))
    return min(max(until_due - lookahead, floor), ceiling)


# How many times the longest recent tick the claim reaches ahead (see `claim_reach_ms`).
REACH_TICKS = 3


def herd_probe_in_s(
    next_due: datetime | None, now: datetime, *, herd_lead_ms: int, reach_ms: int
) -> float | None:
    """When the scheduler looks whether a herd is due at `next_due` (ADR 0036): in seconds
    from `now`, 0.0 for at once; None when there is nothing to look at (no job due, or a
    herd lead no longer than the usual reach, which wakes for the instant anyway).

    A herd is more jobs due at one instant than one batch. Claimed from the usual reach, a
    tick per batch, its last batches are committed after the instant, and the fires wait for
    them; looked at `herd_lead_ms` ahead, it is claimed while the machine is still idle."""
    if next_due is None or herd_lead_ms <= reach_ms:
        return None
    return max((next_due - now).total_seconds() - herd_lead_ms / 1000, 0.0)


def claim_reach_ms(lookahead_ms: int, recent_ticks_s: Sequence[float], *, limit_ms: int) -> int:
    """How far ahead of its `now` a tick claims: the configured look-ahead, or, while ticks
    take long (a backlog's full batches on a busy database), `REACH_TICKS` times the longest
    of the recent ones, never beyond `limit_ms`.

    An occurrence enters the first tick that starts within the reach of its instant; ticks
    running back to back, that one starts up to a tick later and commits a tick after it
    starts. With a reach of three ticks the occurrence is committed a tick before its
    instant, which leaves the worker time to lease it ahead. With the fixed look-ahead, a
    tenant's occurrences due while another tenant's herd drained were committed after their
    instants whenever a tick took more than half the look-ahead (measured: ticks of 40-120 ms
    during a drain, against a look-ahead of 200 ms).
    """
    longest_ms = max(recent_ticks_s, default=0.0) * 1000
    return int(min(max(lookahead_ms, REACH_TICKS * longest_ms), max(limit_ms, lookahead_ms)))
