"""The ledger read back (timing/ledger.py, pure): one entry per occurrence, ranges collapsed,
extra entries for manual and backfill runs; what a resume records as paused; and a resume
never re-plans an occurrence the scheduler claimed ahead of the pause."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.backfills import Backfill, BackfillKind, BackfillState
from tickwork.domain.jobs import (
    EveryTrigger,
    Job,
    JobState,
    MisfirePolicy,
    Schedule,
    WebhookTarget,
)
from tickwork.domain.occurrences import LedgerRange, LedgerReason
from tickwork.domain.runs import Run, RunOrigin, RunStatus
from tickwork.services.rules import resumed
from tickwork.timing.ledger import Outcome, merge_ledger, paused_range

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
M = timedelta(minutes=1)


def job(**kw: object) -> Job:
    fields: dict[str, object] = {
        "id": "j",
        "name": "j",
        "schedule": Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=T0)),
        "target": WebhookTarget(url="http://127.0.0.1:9/"),
        "state": JobState.SCHEDULED,
        "next_run_at": T0 + 5 * M,
        "created_at": T0,
        "updated_at": T0,
    }
    fields.update(kw)
    return Job(**fields)  # type: ignore[arg-type]


def run(n: int, minute: int, **kw: object) -> Run:
    fields: dict[str, object] = {
        "id": n,
        "job_id": "j",
        "key": f"j:{minute}",
        "origin": RunOrigin.SCHEDULE,
        "scheduled_for": T0 + minute * M,
        "status": RunStatus.SUCCEEDED,
        "attempt": 1,
        "fence_token": 1,
        "coalesced": 0,
        "created_at": T0,
        "started_at": None,
        "finished_at": None,
        "http_status": None,
        "error": None,
    }
    fields.update(kw)
    return Run(**fields)  # type: ignore[arg-type]


def span(first: int, last: int, reason: LedgerReason, run_id: int | None = None) -> LedgerRange:
    return LedgerRange(
        id=first,
        job_id="j",
        first=T0 + first * M,
        last=T0 + last * M,
        count=last - first + 1,
        reason=reason,
        run_id=run_id,
        recorded_at=T0,
    )


def table(entries: list) -> list[tuple[int, str, int, int | None]]:  # type: ignore[type-arg]
    return [(round((e.at - T0) / M), e.outcome.value, e.count, e.run_id) for e in entries]


def test_each_occurrence_gets_its_run_its_range_or_its_future() -> None:
    runs = [run(1, 0), run(2, 3, coalesced=2)]
    ranges = [span(1, 2, LedgerReason.COALESCED_INTO, 2)]
    entries = merge_ledger(job(), T0, T0 + 6 * M, runs=runs, ranges=ranges, limit=100)
    assert table(entries) == [
        (0, "fired", 1, 1),
        (1, "coalesced_into", 2, 2),
        (3, "fired", 1, 2),
        (4, "unknown", 1, None),  # before next_run_at and nothing recorded: a bug, or pruned
        (5, "scheduled", 1, None),
        (6, "scheduled", 1, None),
    ]
    assert entries[1].run is runs[1]  # the run it was coalesced into, when in the window


@pytest.mark.parametrize(
    ("status", "dead", "outcome"),
    [
        (RunStatus.PENDING, False, Outcome.FIRED),
        (RunStatus.SUCCEEDED, False, Outcome.FIRED),
        (RunStatus.FAILED, True, Outcome.DEAD_LETTERED),
        (RunStatus.FAILED, False, Outcome.FIRED),  # purged from the DLQ: it did fire
        (RunStatus.CANCELLED, False, Outcome.CANCELLED),  # overlap cancel_previous
    ],
)
def test_a_runs_state_gives_its_outcome(status: RunStatus, dead: bool, outcome: Outcome) -> None:
    fired = run(1, 0, status=status, dead_lettered_at=T0 if dead else None)
    entries = merge_ledger(job(), T0, T0, runs=[fired], ranges=[], limit=10)
    assert [e.outcome for e in entries] == [outcome]


def test_a_run_the_fire_ceiling_held_back_is_throttled_with_its_run() -> None:
    """docs/policies.md, Outcomes: throttling is not a miss: the occurrence has its run, and
    reads `throttled` with how late the ceiling made it; a dead letter stays a dead letter."""
    late = run(1, 0, throttled_ms=2500)
    [entry] = merge_ledger(job(), T0, T0, runs=[late], ranges=[], limit=10)
    assert (entry.outcome, entry.run_id, entry.count) == (Outcome.THROTTLED, 1, 1)
    assert "2500 ms late" in entry.reason
    assert "fire ceiling" in entry.reason
    dead = run(1, 0, throttled_ms=2500, status=RunStatus.FAILED, dead_lettered_at=T0)
    [entry] = merge_ledger(job(), T0, T0, runs=[dead], ranges=[], limit=10)
    assert entry.outcome is Outcome.DEAD_LETTERED


@pytest.mark.parametrize("reason", list(LedgerReason))
def test_each_recorded_reason_is_the_outcome_of_its_range(reason: LedgerReason) -> None:
    # docs/policies.md, Outcomes: a range reads as its reason, naming the run it recorded.
    run_id = 9 if reason in (LedgerReason.COALESCED_INTO, LedgerReason.SKIPPED_OVERLAP) else None
    entries = merge_ledger(
        job(), T0 + M, T0 + 3 * M, runs=[], ranges=[span(1, 3, reason, run_id)], limit=10
    )
    assert table(entries) == [(1, reason.value, 3, run_id)]
    assert entries[0].last == T0 + 3 * M


@pytest.mark.parametrize("origin", [RunOrigin.SCHEDULE, RunOrigin.CATCHUP])
def test_each_late_fire_all_occurrence_is_fired_with_its_run(origin: RunOrigin) -> None:
    """Missed occurrences fired one by one, late (fire_all), are each `fired` with their own
    run, whether the claims or a catch-up fired them: no range, no `unknown`."""
    late = [run(n, n, origin=origin, created_at=T0 + 4 * M) for n in range(4)]
    entries = merge_ledger(
        job(next_run_at=T0 + 4 * M), T0, T0 + 3 * M, runs=late, ranges=[], limit=10
    )
    assert table(entries) == [(n, "fired", 1, n) for n in range(4)]


def test_the_runs_of_an_old_schedule_are_listed_at_their_instants() -> None:
    """The past is read against the current schedule: runs fired on the hour by the old one are
    still listed at their instants, and the current one's occurrences count from creation
    (here it moved to half past, so its past half-hours hold nothing: `unknown`)."""
    moved = job(
        schedule=Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=T0 + M / 2)),
        next_run_at=T0 + 2.5 * M,
    )
    entries = merge_ledger(moved, T0, T0 + 3 * M, runs=[run(1, 0), run(2, 1)], ranges=[], limit=10)
    assert [(e.at, e.outcome.value, e.run_id) for e in entries] == [
        (T0, "fired", 1),
        (T0 + 0.5 * M, "unknown", None),
        (T0 + M, "fired", 2),
        (T0 + 1.5 * M, "unknown", None),
        (T0 + 2.5 * M, "scheduled", None),
    ]


def test_manual_and_backfill_runs_are_extra_entries_after_the_occurrence_at_their_instant() -> None:
    runs = [run(3, 1, origin=RunOrigin.MANUAL), run(4, 2, origin=RunOrigin.BACKFILL)]
    ranges = [span(0, 4, LedgerReason.PAUSED)]
    entries = merge_ledger(job(), T0, T0 + 4 * M, runs=runs, ranges=ranges, limit=100)
    assert [(e.outcome.value, e.origin, e.count) for e in entries] == [
        ("paused", None, 5),
        ("fired", RunOrigin.MANUAL, 1),
        ("fired", RunOrigin.BACKFILL, 1),
    ]


def test_a_paused_jobs_coming_occurrences_say_so_with_the_note() -> None:
    paused = job(state=JobState.PAUSED, pause_note="db move", paused_at=T0 + 4 * M)
    entries = merge_ledger(paused, T0 + 5 * M, T0 + 6 * M, runs=[], ranges=[], limit=100)
    assert [(e.outcome, e.reason) for e in entries] == [
        (Outcome.PAUSED, "the job is paused (note: db move)")
    ] * 2


def test_a_completed_job_implies_nothing_after_its_last_fire() -> None:
    done = job(state=JobState.COMPLETED, last_fired_at=T0 + M)
    entries = merge_ledger(done, T0, T0 + 9 * M, runs=[run(1, 0), run(2, 1)], ranges=[], limit=9)
    assert table(entries) == [(0, "fired", 1, 1), (1, "fired", 1, 2)]


def test_nothing_is_implied_before_the_job_was_created_and_the_limit_cuts_in_time_order() -> None:
    late = job(created_at=T0 + 2 * M + timedelta(seconds=1), next_run_at=T0 + 3 * M)
    entries = merge_ledger(late, T0, T0 + 9 * M, runs=[], ranges=[], limit=3)
    assert [minute for minute, *_ in table(entries)] == [3, 4, 5]
    assert {outcome for _, outcome, *_ in table(entries)} == {"scheduled"}


def test_a_huge_range_is_one_entry_and_is_stepped_over_not_walked() -> None:
    every_ms = job(schedule=Schedule(trigger=EveryTrigger(interval_ms=1, anchor=T0)))
    every_ms = replace(every_ms, next_run_at=T0 + timedelta(days=30))
    ranges = [
        LedgerRange(
            id=1,
            job_id="j",
            first=T0,
            last=T0 + timedelta(days=30) - timedelta(milliseconds=1),
            count=30 * 86_400_000,
            reason=LedgerReason.PAUSED,
            run_id=None,
            recorded_at=T0,
        )
    ]
    end = T0 + timedelta(days=30)
    entries = merge_ledger(every_ms, T0, end, runs=[], ranges=ranges, limit=10)
    assert [(e.outcome, e.count) for e in entries] == [
        (Outcome.PAUSED, 30 * 86_400_000),
        (Outcome.SCHEDULED, 1),
    ]


@pytest.mark.parametrize(
    ("next_run_min", "resumed_at_min", "expected"),
    [
        (5, 9.5, (5, 9, 5)),  # 5, 6, 7, 8, 9 fell while paused; 10 is next
        (5, 4.5, None),  # resumed before anything was due
        (5, 5, None),  # every: the occurrence at the resume instant still fires
    ],
)
def test_a_resume_records_what_fell_while_paused(
    next_run_min: int, resumed_at_min: float, expected: tuple[int, int, int] | None
) -> None:
    paused = job(state=JobState.PAUSED, next_run_at=T0 + next_run_min * M, paused_at=T0)
    now = T0 + resumed_at_min * M
    found = paused_range(paused, resumed(paused, now), now)
    if expected is None:
        assert found is None
        return
    assert found is not None
    first, last, count = expected
    assert (found.first, found.last, found.count) == (T0 + first * M, T0 + last * M, count)
    assert (found.reason, found.run_id, found.recorded_at) == (LedgerReason.PAUSED, None, now)


def test_a_resume_that_completes_the_job_records_up_to_now() -> None:
    ending = Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=T0), end_at=T0 + 7 * M)
    paused = job(schedule=ending, state=JobState.PAUSED, paused_at=T0)
    now = T0 + 30 * M
    after = resumed(paused, now)
    assert after.state is JobState.COMPLETED
    found = paused_range(paused, after, now)
    assert found is not None
    assert (found.first, found.last, found.count) == (T0 + 5 * M, T0 + 7 * M, 3)


@pytest.mark.parametrize("catch_up", [False, True])
def test_a_resume_never_replans_an_occurrence_claimed_ahead_of_the_pause(catch_up: bool) -> None:
    # Paused at 4:59.9, after the scheduler claimed 5:00 ahead (next_run_at moved to 6:00).
    paused = job(
        state=JobState.PAUSED, next_run_at=T0 + 6 * M, paused_at=T0 + 5 * M - timedelta(0, 0.1)
    )
    back = resumed(paused, T0 + 5 * M - timedelta(0, 0.05), catch_up=catch_up)
    assert back.next_run_at == T0 + 6 * M


def catchup(state: BackfillState, cursor_minute: int | None) -> Backfill:
    """Job j's catch-up of minutes 1..3 (created when the claim at minute 4 found it late)."""
    return Backfill(
        id=42,
        job_id="j",
        tenant="default",
        kind=BackfillKind.CATCHUP,
        from_at=T0 + M,
        to_at=T0 + 3 * M + timedelta(microseconds=1),
        cursor_at=None if cursor_minute is None else T0 + cursor_minute * M,
        total=3,
        done=0 if cursor_minute is None else cursor_minute,
        state=state,
        rate_per_s=50.0,
        created_at=T0 + 4 * M,
        updated_at=T0 + 4 * M,
        paced_at=T0 + 4 * M,
    )


