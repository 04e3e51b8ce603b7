"""Properties of `plan_claim` that hold for every due job and every claim instant.

The table tests (test_planning.py) pin single cases; here hypothesis generates due jobs (cron
expressions in DST zones, intervals, one-shots, with start/end bounds, every misfire policy
and grace) and claim instants (early by up to a look-ahead, on time, within and far past the
grace), and checks each plan against the schedule's occurrences as `timing.triggers` walks
them, one `next_occurrence` at a time, independently of the planner's own shortcuts
(`latest_occurrence`, `count_occurrences`).

A due job's `next_run_at` is always one of its schedule's occurrences (the store only ever
holds first_occurrence or a plan's new_next_run_at), so the generator builds it that way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tickwork.domain.jobs import (
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    MisfirePolicy,
    Schedule,
    Trigger,
)
from tickwork.errors import InvalidInput
from tickwork.scheduler.planning import plan_claim
from tickwork.store.base import DueJob
from tickwork.timing.triggers import first_occurrence, next_occurrence, validate_schedule

US = timedelta(microseconds=1)
MS = timedelta(milliseconds=1)
# The scheduler claims at most this early (SchedulerConfig.lookahead_ms defaults to 200).
LOOKAHEAD = 500 * MS
# count_occurrences stops counting here; a plan's `coalesced` is capped the same way.
COUNT_CAP = 10_000
# How far the cross-check walks occurrences one by one before it only checks a lower bound.
WALK_LIMIT = 400

# Instants near the 2026 clock changes, so that schedules in these zones meet them often.
DST_CHANGES = [
    datetime(2026, 3, 8, 7, 0, tzinfo=UTC),  # America/New_York springs forward
    datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # Europe/Berlin springs forward
    datetime(2026, 10, 25, 1, 0, tzinfo=UTC),  # Europe/Berlin falls back
    datetime(2026, 11, 1, 6, 0, tzinfo=UTC),  # America/New_York falls back
    datetime(2026, 4, 4, 15, 0, tzinfo=UTC),  # Australia/Lord_Howe: back by 30 minutes
]

CRONS = [
    ("*/5 * * * *", "UTC"),
    ("*/20 * * * * *", "UTC"),  # six fields: every 20 seconds
    ("0 2 * * *", "Europe/Berlin"),  # fixed time inside the spring-forward gap
    ("30 2 * * *", "America/New_York"),
    ("30 1 * * *", "America/New_York"),  # fixed time inside the repeated fall-back hour
    ("*/15 * * * *", "Europe/Berlin"),  # elapsed time: fires twice in a repeated hour
    ("0 */2 * * *", "America/New_York"),
    ("0 9 * * MON-FRI", "Europe/Berlin"),
    ("@hourly", "Australia/Lord_Howe"),
    ("0 0 L * *", "UTC"),
    ("15 3 * * SUN", "Europe/Berlin"),
]


DAY_US = 86_400 * 10**6
# Instants written with any offset or zone, as Python callers may; plans must come out in UTC.
FIXED_ZONES = [UTC, timezone(timedelta(hours=2)), timezone(-timedelta(hours=5))]
ZONES = [*FIXED_ZONES, ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")]


@st.composite
def instants(draw: st.DrawFn) -> datetime:
    """An instant within two days of a clock change, to the microsecond."""
    change = draw(st.sampled_from(DST_CHANGES))
    return change + draw(st.integers(-2 * DAY_US, 2 * DAY_US)) * US


@st.composite
def windows(draw: st.DrawFn, near: datetime) -> tuple[datetime | None, datetime | None]:
    """Optional start_at and end_at around `near`, end after start when both are given."""
    start_at = draw(st.none() | st.integers(-2 * DAY_US, DAY_US).map(lambda us: near + us * US))
    length = draw(st.none() | st.integers(1, 2 * DAY_US).map(lambda us: us * US))
    end_at = None if length is None else (start_at or near) + length
    return (
        None if start_at is None else start_at.astimezone(draw(st.sampled_from(ZONES))),
        None if end_at is None else end_at.astimezone(draw(st.sampled_from(ZONES))),
    )


@st.composite
def triggers(draw: st.DrawFn, near: datetime, window: tuple[datetime | None, ...]) -> Trigger:
    kind = draw(st.sampled_from(["cron", "cron", "every", "at"]))  # cron: the most cases
    if kind == "cron":
        expr, zone = draw(st.sampled_from(CRONS))
        return CronTrigger(expr=expr, timezone=zone)
    start_at, end_at = window
    # In UTC: subtracting two instants of one ZoneInfo is wall-clock arithmetic in Python.
    lo = (near - timedelta(days=1) if start_at is None else start_at).astimezone(UTC)
    hi = (near + timedelta(days=1) if end_at is None else end_at).astimezone(UTC)
    if kind == "every":
        lo -= timedelta(days=1)  # an anchor before the window starts is fine
    when = lo + draw(st.integers(0, (hi - lo) // US)) * US
    when = when.astimezone(draw(st.sampled_from(ZONES)))
    if kind == "at":
        return AtTrigger(at=when)
    interval_ms = draw(
        st.one_of(
            st.sampled_from([1, 7, 250, 1_000, 60_000, 3_600_000, 86_400_000]),
            st.integers(1, 10**8),
        )
    )
    return EveryTrigger(interval_ms=interval_ms, anchor=when)


@st.composite
def schedules(draw: st.DrawFn, near: datetime, policy: MisfirePolicy | None = None) -> Schedule:
    start_at, end_at = draw(windows(near))
    schedule = Schedule(
        trigger=draw(triggers(near, (start_at, end_at))),
        start_at=start_at,
        end_at=end_at,
        misfire=draw(st.sampled_from(MisfirePolicy)) if policy is None else policy,
        misfire_grace_ms=draw(
            st.sampled_from([0, 1, 1_000, 60_000, 3_600_000]) | st.integers(0, 10**7)
        ),
        catchup_window_ms=draw(
            st.sampled_from([1_000, 60_000, 3_600_000, 86_400_000, 366 * 86_400_000])
        ),
    )
    try:
        validate_schedule(schedule)
    except InvalidInput:  # a window with no occurrence in it (a short one, a rare cron)
        assume(False)
    return schedule


@dataclass(frozen=True, kw_only=True, slots=True)
class Case:
    due: DueJob
    now: datetime


@st.composite
def cases(
    draw: st.DrawFn, policy: MisfirePolicy | None = None, past_grace: bool | None = None
) -> Case:
    """A due job and a claim instant; `policy` and `past_grace` pin what the test is about."""
    near = draw(instants())
    schedule = draw(schedules(near, policy))
    # The job's next_run_at: the occurrence its schedule holds after some instant near it.
    after = near + draw(st.integers(-DAY_US, DAY_US)) * US
    next_run_at = first_occurrence(schedule, after)
    assume(next_run_at is not None)  # the window closed before `after`
    assert next_run_at is not None
    grace_us = schedule.misfire_grace_ms * 1000
    on_time = st.one_of(
        st.integers(-(LOOKAHEAD // US), grace_us),  # claimed ahead, on time, late within grace
        st.sampled_from([-(LOOKAHEAD // US), 0, grace_us]),
    )
    late = st.one_of(
        st.integers(grace_us + 1, grace_us + 3 * DAY_US),
        st.sampled_from([grace_us + 1, grace_us + 10**6]),
        # Downtimes of the sizes that fold several occurrences of the schedules above.
        st.builds(
            lambda span_s, jitter_us: grace_us + span_s * 10**6 + jitter_us,
            st.sampled_from([60, 20 * 60, 3600, 3 * 3600, 86_400, 2 * 86_400]),
            st.integers(1, 3600 * 10**6),
        ),
    )
    choices = {None: on_time | late, False: on_time, True: late}
    lateness = draw(choices[past_grace])
    due = DueJob(
        job_id="job-1",
        fence_token=draw(st.integers(0, 10**6)),
        next_run_at=next_run_at,
        schedule=schedule,
    )
    return Case(due=due, now=next_run_at + lateness * US)


def is_occurrence(schedule: Schedule, when: datetime) -> bool:
    return next_occurrence(schedule, when - US) == when


def walk(schedule: Schedule, first: datetime, until: datetime) -> tuple[int, bool]:
    """How many occurrences lie in [first, until], walking them one by one; (count, complete).

    Stops after WALK_LIMIT; `complete` is False then and `count` a lower bound.
    """
    count = 0
    current: datetime | None = first
    while current is not None and current <= until:
        count += 1
        if count >= WALK_LIMIT:
            return count, False
        current = next_occurrence(schedule, current)
    return count, True


PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@PROPERTY
@given(cases())
def test_a_plan_copies_the_due_job_it_claims(case: Case) -> None:
    plan = plan_claim(case.due, case.now)
    assert plan.job_id == case.due.job_id
    assert plan.expected_fence == case.due.fence_token
    assert plan.expected_next_run_at == case.due.next_run_at


@PROPERTY
@given(cases())
def test_a_fire_is_an_occurrence_between_next_run_at_and_now(case: Case) -> None:
    due, now = case.due, case.now
    plan = plan_claim(due, now)
    if plan.scheduled_for is None:
        return
    assert due.next_run_at <= plan.scheduled_for
    # Claimed ahead, a job fires its own future instant; otherwise never past `now`.
    assert plan.scheduled_for <= max(now, due.next_run_at)
    assert is_occurrence(due.schedule, plan.scheduled_for)


@PROPERTY
@given(cases())
def test_the_next_run_is_the_first_occurrence_after_what_the_plan_settled(case: Case) -> None:
    due, now = case.due, case.now
    plan = plan_claim(due, now)
    settled = now if plan.scheduled_for is None else plan.scheduled_for
    assert plan.new_next_run_at == next_occurrence(due.schedule, settled)
    if plan.new_next_run_at is not None:
        assert plan.new_next_run_at > settled
        assert is_occurrence(due.schedule, plan.new_next_run_at)
    # None exactly when nothing is left: a one-shot that fired (or was skipped), or a schedule
    # whose next occurrence would fall after its end_at.
    unbounded = next_occurrence(replace(due.schedule, end_at=None), settled)
    end_at = due.schedule.end_at
    finished = unbounded is None or (end_at is not None and unbounded > end_at)
    assert (plan.new_next_run_at is None) == finished
    if isinstance(due.schedule.trigger, AtTrigger):
        assert plan.new_next_run_at is None


@PROPERTY
@given(cases(policy=MisfirePolicy.FIRE_ALL, past_grace=True))
def test_fire_all_late_fires_the_latest_and_splits_the_missed_at_the_catchup_window(
    case: Case,
) -> None:
    """Past the grace, fire_all fires the latest occurrence at or before now (folding
    nothing) and moves past now; the missed ones before it are skipped when older than
    now - catchup_window, and the others form one catch-up range, with nothing left out."""
    due, now = case.due, case.now
    plan = plan_claim(due, now)
    fired = plan.scheduled_for
    assert fired is not None
    assert due.next_run_at <= fired <= now
    assert plan.coalesced == 0
    after = next_occurrence(due.schedule, fired)
    assert after is None or after > now
    assert plan.new_next_run_at == after
    cutoff = now - due.schedule.catchup_window_ms * MS
    # The two ranges, oldest first, cover exactly the occurrences from next_run_at to `fired`.
    pieces: list[tuple[datetime, datetime, int]] = []
    if plan.missed_first is not None:
        assert plan.missed_last is not None
        assert plan.missed_count is not None
        assert plan.missed_last < cutoff  # older than the window
        pieces.append((plan.missed_first, plan.missed_last, plan.missed_count))
    if plan.catchup_first is not None:
        assert plan.catchup_last is not None
        assert plan.catchup_first >= cutoff  # within the window
        pieces.append((plan.catchup_first, plan.catchup_last, plan.catchup_total))
    expected_first = due.next_run_at
    for first, last, count in pieces:
        assert first == expected_first
        assert first <= last < fired
        missed, complete = walk(due.schedule, first, last)
        assert count == missed if complete else count >= missed
        following = next_occurrence(due.schedule, last)
        assert following is not None
        expected_first = following
    assert expected_first == fired  # nothing missed left out, the fired one not included


@PROPERTY
@given(cases(past_grace=False))
def test_on_time_fires_the_due_occurrence_and_folds_nothing(case: Case) -> None:
    """Within the grace every policy fires on time."""
    due = case.due
    plan = plan_claim(due, case.now)
    assert (plan.scheduled_for, plan.coalesced) == (due.next_run_at, 0)
    # The grace is inclusive: exactly that late is still on time, whatever the policy.
    at_the_edge = plan_claim(due, due.next_run_at + due.schedule.misfire_grace_ms * MS)
    assert (at_the_edge.scheduled_for, at_the_edge.coalesced) == (due.next_run_at, 0)


@PROPERTY
@given(cases(policy=MisfirePolicy.COALESCE, past_grace=True))
def test_coalesce_fires_the_latest_missed_occurrence_and_counts_the_folded_ones(
    case: Case,
) -> None:
    due, now = case.due, case.now
    plan = plan_claim(due, now)
    fired = plan.scheduled_for
    assert fired is not None
    assert fired <= now
    # The latest: the next occurrence after it is not yet due.
    after = next_occurrence(due.schedule, fired)
    assert after is None or after > now
    assert plan.new_next_run_at == after
    # Folded: every occurrence from next_run_at up to the fired one, the fired one excepted.
    missed, complete = walk(due.schedule, due.next_run_at, fired)
    if complete:
        assert plan.coalesced == min(missed - 1, COUNT_CAP)
    else:
        assert plan.coalesced >= missed - 1
    if isinstance(due.schedule.trigger, EveryTrigger):
        step = due.schedule.trigger.interval_ms * MS
        assert plan.coalesced == min((fired - due.next_run_at) // step, COUNT_CAP)


@PROPERTY
@given(cases(policy=MisfirePolicy.SKIP, past_grace=True))
def test_skip_past_the_grace_fires_nothing_and_moves_past_now(case: Case) -> None:
    due, now = case.due, case.now
    plan = plan_claim(due, now)
    assert plan.scheduled_for is None
    assert plan.new_next_run_at is None or plan.new_next_run_at > now
    assert plan.new_next_run_at == next_occurrence(due.schedule, now)
    # Skipped: every occurrence from next_run_at up to now, all of them counted.
    missed, complete = walk(due.schedule, due.next_run_at, now)
    if complete:
        assert plan.coalesced == min(missed - 1, COUNT_CAP) + 1
    else:
        assert plan.coalesced >= missed
    assert plan.coalesced >= 1


@PROPERTY
@given(cases(), st.sampled_from(["Europe/Berlin", "America/New_York", "Asia/Kolkata"]))
def test_a_plan_depends_only_on_its_inputs(case: Case, zone: str) -> None:
    plan = plan_claim(case.due, case.now)
    assert plan_claim(case.due, case.now) == plan
    # The same job read again (a new schedule object) and `now` written in another zone.
    reread = replace(case.due, schedule=replace(case.due.schedule))
    again = plan_claim(reread, case.now.astimezone(ZoneInfo(zone)))
    assert again == plan
    for instant in (again.expected_next_run_at, again.scheduled_for, again.new_next_run_at):
        assert instant is None or instant.utcoffset() == timedelta(0)


# -- found by the properties above (fixed: timing.triggers steps back in UTC) -------------------


def test_a_start_at_in_a_dst_zone_bounds_occurrences_by_its_instant() -> None:
    # 03:00 in New York on 2026-03-08 is 07:00 UTC, the first instant after the spring-forward
    # gap. One microsecond before it in wall time is 02:59:59.999999, inside the gap, which
    # zoneinfo reads at the old offset: 07:59:59.999999 UTC, an hour later than meant.
    start_at = datetime(2026, 3, 8, 3, 0, tzinfo=ZoneInfo("America/New_York"))
    schedule = Schedule(
        trigger=EveryTrigger(interval_ms=60_000, anchor=datetime(2026, 3, 8, tzinfo=UTC)),
        start_at=start_at,
    )
    assert next_occurrence(schedule, start_at - timedelta(hours=1)) == start_at
