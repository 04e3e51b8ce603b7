"""JobService rules against the in-memory store and a manual clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.jobs import (
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    JobState,
    Schedule,
    WebhookTarget,
)
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import RunOrigin, RunOutcome, RunStatus
from tickwork.errors import Conflict, InvalidInput, NotFound
from tickwork.services.dead_letters import DeadLetterService, NotDeadLettered
from tickwork.services.jobs import JobPatch, JobService, JobSpec
from tickwork.services.rules import ANCHOR_AT_ACCEPT, retry_policy
from tickwork.store.base import JobQuery
from tickwork.store.memory import MemoryStore

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
TARGET = WebhookTarget(url="https://example.com/hook")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW)


@pytest.fixture
async def store() -> AsyncIterator[MemoryStore]:
    store = MemoryStore()
    await store.open()
    yield store
    await store.close()


@pytest.fixture
def service(store: MemoryStore, clock: ManualClock) -> JobService:
    return JobService(store, clock)


def spec(trigger: CronTrigger | EveryTrigger | AtTrigger, **schedule: object) -> JobSpec:
    return JobSpec(name="nightly", schedule=Schedule(trigger=trigger, **schedule), target=TARGET)  # type: ignore[arg-type]


async def test_create_arms_a_cron_job_at_its_first_local_occurrence(service: JobService) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *", timezone="Europe/Berlin")))
    assert job.state is JobState.SCHEDULED
    assert job.next_run_at == datetime(2026, 1, 16, 1, 0, tzinfo=UTC)  # 02:00 CET
    assert (job.created_at, job.updated_at, job.fence_token) == (NOW, NOW, 0)
    assert len(job.id) == 32


async def test_every_without_anchor_is_anchored_at_acceptance(service: JobService) -> None:
    job = await service.create(spec(EveryTrigger(interval_ms=30_000, anchor=ANCHOR_AT_ACCEPT)))
    assert job.schedule.trigger == EveryTrigger(interval_ms=30_000, anchor=NOW)
    assert job.next_run_at == NOW  # an interval starts at its anchor


async def test_at_in_the_past_is_accepted_and_due_at_once(service: JobService) -> None:
    past = NOW - timedelta(hours=1)
    job = await service.create(spec(AtTrigger(at=past)))
    assert job.next_run_at == past


async def test_schedule_that_ended_is_refused_naming_end_at(service: JobService) -> None:
    ended = spec(CronTrigger(expr="* * * * *"), end_at=NOW - timedelta(days=1))
    with pytest.raises(InvalidInput) as caught:
        await service.create(ended)
    assert caught.value.field == "schedule.end_at"
    assert "never fires after now" in caught.value.message


async def test_bad_cron_is_refused_naming_the_field(service: JobService) -> None:
    with pytest.raises(InvalidInput) as caught:
        await service.create(spec(CronTrigger(expr="0 25 * * *")))
    assert caught.value.field == "schedule.cron"


@pytest.mark.parametrize(
    ("target", "field"),
    [
        (WebhookTarget(url="ftp://example.com"), "target.url"),
        (WebhookTarget(url="https://example.com", method="TRACE"), "target.method"),
        (WebhookTarget(url="https://example.com", timeout_s=301), "target.timeout"),
    ],
)
async def test_bad_targets_are_refused(
    service: JobService, target: WebhookTarget, field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await service.create(replace(spec(AtTrigger(at=NOW)), target=target))
    assert caught.value.field == field


async def test_ids_list_in_creation_order(service: JobService) -> None:
    created = [await service.create(spec(AtTrigger(at=NOW))) for _ in range(20)]
    listed = await service.list(JobQuery(limit=100))
    assert [j.id for j in listed] == [j.id for j in created]


async def test_pause_keeps_next_run_and_resume_skips_what_was_missed(
    service: JobService, clock: ManualClock
) -> None:
    job = await service.create(spec(EveryTrigger(interval_ms=60_000, anchor=NOW)))
    paused = await service.pause(job.id)
    assert (paused.state, paused.next_run_at) == (JobState.PAUSED, job.next_run_at)
    assert await service.pause(job.id) == paused  # idempotent
    clock.advance(timedelta(minutes=10, seconds=30))
    resumed = await service.resume(job.id)
    assert resumed.state is JobState.SCHEDULED
    assert resumed.next_run_at == NOW + timedelta(minutes=11)
    assert resumed.updated_at == clock.now()


async def test_resume_past_the_end_completes_the_job(
    service: JobService, clock: ManualClock
) -> None:
    job = await service.create(spec(CronTrigger(expr="0 * * * *"), end_at=NOW + timedelta(hours=2)))
    await service.pause(job.id)
    clock.advance(timedelta(hours=3))
    resumed = await service.resume(job.id)
    assert (resumed.state, resumed.next_run_at) == (JobState.COMPLETED, None)


async def _complete(store: MemoryStore, job_id: str) -> None:
    job = await store.get_job(job_id)
    await store.update_job(replace(job, state=JobState.COMPLETED, next_run_at=None))


async def test_completed_job_cannot_be_paused_or_resumed(
    service: JobService, store: MemoryStore
) -> None:
    job = await service.create(spec(AtTrigger(at=NOW + timedelta(hours=1))))
    await _complete(store, job.id)
    with pytest.raises(Conflict):
        await service.pause(job.id)
    with pytest.raises(Conflict):
        await service.resume(job.id)


async def test_update_changes_only_given_fields(service: JobService, clock: ManualClock) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    clock.advance(timedelta(hours=1))
    renamed = await service.update(job.id, JobPatch(name="renamed"))
    assert renamed.name == "renamed"
    assert (renamed.schedule, renamed.target) == (job.schedule, job.target)
    assert renamed.next_run_at == job.next_run_at
    assert renamed.updated_at == clock.now()


async def test_update_of_the_schedule_recomputes_from_now_and_rearms(
    service: JobService, store: MemoryStore, clock: ManualClock
) -> None:
    job = await service.create(spec(AtTrigger(at=NOW + timedelta(minutes=5))))
    await _complete(store, job.id)
    clock.advance(timedelta(hours=1))
    new = Schedule(trigger=EveryTrigger(interval_ms=10_000, anchor=ANCHOR_AT_ACCEPT))
    edited = await service.update(job.id, JobPatch(schedule=new))
    assert edited.state is JobState.SCHEDULED
    assert edited.next_run_at == clock.now()


async def test_update_revalidates(service: JobService) -> None:
    job = await service.create(spec(AtTrigger(at=NOW + timedelta(minutes=5))))
    with pytest.raises(InvalidInput) as caught:
        await service.update(job.id, JobPatch(target=WebhookTarget(url="file:///etc/passwd")))
    assert caught.value.field == "target.url"
    assert (await service.get(job.id)).target == TARGET


async def test_trigger_records_a_pending_manual_run_now(service: JobService) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    run = await service.trigger(job.id)
    assert (run.origin, run.status, run.scheduled_for) == (RunOrigin.MANUAL, RunStatus.PENDING, NOW)
    assert await service.runs(job.id) == [run]


async def test_delete_then_everything_is_not_found(service: JobService) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    await service.delete(job.id)
    for call in (service.get, service.pause, service.resume, service.trigger, service.delete):
        with pytest.raises(NotFound):
            await call(job.id)


# -- retry policy -----------------------------------------------------------------------------


async def test_a_job_gets_the_default_retry_policy_unless_given_one(service: JobService) -> None:
    assert (await service.create(spec(AtTrigger(at=NOW)))).retry == RetryPolicy()
    policy = RetryPolicy(max_attempts=2, base_delay_ms=0, max_delay_ms=0, multiplier=1.0)
    job = await service.create(replace(spec(AtTrigger(at=NOW)), retry=policy))
    assert (await service.get(job.id)).retry == policy


async def test_an_edit_keeps_or_replaces_the_retry_policy(service: JobService) -> None:
    policy = RetryPolicy(max_attempts=2)
    job = await service.create(replace(spec(AtTrigger(at=NOW)), retry=policy))
    assert (await service.update(job.id, JobPatch(name="renamed"))).retry == policy
    replaced = await service.update(job.id, JobPatch(retry=RetryPolicy(max_attempts=9)))
    assert replaced.retry == RetryPolicy(max_attempts=9)


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (RetryPolicy(max_attempts=101), "retry.max_attempts"),
        (RetryPolicy(multiplier=10.5), "retry.multiplier"),
    ],
)
async def test_retry_bounds_hold_for_every_caller(
    service: JobService, policy: RetryPolicy, field: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        await service.create(replace(spec(AtTrigger(at=NOW)), retry=policy))
    assert caught.value.field == field
    job = await service.create(spec(AtTrigger(at=NOW)))
    with pytest.raises(InvalidInput):
        await service.update(job.id, JobPatch(retry=policy))


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"max_attempts": 0}, "retry.max_attempts", "give 1 to 100 attempts"),
        ({"max_attempts": 101}, "retry.max_attempts", "give 1 to 100 attempts"),
        ({"base_delay_ms": -1, "max_delay_ms": 0}, "retry.backoff", "PT0S or more"),
        (
            {"base_delay_ms": 2000, "max_delay_ms": 1500},
            "retry.max_backoff",
            "max_backoff (PT1.5S) must be at least backoff (PT2S)",
        ),
        ({"multiplier": 0.5}, "retry.multiplier", "from 1 to 10"),
        ({"multiplier": float("nan")}, "retry.multiplier", "from 1 to 10"),
        ({"multiplier": 11.0}, "retry.multiplier", "from 1 to 10"),
    ],
)
def test_retry_policy_errors_use_the_api_names(
    fields: dict[str, float], field: str, message: str
) -> None:
    values = {"max_attempts": 5, "base_delay_ms": 1000, "max_delay_ms": 300_000, "multiplier": 2.0}
    with pytest.raises(InvalidInput) as caught:
        retry_policy(**(values | fields))  # type: ignore[arg-type]
    assert caught.value.field == field
    assert message in caught.value.message


# -- runs and dead letters --------------------------------------------------------------------


async def _dead_letter(store: MemoryStore, job_id: str, now: datetime) -> int:
    run = await store.add_manual_run(job_id, now=now)
    fires = await store.lease_runs(now=now, owner="w", lease_until=now, limit=100)
    (fire,) = [f for f in fires if f.run_id == run.id]
    outcome = RunOutcome(
        run_id=run.id,
        job_id=job_id,
        attempt=fire.attempt,
        fence_token=fire.fence_token,
        status=RunStatus.FAILED,
        started_at=now,
        finished_at=now,
        error="connection refused",
    )
    assert await store.finish_runs([outcome]) == 1
    return run.id


async def test_run_detail_has_the_attempts(service: JobService, store: MemoryStore) -> None:
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    run_id = await _dead_letter(store, job.id, NOW)
    detail = await service.run(run_id)
    assert (detail.run.id, detail.run.dead_lettered_at) == (run_id, NOW)
    assert [(a.attempt, a.status) for a in detail.attempts] == [(1, RunStatus.FAILED)]
    with pytest.raises(NotFound):
        await service.run(run_id + 1)


@pytest.mark.parametrize("act", ["redrive", "purge"])
async def test_one_jobs_dead_letters_are_walked_page_by_page(
    service: JobService, store: MemoryStore, clock: ManualClock, act: str
) -> None:
    dead = DeadLetterService(store, clock, page=2)
    mine = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    other = await service.create(spec(CronTrigger(expr="0 3 * * *")))
    for n in range(5):
        await _dead_letter(store, mine.id, NOW + timedelta(seconds=n))
    kept = await _dead_letter(store, other.id, NOW)
    assert await getattr(dead, act)(mine.id) == 5
    assert [r.id for r in await dead.list()] == [kept]
    assert await getattr(dead, act)(mine.id) == 0


async def test_a_page_size_multiple_stops_after_an_empty_page(
    service: JobService, store: MemoryStore, clock: ManualClock
) -> None:
    dead = DeadLetterService(store, clock, page=2)
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    for n in range(4):
        await _dead_letter(store, job.id, NOW + timedelta(seconds=n))
    assert await dead.redrive(job.id) == 4
    assert await dead.list(job_id=job.id) == []


async def test_redrive_and_purge_of_one_say_when_it_is_not_a_dead_letter(
    service: JobService, store: MemoryStore, clock: ManualClock
) -> None:
    dead = DeadLetterService(store, clock)
    job = await service.create(spec(CronTrigger(expr="0 2 * * *")))
    run_id = await _dead_letter(store, job.id, NOW)
    clock.advance(timedelta(seconds=5))
    await dead.redrive_one(run_id)
    fires = await store.lease_runs(now=clock.now(), owner="w", lease_until=NOW, limit=10)
    assert [(f.run_id, f.attempt) for f in fires] == [(run_id, 2)]
    for call in (dead.redrive_one, dead.purge_one):
        with pytest.raises(NotDeadLettered) as caught:
            await call(run_id)
        assert caught.value.code == "not_dead_lettered"
        assert isinstance(caught.value, NotFound)
    with pytest.raises(NotFound):
        await dead.redrive("nosuchjob")


async def test_an_edit_racing_a_claim_is_reapplied_and_keeps_the_claim() -> None:
    from collections.abc import Sequence

    from tickwork.domain.jobs import EveryTrigger, Job, Schedule, WebhookTarget
    from tickwork.domain.occurrences import LedgerRange
    from tickwork.services.jobs import JobService, JobSpec
    from tickwork.store.base import ClaimPlan
    from tickwork.store.memory import MemoryStore

    class ClaimsDuringEdit(MemoryStore):
        """Lets a scheduler claim the job between the service's read and its write, once."""

        raced = False

        async def update_job(self, job: Job, *, ledger: Sequence[LedgerRange] = ()) -> Job:
            if not self.raced:
                self.raced = True
                current = await self.get_job(job.id)
                assert current.next_run_at is not None
                plan = ClaimPlan(
                    job_id=job.id,
                    expected_fence=current.fence_token,
                    expected_next_run_at=current.next_run_at,
                    scheduled_for=current.next_run_at,
                    coalesced=0,
                    new_next_run_at=current.next_run_at + timedelta(seconds=30),
                )
                await self.claim(
                    [plan], owner="sched", lease_until=current.next_run_at, now=current.next_run_at
                )
            return await super().update_job(job, ledger=ledger)

    start = datetime(2026, 1, 1, tzinfo=UTC)
    store = ClaimsDuringEdit()
    service = JobService(store, ManualClock(start))
    job = await service.create(
        JobSpec(
            name="racy",
            schedule=Schedule(trigger=EveryTrigger(interval_ms=30_000, anchor=start)),
            target=WebhookTarget(url="http://127.0.0.1:9/"),
        )
    )
    paused = await service.pause(job.id)
    assert store.raced
    assert paused.state is JobState.PAUSED
    assert paused.fence_token == 1  # the claim's fence survived the edit
    assert paused.next_run_at == start + timedelta(seconds=30)  # and so did its advance
