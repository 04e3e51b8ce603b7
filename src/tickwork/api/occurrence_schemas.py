"""Response bodies of the occurrence ledger's endpoints: GET /v1/jobs/{id}/occurrences and
GET /v1/jobs/{id}/explain (docs/api.md, docs/policies.md "The occurrence ledger")."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from tickwork.api.schemas import AttemptOut, InstantOut, RunOut, _Output
from tickwork.clock import utc_iso
from tickwork.domain.jobs import AtTrigger, CronTrigger, DstGap, DstRepeat, Job, Schedule
from tickwork.domain.runs import RunOrigin
from tickwork.services.occurrences import Explanation, local_time
from tickwork.timing.durations import format_duration_ms
from tickwork.timing.ledger import Entry, Outcome


class OccurrenceOut(_Output):
    at: InstantOut = Field(description="the nominal instant (a range's first occurrence)")
    outcome: Outcome
    reason: str = Field(description="why, in words")
    count: int = Field(description="occurrences this entry stands for (a range: more than 1)")
    last: InstantOut | None = Field(description="a range's last occurrence; null: one")
    run_id: int | None = Field(
        description="its run; for coalesced_into the run fired instead, for skipped_overlap"
        " the run still going"
    )
    origin: RunOrigin | None = Field(description="the run's origin: schedule, manual, ...")
    status: str | None = Field(description="the run's status")

    @classmethod
    def of(cls, entry: Entry) -> OccurrenceOut:
        return cls(
            at=utc_iso(entry.at),
            outcome=entry.outcome,
            reason=entry.reason,
            count=entry.count,
            last=None if entry.last is None else utc_iso(entry.last),
            run_id=entry.run_id,
            origin=entry.origin,
            status=None if entry.run is None or entry.origin is None else entry.run.status.value,
        )


class OccurrenceList(_Output):
    occurrences: list[OccurrenceOut]
    next_from: InstantOut | None = Field(
        description="the list was cut at `limit`: pass as ?from= for the rest; null: done"
    )


class RuleOut(_Output):
    kind: str = Field(description="cron, every or at")
    cron: str | None = None
    timezone: str | None = None
    local: str | None = Field(None, description="the occurrence on the zone's wall clock")
    every: str | None = None
    anchor: InstantOut | None = None
    at: InstantOut | None = None
    start_at: InstantOut | None = None
    end_at: InstantOut | None = None

    @classmethod
    def of(cls, job: Job, occurrence: datetime | None) -> RuleOut:
        schedule: Schedule = job.schedule
        trigger = schedule.trigger
        bounds = {
            "start_at": None if schedule.start_at is None else utc_iso(schedule.start_at),
            "end_at": None if schedule.end_at is None else utc_iso(schedule.end_at),
        }
        if isinstance(trigger, CronTrigger):
            local = None if occurrence is None else local_time(job, occurrence)
            return cls(
                kind="cron", cron=trigger.expr, timezone=trigger.timezone, local=local, **bounds
            )
        if isinstance(trigger, AtTrigger):
            return cls(kind="at", at=utc_iso(trigger.at), **bounds)
        every = format_duration_ms(trigger.interval_ms)
        return cls(kind="every", every=every, anchor=utc_iso(trigger.anchor), **bounds)


class DstOut(_Output):
    gap: DstGap
    repeat: DstRepeat
    note: str | None = Field(description="what a clock change did to this occurrence")


class PauseOut(_Output):
    since: InstantOut | None
    note: str | None


class ExplainOut(_Output):
    job_id: str
    asked: InstantOut = Field(description="the instant asked about (?at=)")
    occurrence: InstantOut | None = Field(
        description="the job's occurrence at or after it; null: the schedule has none"
    )
    summary: str = Field(description="what happened or will happen to it, in one line")
    outcome: Outcome | None
    reason: str | None
    count: int | None = Field(description="occurrences in its ledger range (1: alone)")
    range_first: InstantOut | None
    range_last: InstantOut | None
    rule: RuleOut
    dst: DstOut | None = Field(description="cron schedules: the clock-change choices and note")
    state: str = Field(description="the job's state now")
    paused: PauseOut | None = Field(description="set while the job is paused")
    max_runs: int | None
    fired_count: int
    overlap: str
    misfire: str
    misfire_grace: str
    catchup_window: str = Field(description="how far back fire_all catches up (unused otherwise)")
    planned_for: InstantOut | None = Field(
        None,
        description="a jittered or windowed occurrence: when it fires (or fired); null: at"
        " its instant, or a window not placed yet",
    )
    shift: str | None = Field(None, description="how the schedule's jitter or window moves it")
    run: RunOut | None = Field(description="its run, or the run it was coalesced into")
    attempts: list[AttemptOut] = Field(description="the run's attempts, oldest first")

    @classmethod
    def of(cls, found: Explanation, now: datetime) -> ExplainOut:
        job, entry, schedule = found.job, found.entry, found.job.schedule
        ranged = entry is not None and entry.last is not None
        dst = None
        if isinstance(schedule.trigger, CronTrigger):
            dst = DstOut(gap=schedule.dst_gap, repeat=schedule.dst_repeat, note=found.dst_note)
        paused = None
        if job.paused_at is not None or job.state.value == "paused":
            since = None if job.paused_at is None else utc_iso(job.paused_at)
            paused = PauseOut(since=since, note=job.pause_note)
        return cls(
            job_id=job.id,
            asked=utc_iso(found.asked),
            occurrence=None if found.occurrence is None else utc_iso(found.occurrence),
            summary=found.summary,
            outcome=None if entry is None else entry.outcome,
            reason=None if entry is None else entry.reason,
            count=None if entry is None else entry.count,
            range_first=utc_iso(entry.at) if ranged and entry is not None else None,
            range_last=utc_iso(entry.last) if entry is not None and entry.last else None,
            rule=RuleOut.of(job, found.occurrence),
            dst=dst,
            state=job.state.value,
            paused=paused,
            max_runs=schedule.max_runs,
            fired_count=job.fired_count,
            overlap=schedule.overlap.value,
            misfire=schedule.misfire.value,
            misfire_grace=format_duration_ms(schedule.misfire_grace_ms),
            catchup_window=format_duration_ms(schedule.catchup_window_ms),
            planned_for=None if found.planned_for is None else utc_iso(found.planned_for),
            shift=found.shift_note,
            run=None if found.run is None else RunOut.of(found.run, now),
            attempts=[AttemptOut.of(a) for a in found.attempts],
        )


__all__ = ["ExplainOut", "OccurrenceList", "OccurrenceOut", "Outcome"]
