"""A fire whose stored secrets this process cannot decrypt fails its attempt with the reason,
without reaching either runner."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from tickwork.domain.jobs import TaskTarget
from tickwork.domain.runs import Fire
from tickwork.worker.base import Attempt
from tickwork.worker.executors.target import TargetRunner

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def test_an_unreadable_fire_fails_without_running() -> None:
    ran: list[Fire] = []

    async def runner(fire: Fire) -> Attempt:
        ran.append(fire)
        return Attempt(ok=True)

    dispatch = TargetRunner(webhooks=runner, tasks=runner)
    fire = Fire(
        run_id=1, job_id="j", key="j:0", scheduled_for=T0, fence_token=1, attempt=1,
        target=TaskTarget(name="placeholder"), lease_until=T0,
        unreadable="tw_jobs.target: sealed with secret key 'k1', which this process does not have",
    )  # fmt: skip
    attempt = await dispatch(fire)
    assert not attempt.ok
    assert not attempt.retryable
    assert attempt.error is not None
    assert "'k1'" in attempt.error
    assert ran == []
    assert (await dispatch(replace(fire, unreadable=None))).ok
    assert len(ran) == 1
