"""When the store leaser leases what, and when it looks next (ADR 0016).

Behind an external queue only a hand-off that no worker has leased yet waits for the backstop
(its message may still be on its way); a dead worker's expired lease is taken as soon as it
ends, and the leaser's next look is never later than the moment something becomes leasable.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from tickwork.clock import ManualClock
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.runs import Envelope, Fire
from tickwork.store.base import ClaimPlan
from tickwork.store.memory import MemoryStore
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

from .test_executor_backlog import T0, HeldRunner

MS = timedelta(milliseconds=1)
SEC = timedelta(seconds=1)
LOOKAHEAD = 200 * MS
BACKSTOP = 10 * SEC
DEAD_LEASE_ENDS = T0 + 3 * SEC


def job(n: int) -> Job:
    return Job(
        id=f"{n:032x}", name=f"j{n}",
        schedule=Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=T0)),
        target=WebhookTarget(url="http://127.0.0.1:9/"), state=JobState.SCHEDULED,
        next_run_at=T0, created_at=T0, updated_at=T0,
    )  # fmt: skip


def plan(n: int) -> ClaimPlan:
    return ClaimPlan(
        job_id=job(n).id, expected_fence=0, expected_next_run_at=T0, scheduled_for=T0,
        coalesced=0, new_next_run_at=T0 + 60 * SEC,
    )  # fmt: skip


async def in_flight_and_dead(store: MemoryStore) -> tuple[Envelope, Fire]:
    """A hand-off at T0 whose message is (maybe) in flight, and a run leased by a worker that
    died, its lease ending at DEAD_LEASE_ENDS."""
    for n in (1, 2):
        await store.create_job(job(n))
    [in_flight] = await store.claim_hand_off([plan(1)], owner="s", now=T0)
    [dead] = await store.claim([plan(2)], owner="dead", lease_until=DEAD_LEASE_ENDS, now=T0)
    return in_flight, dead


def leaser(store: MemoryStore, clock: ManualClock, *, backstop: timedelta) -> StoreLeaser:
    executor = Executor(store, clock, HeldRunner(), ExecutorConfig(node_id="w"))
    # A long lease for this worker: its own leases end after everything the tests look at.
    leases = LeaserConfig(
        node_id="w",
        lease_ttl_ms=60_000,
        lookahead_ms=LOOKAHEAD // MS,
        backstop_delay_ms=backstop // MS,
    )
    return StoreLeaser(store, clock, executor, leases)


async def test_behind_a_queue_a_dead_lease_is_taken_at_its_end_a_hand_off_after_backstop() -> None:
    store, clock = MemoryStore(), ManualClock(T0)
    in_flight, dead = await in_flight_and_dead(store)
    worker = leaser(store, clock, backstop=BACKSTOP)

    first = await worker.run_once()
    # Nothing yet; the next look is when the dead worker's lease ends (a look-ahead early),
    # not when the hand-off's backstop is over.
    assert (first.started, first.next_lease_at) == (0, DEAD_LEASE_ENDS - LOOKAHEAD)

    clock.set(DEAD_LEASE_ENDS - LOOKAHEAD)
    second = await worker.run_once()
    [taken] = await store.list_runs(dead.job_id)
    assert (second.started, taken.attempt, taken.fence_token) == (1, 2, dead.fence_token + 1)
    assert second.next_lease_at == T0 + BACKSTOP - LOOKAHEAD

    clock.set(T0 + BACKSTOP - LOOKAHEAD)
    third = await worker.run_once()
    [backstopped] = await store.list_runs(in_flight.job_id)
    assert (third.started, backstopped.attempt) == (1, 1)


async def test_on_the_table_queue_a_hand_off_is_leased_at_its_instant() -> None:
    store, clock = MemoryStore(), ManualClock(T0)
    in_flight, _ = await in_flight_and_dead(store)
    worker = leaser(store, clock, backstop=timedelta(0))

    first = await worker.run_once()
    [leased] = await store.list_runs(in_flight.job_id)
    assert (first.started, leased.attempt) == (1, 1)
    assert first.next_lease_at == DEAD_LEASE_ENDS - LOOKAHEAD


class RetryDuringTheRound(MemoryStore):
    """The executor releases a retry while a lease round is between its store calls."""

    def __init__(self) -> None:
        super().__init__()
        self.worker: StoreLeaser | None = None

    async def next_lease_at(self, after: datetime | None = None) -> datetime | None:
        found = await super().next_lease_at(after)
        if self.worker is not None:
            self.worker.wake_at(T0 + SEC)
            self.worker = None
        return found


async def test_a_retry_announced_during_a_round_is_not_forgotten() -> None:
    store, clock = RetryDuringTheRound(), ManualClock(T0)
    worker = leaser(store, clock, backstop=BACKSTOP)
    store.worker = worker
    # The store knew of no pending run when the round read it; the retry came after.
    assert (await worker.run_once()).next_lease_at == T0 + SEC
