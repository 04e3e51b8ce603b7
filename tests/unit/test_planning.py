"""Pure tick planning: on-time fires, misfire policies, completion, sleep computation."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.jobs import (
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
)
from tickwork.scheduler.planning import (
    REACH_TICKS,
    claim_reach_ms,
    plan_claim,
    settled_bound,
    sleep_seconds,
)
from tickwork.store.base import DueJob
from tickwork.timing.triggers import next_occurrence

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)


def every_second(policy: MisfirePolicy = MisfirePolicy.COALESCE, **kw: object) -> Schedule:
    return Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0), misfire=policy, **kw)  # type: ignore[arg-type]


def due(schedule: Schedule, next_run_at: datetime = T0, fence: int = 3) -> DueJob:
    return DueJob(job_id="j", fence_token=fence, next_run_at=next_run_at, schedule=schedule)


@pytest.mark.parametrize(
    ("policy", "now", "fire", "coalesced", "new_next"),
    [
        # on time, or late within the 1 s grace: fire the due occurrence, advance by one
        (MisfirePolicy.COALESCE, T0, T0, 0, T0 + S),
        (MisfirePolicy.COALESCE, T0 + timedelta(milliseconds=999), T0, 0, T0 + S),
        (MisfirePolicy.SKIP, T0 + S, T0, 0, T0 + S),
        # 10.5 s late: coalesce fires the latest missed (T0+10) once, counting 10 folded
        (MisfirePolicy.COALESCE, T0 + 10.5 * S, T0 + 10 * S, 10, T0 + 11 * S),
        # fire_all fires the latest on time too, folding nothing (the rest: a catch-up)
        (MisfirePolicy.FIRE_ALL, T0 + 10.5 * S, T0 + 10 * S, 0, T0 + 11 * S),
        (MisfirePolicy.FIRE_ALL, T0 + S, T0, 0, T0 + S),  # within the grace: on time
        # skip fires nothing and resumes after now; all 11 missed are counted
        (MisfirePolicy.SKIP, T0 + 10.5 * S, None, 11, T0 + 11 * S),
    ],
)
def test_misfire_policies(
    policy: MisfirePolicy, now: datetime, fire: datetime | None, coalesced: int, new_next: datetime
) -> None:
    plan = plan_claim(due(every_second(policy)), now)
    assert (plan.scheduled_for, plan.coalesced, plan.new_next_run_at) == (fire, coalesced, new_next)
    assert (plan.job_id, plan.expected_fence, plan.expected_next_run_at) == ("j", 3, T0)


@pytest.mark.parametrize(
    ("policy", "fire", "coalesced"),
    [(MisfirePolicy.COALESCE, 4, 3), (MisfirePolicy.SKIP, None, 4)],
)
def test_the_guides_downtime_timeline(
    policy: MisfirePolicy, fire: int | None, coalesced: int
) -> None:
    """docs/policies.md, Misfires: every minute, the scheduler down from 12:00:30 to 12:04:30
    (12:00 fired before it went down). coalesce: one run for 12:04, coalesced 3; skip: none,
    next run 12:05. (Its fire_all line waits for the catch-up rewrite.)"""
    minute = timedelta(minutes=1)
    schedule = Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=T0), misfire=policy)
    plan = plan_claim(due(schedule, T0 + minute), T0 + 4.5 * minute)
    expected_fire = None if fire is None else T0 + fire * minute
    assert (plan.scheduled_for, plan.coalesced) == (expected_fire, coalesced)
    assert plan.new_next_run_at == T0 + 5 * minute
    assert Schedule(trigger=schedule.trigger).misfire is MisfirePolicy.COALESCE  # the default


@pytest.mark.parametrize(
    ("policy", "now", "missed"),
    [
        (MisfirePolicy.COALESCE, T0 + 0.5 * S, None),  # on time: nothing missed
        (MisfirePolicy.FIRE_ALL, T0 + 10.5 * S, None),  # all within the window: caught up
        (MisfirePolicy.FIRE_ALL, T0 + 1.5 * S, None),  # only T0 missed: it fires, late
        (MisfirePolicy.COALESCE, T0 + 1.5 * S, (T0, T0)),  # T0 folded into T0+1
        (MisfirePolicy.COALESCE, T0 + 2.5 * S, (T0, T0 + S)),  # T0, T0+1 folded into T0+2
        (MisfirePolicy.COALESCE, T0 + 10.5 * S, (T0, T0 + 9 * S)),
        (MisfirePolicy.SKIP, T0 + 1.5 * S, (T0, T0 + S)),  # both skipped, T0+2 is next
        (MisfirePolicy.SKIP, T0 + 10.5 * S, (T0, T0 + 10 * S)),
    ],
)
def test_a_late_plan_names_the_range_it_folds_or_skips_for_the_ledger(
    policy: MisfirePolicy, now: datetime, missed: tuple[datetime, datetime] | None
) -> None:
    plan = plan_claim(due(every_second(policy)), now)
    found = None if plan.missed_first is None else (plan.missed_first, plan.missed_last)
    assert found == missed
    if missed is not None:  # `coalesced` counts exactly the occurrences of the range
        assert plan.coalesced == round((missed[1] - missed[0]) / S) + 1


H = timedelta(hours=1)
MIN = timedelta(minutes=1)


def hourly_fire_all(window: timedelta = timedelta(days=1), **kw: object) -> Schedule:
    return Schedule(
        trigger=CronTrigger(expr="0 * * * *"),
        misfire=MisfirePolicy.FIRE_ALL,
        catchup_window_ms=window // timedelta(milliseconds=1),
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("schedule", "now", "fire", "skipped", "catchup"),
    [
        # Down 3 h 10 min: T0+3h fires on time; T0, T0+1h, T0+2h are caught up (window P1D).
        (hourly_fire_all(), T0 + 3 * H + 10 * MIN, T0 + 3 * H, None, (T0, T0 + 2 * H, 3)),
        # Window PT90M: cutoff T0+1h40: T0 and T0+1h are older, skipped; T0+2h caught up.
        (
            hourly_fire_all(90 * MIN),
            T0 + 3 * H + 10 * MIN,
            T0 + 3 * H,
            (T0, T0 + H, 2),
            (T0 + 2 * H, T0 + 2 * H, 1),
        ),
        # An occurrence exactly at the cutoff is within the window: caught up, not skipped.
        (
            hourly_fire_all(2 * H),
            T0 + 3 * H,
            T0 + 3 * H,
            (T0, T0, 1),
            (T0 + H, T0 + 2 * H, 2),
        ),
        # Window PT1S: every missed occurrence is older; none caught up, only the latest fires.
        (hourly_fire_all(S), T0 + 3 * H + MIN, T0 + 3 * H, (T0, T0 + 2 * H, 3), None),
        # A week down, default window (cutoff T0+144h01): 23 caught up, the 145 before skipped.
        (
            hourly_fire_all(),
            T0 + 7 * 24 * H + MIN,
            T0 + 7 * 24 * H,
            (T0, T0 + 144 * H, 145),
            (T0 + 145 * H, T0 + 167 * H, 23),
        ),
        # Only the due occurrence missed: it is the latest, it fires; nothing to catch up.
        (hourly_fire_all(), T0 + 30 * MIN, T0, None, None),
        # Every second, 10.5 s late: T0+10 fires, T0..T0+9 are one catch-up of 10.
        (
            every_second(MisfirePolicy.FIRE_ALL),
            T0 + 10.5 * S,
            T0 + 10 * S,
            None,
            (T0, T0 + 9 * S, 10),
        ),
    ],
)
def test_fire_all_late_fires_the_latest_and_catches_up_within_the_window(
    schedule: Schedule,
    now: datetime,
    fire: datetime,
    skipped: tuple[datetime, datetime, int] | None,
    catchup: tuple[datetime, datetime, int] | None,
) -> None:
    plan = plan_claim(due(schedule), now)
    assert (plan.scheduled_for, plan.coalesced) == (fire, 0)
    assert plan.new_next_run_at == next_occurrence(schedule, now)
    found_skipped = (
        None
        if plan.missed_first is None
        else (plan.missed_first, plan.missed_last, plan.missed_count)
    )
    assert found_skipped == skipped
    found_catchup = (
        None
        if plan.catchup_first is None
        else (plan.catchup_first, plan.catchup_last, plan.catchup_total)
    )
    assert found_catchup == catchup


def test_fire_all_late_at_max_runs_still_catches_up_and_completes() -> None:
    """The latest fire counts towards max_runs; the catch-up runs do not (like backfills)."""
    plan = plan_claim(
        DueJob(
            job_id="j",
            fence_token=1,
            next_run_at=T0,
            schedule=hourly_fire_all(max_runs=3),
            fired_count=2,
        ),
        T0 + 2 * H + MIN,
    )
    assert (plan.scheduled_for, plan.new_next_run_at) == (T0 + 2 * H, None)
    assert (plan.catchup_first, plan.catchup_last, plan.catchup_total) == (T0, T0 + H, 2)


def test_the_on_time_plan_carries_no_catch_up() -> None:
    plan = plan_claim(due(hourly_fire_all()), T0 + timedelta(milliseconds=500))
    assert (plan.scheduled_for, plan.missed_first, plan.missed_count) == (T0, None, None)
    assert (plan.catchup_first, plan.catchup_last, plan.catchup_total) == (None, None, 0)


def test_a_cron_coalesce_range_ends_at_the_occurrence_before_the_fire() -> None:
    schedule = Schedule(trigger=CronTrigger(expr="*/5 * * * *", timezone="Europe/Berlin"))
    plan = plan_claim(due(schedule), T0 + timedelta(minutes=31))
    assert (plan.missed_first, plan.missed_last) == (T0, T0 + timedelta(minutes=25))


def test_claim_ahead_fires_the_future_instant_not_now() -> None:
    plan = plan_claim(due(every_second(), T0 + S), T0 + timedelta(milliseconds=970))
    assert (plan.scheduled_for, plan.new_next_run_at) == (T0 + S, T0 + 2 * S)


def test_a_one_shot_completes_after_firing_even_when_late() -> None:
    schedule = Schedule(trigger=AtTrigger(at=T0))
    for now in (T0, T0 + 3600 * S):
        plan = plan_claim(due(schedule), now)
        assert (plan.scheduled_for, plan.new_next_run_at, plan.coalesced) == (T0, None, 0)


def test_the_last_occurrence_before_end_at_completes_the_job() -> None:
    plan = plan_claim(due(every_second(end_at=T0 + 2 * S), T0 + 2 * S), T0 + 2 * S)
    assert (plan.scheduled_for, plan.new_next_run_at) == (T0 + 2 * S, None)


def test_cron_coalesce_after_downtime_fires_the_latest_missed_minute() -> None:
    schedule = Schedule(trigger=CronTrigger(expr="*/5 * * * *", timezone="Europe/Berlin"))
    plan = plan_claim(due(schedule), T0 + timedelta(minutes=31))
    assert plan.scheduled_for == T0 + timedelta(minutes=30)
    assert plan.coalesced == 6
    assert plan.new_next_run_at == T0 + timedelta(minutes=35)


@pytest.mark.parametrize(
    ("next_due", "now", "expected"),
    [
        (None, T0, 1.0),  # nothing scheduled: the idle ceiling
        (T0 + 10 * S, T0, 1.0),  # far away: capped at the ceiling
        (T0 + timedelta(milliseconds=300), T0, 0.25),  # wake 50 ms early to claim ahead
        (T0 + timedelta(milliseconds=51), T0, 0.025),  # but not a tick per fire: >= half of it
        (T0 + timedelta(milliseconds=40), T0, 0.0),  # within reach of a claim now
        (T0 - S, T0, 0.0),  # already due
    ],
)
def test_sleep_until_the_earliest_due_job(
    next_due: datetime | None, now: datetime, expected: float
) -> None:
    assert sleep_seconds(next_due, now, lookahead_ms=50, max_idle_ms=1000) == pytest.approx(
        expected
    )


MS = timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("next_due", "now", "expected"),
    [
        # The tick (scanned up to T0 + 50 ms) took 2 ms: the next job, just past its reach, is
        # now 49 ms away. Not a leftover: wait and claim a half look-ahead's worth, not 2 ms'.
        (T0 + 51 * MS, T0 + 2 * MS, 0.024),
        (T0 + 51 * MS, T0 + 1 * MS, 0.025),
        # A tick that took 40 ms: wake at once rather than less than half a look-ahead ahead.
        (T0 + 51 * MS, T0 + 40 * MS, 0.0),
        (T0 + 51 * MS, T0 + 30 * MS, 0.0),
        (T0 + 60 * MS, T0 + 30 * MS, 0.005),
        # Within the scan's reach and still due (a full batch, a conflict): claim now.
        (T0 + 40 * MS, T0 + 2 * MS, 0.0),
        (T0 + 50 * MS, T0 + 2 * MS, 0.0),
        (T0 + 400 * MS, T0 + 2 * MS, 0.348),
    ],
)
def test_sleep_judges_the_last_ticks_reach_by_its_scan(
    next_due: datetime, now: datetime, expected: float
) -> None:
    delay = sleep_seconds(next_due, now, scanned_to=T0 + 50 * MS, lookahead_ms=50, max_idle_ms=1000)
    assert delay == pytest.approx(expected)
    # Never later than the look-ahead allows, nor past half a look-ahead before the instant.
    assert now + timedelta(seconds=delay) <= max(next_due - 25 * MS, now)


# -- settled_bound: where the next-due query may start after a tick ---------------------------


def test_a_clean_tick_settles_everything_up_to_its_scan() -> None:
    plans = [plan_claim(due(every_second()), T0)]  # next occurrence: T0 + 1 s
    assert settled_bound(plans, T0 + 50 * MS, conflicts=0) == T0 + 50 * MS
    assert settled_bound([], T0 + 50 * MS, conflicts=0) == T0 + 50 * MS


def test_a_next_occurrence_inside_the_scan_lowers_the_bound() -> None:
    fast = Schedule(trigger=EveryTrigger(interval_ms=10, anchor=T0))
    plans = [plan_claim(due(every_second()), T0), plan_claim(due(fast), T0)]
    assert settled_bound(plans, T0 + 50 * MS, conflicts=0) == T0 + 10 * MS


def test_a_conflict_or_a_skipped_occurrence_voids_the_bound() -> None:
    clean = [plan_claim(due(every_second()), T0)]
    assert settled_bound(clean, T0 + 50 * MS, conflicts=1) is None
    skipped = plan_claim(due(every_second(MisfirePolicy.SKIP), T0 - timedelta(hours=1)), T0)
    assert skipped.scheduled_for is None
    assert settled_bound([*clean, skipped], T0 + 50 * MS, conflicts=0) is None


@pytest.mark.parametrize("policy", list(OverlapPolicy))
@pytest.mark.parametrize("late", [0, 10])  # on time, and coalesced after a misfire
def test_a_plan_carries_a_recurring_jobs_overlap_policy(policy: OverlapPolicy, late: int) -> None:
    plan = plan_claim(due(every_second(overlap=policy)), T0 + late * S)
    assert plan.overlap is policy


def test_a_one_shot_never_overlaps_itself() -> None:
    at = Schedule(trigger=AtTrigger(at=T0), overlap=OverlapPolicy.SKIP)
    assert plan_claim(due(at), T0).overlap is OverlapPolicy.ALLOW


@pytest.mark.parametrize("policy", list(OverlapPolicy))
def test_the_last_fire_of_max_runs_says_where_to_go_if_it_is_skipped(
    policy: OverlapPolicy,
) -> None:
    plan = plan_claim(replace(due(every_second(overlap=policy, max_runs=3)), fired_count=2), T0)
    assert plan.new_next_run_at is None  # this fire completes the job...
    # ...unless the overlap policy skips it: then the job has not had its third fire yet.
    expected = None if policy is OverlapPolicy.ALLOW else T0 + S
    assert plan.next_if_skipped == expected
    not_last = plan_claim(replace(due(every_second(overlap=policy, max_runs=3)), fired_count=1), T0)
    assert not_last.next_if_skipped is None


def test_a_catch_up_is_counted_exactly_for_an_interval_and_as_far_as_coalesce_for_a_cron() -> None:
    """Counting a cron walks its occurrences inside the tick: no further than coalesce does
    (10,000); an interval is counted by arithmetic, at any size."""
    day = timedelta(days=1)
    interval = plan_claim(due(every_second(MisfirePolicy.FIRE_ALL)), T0 + day + 0.5 * S)
    assert (interval.catchup_first, interval.catchup_total) == (T0 + S, 86_399)  # T0: older
    cron = Schedule(trigger=CronTrigger(expr="* * * * * *"), misfire=MisfirePolicy.FIRE_ALL)
    walked = plan_claim(due(cron), T0 + day + 0.5 * S)
    assert walked.catchup_last == T0 + day - S
    assert walked.catchup_total == 10_001  # a lower bound: the lane replays the whole range


@pytest.mark.parametrize("policy", list(MisfirePolicy))
def test_an_occurrence_the_fire_ceiling_held_back_fires_as_on_time_whatever_the_policy(
    policy: MisfirePolicy,
) -> None:
    """ADR 0025: 10.5 s late because of the ceiling, not a downtime: the due occurrence fires
    and the job advances by one, nothing folded, skipped or caught up."""
    plan = plan_claim(due(every_second(policy)), T0 + 10.5 * S, throttled=True)
    assert (plan.scheduled_for, plan.coalesced, plan.new_next_run_at) == (T0, 0, T0 + S)
    assert (plan.missed_first, plan.catchup_first, plan.missed_count) == (None, None, None)


@pytest.mark.parametrize(
    ("recent_s", "expected_ms"),
    [
        ([], 200),  # no tick yet: the configured look-ahead
        ([0.002, 0.004], 200),  # quick ticks: the look-ahead
        ([0.05, 0.066], 200),  # three ticks still within the look-ahead
        ([0.01, 0.1, 0.02], REACH_TICKS * 100),  # the longest recent tick sets it
        ([0.15], 450),
        ([0.5], 1000),  # never beyond the limit
    ],
)
def test_the_claim_reaches_three_ticks_ahead_when_ticks_are_slow(
    recent_s: list[float], expected_ms: int
) -> None:
    assert claim_reach_ms(200, recent_s, limit_ms=1000) == expected_ms


def test_the_claim_reach_never_falls_below_the_look_ahead() -> None:
    # A limit under the look-ahead (a config that allows it) leaves the look-ahead alone.
    assert claim_reach_ms(200, [0.5], limit_ms=100) == 200
