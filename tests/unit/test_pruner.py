"""The pruner deletes old history, audit entries and finished backfills in batches and keeps
dead letters and running backfills."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tickwork.clock import ManualClock
from tickwork.domain.audit import AuditEntry
from tickwork.domain.backfills import Backfill, BackfillKind, BackfillState
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import RunOutcome, RunStatus
from tickwork.errors import StoreError
from tickwork.maintenance.pruner import Pruner, PrunerConfig
from tickwork.store.base import HistoryMaintenance
from tickwork.store.memory import MemoryStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


async def finished_runs(store: MemoryStore, count: int, status: RunStatus) -> list[int]:
    ids = []
    for n in range(count):
        job = Job(
            id=f"{status.value}-{n}",
            name="j",
            schedule=Schedule(trigger=EveryTrigger(interval_ms=1000, anchor=T0)),
            target=WebhookTarget(url="http://127.0.0.1:9/"),
            state=JobState.PAUSED,
            next_run_at=None,
            created_at=T0,
            updated_at=T0,
        )
        await store.create_job(job)
        await store.add_manual_run(job.id, now=T0)
        [fire] = await store.lease_runs(now=T0, owner="w", lease_until=T0, limit=1)
        outcome = RunOutcome(
            run_id=fire.run_id,
            job_id=job.id,
            attempt=fire.attempt,
            fence_token=fire.fence_token,
            status=status,
            started_at=T0,
            finished_at=T0,
        )
        assert await store.finish_runs([outcome]) == 1
        ids.append(fire.run_id)
    return ids


async def test_old_history_goes_in_batches_and_dead_letters_stay() -> None:
    store = MemoryStore()
    await finished_runs(store, 7, RunStatus.SUCCEEDED)
    dead = await finished_runs(store, 2, RunStatus.FAILED)
    clock = ManualClock(T0 + timedelta(days=10))
    pruner = Pruner(store, clock, PrunerConfig(retention=timedelta(days=30), batch_size=3))
    assert (await pruner.run_once()).rows == 0  # nothing is older than 30 days yet
    clock.advance(timedelta(days=21))
    # 7 runs, their successes with them (ADR 0033), 3 at a time; the dead letters keep their
    # runs and attempts
    assert (await pruner.run_once()).rows == 7
    assert [r.id for r in await store.list_dead_letters()] == sorted(dead, reverse=True)
    for run_id in dead:
        assert [a.run_id for a in await store.list_attempts(run_id)] == [run_id]
    assert (await pruner.run_once()).rows == 0


class MaintainedStore(MemoryStore):
    """Records the upkeep calls; fails them on demand (a store whose maintenance broke)."""

    def __init__(self, *, failing: bool = False) -> None:
        super().__init__()
        self.calls: list[tuple[datetime, timedelta]] = []
        self.failing = failing

    async def maintain_history(self, *, now: datetime, retention: timedelta) -> HistoryMaintenance:
        self.calls.append((now, retention))
        if self.failing:
            raise StoreError("partitions are busy")
        return HistoryMaintenance(created=("tw_attempts_p20260301",))


async def test_each_pass_maintains_the_history_at_the_clocks_now_first() -> None:
    store = MaintainedStore()
    now = T0 + timedelta(days=59, hours=5)
    pruner = Pruner(store, ManualClock(now), PrunerConfig(retention=timedelta(days=7)))
    result = await pruner.run_once()
    assert store.calls == [(now, timedelta(days=7))]
    assert result.partitions.created == ("tw_attempts_p20260301",)


async def test_a_failed_maintenance_does_not_stop_the_batched_deletes() -> None:
    store = MaintainedStore(failing=True)
    await finished_runs(store, 2, RunStatus.SUCCEEDED)
    clock = ManualClock(T0 + timedelta(days=31))
    result = await Pruner(store, clock, PrunerConfig()).run_once()
    assert result.partitions.skipped
    assert result.rows == 2  # two runs, each holding its success


def audit_entry(at: datetime) -> AuditEntry:
    return AuditEntry(
        at=at,
        key_id="key1",
        key_prefix="tw_00000001",
        role="admin",
        actor_tenant=None,
        action="DELETE /v1/jobs/{job_id}",
        resource="job j",
        tenant="default",
        status=204,
        client="127.0.0.1",
    )


class AuditPruneLog(MemoryStore):
    """Records the prune_audit calls."""

    def __init__(self) -> None:
        super().__init__()
        self.audit_calls: list[tuple[datetime, int]] = []

    async def prune_audit(self, *, before: datetime, limit: int) -> int:
        self.audit_calls.append((before, limit))
        return await super().prune_audit(before=before, limit=limit)


async def test_audit_entries_past_the_same_retention_go_in_batches() -> None:
    store = AuditPruneLog()
    retention = timedelta(days=30)
    # 7 entries a day apart, from T0; one more exactly at the cutoff of the second pass.
    await store.record_audit([audit_entry(T0 + timedelta(days=n)) for n in range(7)])
    await finished_runs(store, 2, RunStatus.SUCCEEDED)
    clock = ManualClock(T0 + timedelta(days=10))
    pruner = Pruner(store, clock, PrunerConfig(retention=retention, batch_size=3))
    first = await pruner.run_once()
    assert (first.rows, first.audit) == (0, 0)  # nothing is older than 30 days yet
    assert store.audit_calls == [(clock.now() - retention, 3)]

    clock.advance(timedelta(days=24))  # the cutoff is T0 + 4 days
    store.audit_calls.clear()
    await store.record_audit([audit_entry(T0 + timedelta(days=4))])  # at the cutoff: stays
    second = await pruner.run_once()
    assert second.audit == 4  # days 0..3
    assert second.rows == 2  # the history (two runs) goes in the same pass
    cutoff = T0 + timedelta(days=4)
    assert store.audit_calls == [(cutoff, 3), (cutoff, 3), (cutoff, 3)]  # 3, 1, then 0
    left = sorted(e.at for e in await store.list_audit())
    assert left == [T0 + timedelta(days=n) for n in (4, 4, 5, 6)]
    assert (await pruner.run_once()).audit == 0


async def test_a_failed_maintenance_does_not_stop_the_audit_pruning() -> None:
    store = MaintainedStore(failing=True)
    await store.record_audit([audit_entry(T0)])
    result = await Pruner(store, ManualClock(T0 + timedelta(days=31)), PrunerConfig()).run_once()
    assert result.partitions.skipped
    assert result.audit == 1
    assert await store.list_audit() == []


def backfill(state: BackfillState, updated_at: datetime) -> Backfill:
    return Backfill(
        id=0,
        job_id="j",
        tenant="default",
        kind=BackfillKind.BACKFILL,
        from_at=T0 - timedelta(days=1),
        to_at=T0,
        cursor_at=None,
        total=10,
        done=10 if state is BackfillState.COMPLETED else 0,
        state=state,
        rate_per_s=1.0,
        created_at=T0,
        updated_at=updated_at,
        paced_at=T0,
    )


async def test_finished_backfills_past_the_same_retention_go_in_batches() -> None:
    store = MemoryStore()
    states = [BackfillState.COMPLETED, BackfillState.CANCELLED] * 3  # 6 finished, days 0..5
    for day, state in enumerate(states):
        await store.create_backfill(backfill(state, T0 + timedelta(days=day)))
    running = await store.create_backfill(backfill(BackfillState.RUNNING, T0))
    clock = ManualClock(T0 + timedelta(days=10))
    pruner = Pruner(store, clock, PrunerConfig(retention=timedelta(days=30), batch_size=4))
    assert (await pruner.run_once()).backfills == 0  # nothing is older than 30 days yet
    clock.advance(timedelta(days=24))  # the cutoff is T0 + 4 days: days 0..3 go, 4 and 5 stay
    assert (await pruner.run_once()).backfills == 4
    left = await store.list_backfills("j")
    assert sorted((b.updated_at, b.state) for b in left) == [
        (T0, BackfillState.RUNNING),
        (T0 + timedelta(days=4), BackfillState.COMPLETED),
        (T0 + timedelta(days=5), BackfillState.CANCELLED),
    ]
    clock.advance(timedelta(days=365))
    assert (await pruner.run_once()).backfills == 2
    assert [b.id for b in await store.list_backfills("j")] == [running.id]
