"""preview_job: an existing job's next fires by its state (scheduled, paused, completed)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tickwork.domain.jobs import (
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    Job,
    JobState,
    Schedule,
    WebhookTarget,
)
from tickwork.services.job_preview import preview_job
from tickwork.timing import EndReason

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


def t(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


def job(schedule: Schedule, **fields: object) -> Job:
    base = Job(
        id="0" * 32,
        name="j",
        schedule=schedule,
        target=WebhookTarget(url="https://example.com/hook"),
        state=JobState.SCHEDULED,
        next_run_at=None,
        created_at=NOW,
        updated_at=NOW,
    )
    return replace(base, **fields)  # type: ignore[arg-type]


EVERY_MINUTE = Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=t(-60)))


def utcs(preview: object) -> list[datetime]:
    return [e.utc for e in preview.fires]  # type: ignore[attr-defined]


def test_scheduled_starts_at_next_run_at_inclusive_even_when_due() -> None:
    scheduled = job(EVERY_MINUTE, next_run_at=t(-1))
    preview = preview_job(scheduled, NOW, 3)
    assert utcs(preview) == [t(-1), t(0), t(1)]
    assert preview.ends is None


def test_after_lists_only_later_fires_and_still_counts_max_runs() -> None:
    limited = replace(EVERY_MINUTE, max_runs=5)
    scheduled = job(limited, next_run_at=t(1), fired_count=1)
    assert utcs(preview_job(scheduled, NOW, 10)) == [t(1), t(2), t(3), t(4)]
    later = preview_job(scheduled, NOW, 10, after=t(2))
    assert utcs(later) == [t(3), t(4)]
    assert later.ends is not None
    assert later.ends.reason is EndReason.MAX_RUNS


def test_paused_shows_what_resuming_now_would_fire() -> None:
    paused = job(EVERY_MINUTE, state=JobState.PAUSED, next_run_at=t(-30), paused_at=t(-31))
    assert utcs(preview_job(paused, t(0.5), 2)) == [t(1), t(2)]
    assert utcs(preview_job(paused, t(0.5), 2, after=t(3))) == [t(4), t(5)]


def test_paused_with_no_occurrence_left_says_why() -> None:
    ended = replace(EVERY_MINUTE, end_at=t(-10))
    paused = job(ended, state=JobState.PAUSED, next_run_at=t(-20))
    preview = preview_job(paused, NOW, 5, after=t(1))
    assert preview.fires == []
    assert preview.ends is not None
    assert preview.ends.reason is EndReason.END_AT


def test_completed_jobs_list_nothing_with_the_reason() -> None:
    done = {"state": JobState.COMPLETED, "next_run_at": None}
    by_max_runs = job(replace(EVERY_MINUTE, max_runs=3), fired_count=3, **done)
    one_shot = job(Schedule(trigger=AtTrigger(at=t(-5))), fired_count=1, **done)
    past_end = job(replace(EVERY_MINUTE, end_at=t(-1)), **done)
    other = job(Schedule(trigger=CronTrigger(expr="* * * * *")), **done)
    reasons = {}
    for name, completed in [
        ("max_runs", by_max_runs),
        ("one_shot", one_shot),
        ("end_at", past_end),
        ("completed", other),
    ]:
        preview = preview_job(completed, NOW, 5)
        assert preview.fires == []
        assert preview.ends is not None
        assert preview.ends.message.startswith("the job is completed")
        reasons[name] = preview.ends.reason
    assert reasons == {name: EndReason(name) for name in reasons}
