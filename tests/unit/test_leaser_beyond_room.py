"""The store leaser leases a few runs beyond its executor's room: those due after every fire
it holds (ADR 0029).

Before a herd's instant the leaser fills the executor's room with the herd, leased a
look-ahead early. A run of another tenant due a few milliseconds after the herd's instant
would then wait until the herd's first fires finish; beyond the room, up to `beyond_room` of
the runs due after the latest instant held are leased anyway.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from tickwork.clock import ManualClock
from tickwork.domain.runs import Fire
from tickwork.errors import StoreError
from tickwork.store.base import ClaimPlan
from tickwork.store.memory import MemoryStore
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.leaser import LeaserConfig, StoreLeaser

from .test_executor_backlog import T0, HeldRunner
from .test_leaser_horizons import job

MS = timedelta(milliseconds=1)
HERD_AT = T0 + timedelta(seconds=1)
AFTER_HERD = {20: HERD_AT + 50 * MS, 21: HERD_AT + 120 * MS, 22: HERD_AT + 140 * MS}


def plan(n: int, at: datetime) -> ClaimPlan:
    return ClaimPlan(
        job_id=job(n).id, expected_fence=0, expected_next_run_at=T0, scheduled_for=at,
        coalesced=0, new_next_run_at=at + timedelta(minutes=1),
    )  # fmt: skip


async def herd_and_others(store: MemoryStore) -> dict[int, int]:
    """Six hand-offs at HERD_AT and three of other jobs due after it: run id by job number."""
    instants = {n: HERD_AT for n in range(1, 7)} | AFTER_HERD
    for n in instants:
        await store.create_job(job(n))
    plans = [plan(n, at) for n, at in instants.items()]
    envelopes = await store.claim_hand_off(plans, owner="s", now=T0)
    return {int(e.job_id, 16): e.run_id for e in envelopes}


def worker(store: MemoryStore, clock: ManualClock, beyond_room: int) -> StoreLeaser:
    config = ExecutorConfig(node_id="w", backlog_limit=4)
    executor = Executor(store, clock, HeldRunner(), config)
    leases = LeaserConfig(
        node_id="w", lease_ttl_ms=60_000, lookahead_ms=200, beyond_room=beyond_room
    )
    return StoreLeaser(store, clock, executor, leases)


async def leased(store: MemoryStore, runs: dict[int, int]) -> set[int]:
    """The job numbers whose run is leased."""
    found = set()
    for n, run_id in runs.items():
        run = await store.get_run(run_id)
        if run is not None and run.lease_owner == "w":
            found.add(n)
    return found


async def test_runs_due_after_a_herd_that_fills_the_room_are_leased_beyond_it() -> None:
    store, clock = MemoryStore(), ManualClock(HERD_AT - 150 * MS)
    runs = await herd_and_others(store)
    leaser = worker(store, clock, beyond_room=64)

    filled = await leaser.run_once()  # the look-ahead reaches HERD_AT + 50 ms
    assert filled.started == 4
    assert len(await leased(store, runs) & set(range(1, 7))) == 4

    beyond = await leaser.run_once()  # no room: the run due 50 ms after the herd, not the herd
    assert beyond.started == 1
    assert await leased(store, runs) - set(range(1, 7)) == {20}

    clock.set(HERD_AT - 50 * MS)  # the look-ahead now reaches HERD_AT + 150 ms
    assert (await leaser.run_once()).started == 2
    herd = await leased(store, runs) & set(range(1, 7))
    assert (len(herd), await leased(store, runs) - herd) == (4, {20, 21, 22})


async def test_no_more_than_beyond_room_are_held_beyond_the_room() -> None:
    store, clock = MemoryStore(), ManualClock(HERD_AT - 50 * MS)
    runs = await herd_and_others(store)
    leaser = worker(store, clock, beyond_room=1)

    assert (await leaser.run_once()).started == 4  # the room: four of the herd
    assert (await leaser.run_once()).started == 1  # one beyond it, the soonest after the herd
    assert (await leaser.run_once()).started == 0  # it is still held: nothing more
    assert await leased(store, runs) - set(range(1, 7)) == {20}


async def test_with_beyond_room_0_the_room_is_the_limit() -> None:
    store, clock = MemoryStore(), ManualClock(HERD_AT - 50 * MS)
    runs = await herd_and_others(store)
    leaser = worker(store, clock, beyond_room=0)

    assert [(await leaser.run_once()).started for _ in range(3)] == [4, 0, 0]
    assert len(await leased(store, runs)) == 4


class LosesTheReplyBeyondTheRoom(MemoryStore):
    """The first lease beyond the room commits, then its reply is lost (the connection
    dropped between the commit and the answer)."""

    def __init__(self) -> None:
        super().__init__()
        self.lost = False

    async def lease_runs(self, **lease: Any) -> list[Fire]:
        fires = await super().lease_runs(**lease)
        if lease.get("after") is not None and not self.lost:
            self.lost = True
            raise StoreError("PostgreSQL error while leasing: connection lost")
        return fires


async def test_a_lease_beyond_the_room_whose_reply_was_lost_is_taken_back() -> None:
    store, clock = LosesTheReplyBeyondTheRoom(), ManualClock(HERD_AT - 150 * MS)
    runs = await herd_and_others(store)
    leaser = worker(store, clock, beyond_room=64)

    assert (await leaser.run_once()).started == 4
    with pytest.raises(StoreError):
        await leaser.run_once()  # the run due 50 ms after the herd is now leased to "w"
    taken = await leaser.run_once()
    assert (taken.started, taken.taken_back) == (1, 1)  # started here, at once
    assert await leased(store, runs) - set(range(1, 7)) == {20}