FIRE_ALL_WINDOW = Schedule(
    trigger=EveryTrigger(interval_ms=60_000, anchor=T0),
    misfire=MisfirePolicy.FIRE_ALL,
    catchup_window_ms=150_000,  # PT2M30S
)


@pytest.mark.parametrize(
    ("state", "cursor", "expected"),
    [
        # Not begun: minutes 1..3 are to come, by catch-up 42.
        (BackfillState.RUNNING, None, ["fired", "scheduled", "scheduled", "scheduled", "fired"]),
        # Minute 1 enqueued (its catchup run is listed), 2 and 3 still to come.
        (BackfillState.RUNNING, 1, ["fired", "fired", "scheduled", "scheduled", "fired"]),
        # Cancelled after minute 1: the rest never fires.
        (
            BackfillState.CANCELLED,
            1,
            ["fired", "fired", "skipped_misfire", "skipped_misfire", "fired"],
        ),
    ],
)
def test_a_catch_ups_occurrences_read_as_to_come_by_it_until_its_runs_exist(
    state: BackfillState, cursor: int | None, expected: list[str]
) -> None:
    late = job(schedule=FIRE_ALL_WINDOW, next_run_at=T0 + 5 * M)
    runs = [run(1, 0), run(2, 4)]
    if cursor is not None:
        runs.append(run(3, 1, origin=RunOrigin.CATCHUP, key="j:1:catchup"))
    entries = merge_ledger(
        late, T0, T0 + 4 * M, runs=runs, ranges=[], limit=100, backfills=[catchup(state, cursor)]
    )
    assert [e.outcome.value for e in entries] == expected
    to_come = [e for e in entries if e.outcome is Outcome.SCHEDULED]
    assert all("catch-up 42 will fire it late" in e.reason for e in to_come)
    assert all(e.catchup_id == 42 for e in to_come)


def test_a_fire_all_skipped_range_says_it_was_older_than_the_catchup_window() -> None:
    late = job(schedule=FIRE_ALL_WINDOW, next_run_at=T0 + 5 * M)
    entries = merge_ledger(
        late,
        T0,
        T0 + 4 * M,
        runs=[run(1, 4)],
        ranges=[span(0, 3, LedgerReason.SKIPPED_MISFIRE)],
        limit=100,
    )
    assert [e.outcome for e in entries] == [Outcome.SKIPPED_MISFIRE, Outcome.FIRED]
    assert "older than catchup_window (PT2M30S)" in entries[0].reason
