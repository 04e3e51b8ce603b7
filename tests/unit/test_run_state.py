"""The state a run is shown in, derived from what is stored and the clock (domain/runs.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.domain.runs import (
    LOST_ERROR,
    TERMINAL,
    AttemptRecord,
    AttemptStatus,
    Run,
    RunOrigin,
    RunState,
    RunStatus,
    lost_attempt,
    run_state,
    success_attempt,
    unrecorded_lost_attempt,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SEC = timedelta(seconds=1)
NOW = T0 + 10 * SEC

RUN = Run(
    id=7,
    job_id="j",
    key="j:1",
    origin=RunOrigin.SCHEDULE,
    scheduled_for=T0,
    status=RunStatus.PENDING,
    attempt=0,
    fence_token=3,
    coalesced=0,
    created_at=T0,
    started_at=None,
    finished_at=None,
    http_status=None,
    error=None,
)


@pytest.mark.parametrize(
    ("status", "attempt", "owner", "lease_until", "dead", "state"),
    [
        # never leased: a hand-off or a manual run waiting for its first attempt
        (RunStatus.PENDING, 0, None, T0, False, RunState.PENDING),
        (RunStatus.PENDING, 0, None, NOW + SEC, False, RunState.PENDING),
        # leased by a live lease
        (RunStatus.PENDING, 1, "w1", NOW + SEC, False, RunState.RUNNING),
        (RunStatus.PENDING, 3, "w1", NOW + SEC, False, RunState.RUNNING),
        # the lease ends at NOW: no longer live (leases are free at lease_until <= now)
        (RunStatus.PENDING, 1, "w1", NOW, False, RunState.RETRYING),
        # expired, nobody has leased it again: its attempt was lost, the next one is due
        (RunStatus.PENDING, 1, "w1", NOW - SEC, False, RunState.RETRYING),
        # released by a retry's outcome (or a redrive), waiting for its backoff or a worker
        (RunStatus.PENDING, 1, None, NOW + 5 * SEC, False, RunState.RETRYING),
        (RunStatus.PENDING, 2, None, NOW - SEC, False, RunState.RETRYING),
        (RunStatus.SUCCEEDED, 1, None, None, False, RunState.SUCCEEDED),
        (RunStatus.FAILED, 5, None, None, True, RunState.DEAD_LETTERED),
        (RunStatus.FAILED, 5, None, None, False, RunState.FAILED),  # purged from the DLQ
        (RunStatus.CANCELLED, 1, None, None, False, RunState.CANCELLED),
    ],
)
def test_the_state_shown_is_derived_from_status_lease_and_attempt(
    status: RunStatus,
    attempt: int,
    owner: str | None,
    lease_until: datetime | None,
    dead: bool,
    state: RunState,
) -> None:
    run = replace(
        RUN,
        status=status,
        attempt=attempt,
        lease_owner=owner,
        lease_until=lease_until,
        dead_lettered_at=NOW if dead else None,
    )
    assert run_state(run, NOW) is state


def test_cancelled_is_terminal() -> None:
    assert RunStatus.CANCELLED in TERMINAL
    assert RunStatus.PENDING not in TERMINAL


def test_a_lease_that_expired_unfinished_shows_its_lost_attempt() -> None:
    run = replace(
        RUN,
        attempt=2,
        fence_token=9,
        lease_owner="host-a:42",
        started_at=T0 + 2 * SEC,
        lease_until=T0 + 7 * SEC,
    )
    expected = AttemptRecord(
        id=0,
        run_id=7,
        job_id="j",
        attempt=2,
        fence_token=9,
        worker="host-a:42",
        started_at=T0 + 2 * SEC,
        finished_at=T0 + 7 * SEC,
        status=AttemptStatus.LOST,
        http_status=None,
        error=LOST_ERROR,
    )
    assert unrecorded_lost_attempt(run, T0 + 7 * SEC) == expected
    assert unrecorded_lost_attempt(run, T0 + 6 * SEC) is None  # still live
    assert lost_attempt(run) == expected  # what a new lease records, live or not


def test_a_run_leased_at_its_claim_lost_its_attempt_from_its_creation() -> None:
    run = replace(RUN, attempt=1, lease_owner="sched", lease_until=T0 + 5 * SEC)
    lost = unrecorded_lost_attempt(run, NOW)
    assert lost is not None
    assert (lost.started_at, lost.finished_at) == (T0, T0 + 5 * SEC)


@pytest.mark.parametrize(
    "run",
    [
        replace(RUN, lease_until=T0),  # never leased
        replace(RUN, attempt=1, lease_until=T0),  # released by a retry
        replace(RUN, status=RunStatus.SUCCEEDED, attempt=1),
        replace(RUN, status=RunStatus.FAILED, attempt=1, dead_lettered_at=T0),
    ],
)
def test_no_lost_attempt_without_a_lease_holder(run: Run) -> None:
    assert lost_attempt(run) is None
    assert unrecorded_lost_attempt(run, NOW) is None


def test_a_succeeded_run_shows_its_last_attempt_from_its_own_row() -> None:
    run = replace(
        RUN,
        status=RunStatus.SUCCEEDED,
        attempt=2,
        fence_token=9,
        started_at=T0 + 2 * SEC,
        finished_at=T0 + 3 * SEC,
        http_status=204,
    )
    assert success_attempt(run, "host-b:7") == AttemptRecord(
        id=0,
        run_id=7,
        job_id="j",
        attempt=2,
        fence_token=9,
        worker="host-b:7",
        started_at=T0 + 2 * SEC,
        finished_at=T0 + 3 * SEC,
        status=AttemptStatus.SUCCEEDED,
        http_status=204,
        error=None,
    )


@pytest.mark.parametrize(
    "run",
    [
        replace(RUN, attempt=1, started_at=T0, lease_owner="w", lease_until=NOW),  # running
        replace(RUN, status=RunStatus.FAILED, attempt=1, finished_at=T0, dead_lettered_at=T0),
        replace(RUN, status=RunStatus.CANCELLED, attempt=1, finished_at=T0),
    ],
)
def test_only_a_succeeded_run_has_a_success_on_its_row(run: Run) -> None:
    assert success_attempt(run, "w") is None
