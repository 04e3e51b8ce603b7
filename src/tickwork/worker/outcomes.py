"""Pure: what an attempt's result means for its occurrence (finish, retry later, dead-letter)."""

from __future__ import annotations

from datetime import datetime, timedelta

from tickwork.domain.retry import decide
from tickwork.domain.runs import Fire, RunOutcome, RunStatus
from tickwork.worker.base import Attempt


def outcome_for(
    fire: Fire,
    result: Attempt,
    *,
    started: datetime,
    finished: datetime,
    worker: str,
    rand: float,
) -> RunOutcome:
    """The outcome to record for `fire`'s attempt; `rand` in [0, 1) draws the backoff jitter."""
    status, retry_at = RunStatus.SUCCEEDED, None
    if not result.ok:
        decision = decide(
            policy=fire.retry,
            attempt=fire.attempt,
            retryable=result.retryable,
            retry_after_ms=result.retry_after_ms,
            rand=rand,
        )
        status = RunStatus.PENDING if decision.retry else RunStatus.FAILED
        if decision.retry:
            retry_at = finished + timedelta(milliseconds=decision.delay_ms)
    return RunOutcome(
        run_id=fire.run_id,
        job_id=fire.job_id,
        attempt=fire.attempt,
        fence_token=fire.fence_token,
        status=status,
        started_at=started,
        finished_at=finished,
        http_status=result.http_status,
        error=result.error,
        retry_at=retry_at,
        worker=worker,
    )
