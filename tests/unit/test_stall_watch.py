"""StallWatch: which partitions held elsewhere a takeover may claim from (pure logic)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.domain.partitions import DueHead, PartitionLease
from tickwork.scheduler.stall import StallWatch

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
GRACE = 0.5
TTL = 5.0


def lease(partition: int, owner: str | None, renewed_s: float = -1.0) -> PartitionLease:
    return PartitionLease(
        partition=partition,
        owner=owner,
        epoch=1,
        expires_at=T0 + timedelta(seconds=renewed_s + TTL),
        renewed_at=T0 + timedelta(seconds=renewed_s),
    )


def head(n: int) -> DueHead:
    return DueHead(job_id=f"{n:032x}", due_at=T0 - timedelta(seconds=1))


def watch() -> StallWatch:
    return StallWatch(grace_s=GRACE, verdict_ttl_s=TTL)


def look(
    w: StallWatch,
    at_s: float,
    leases: dict[int, PartitionLease | None],
    heads: dict[int, DueHead],
) -> frozenset[int]:
    return w.eligible(at_s=at_s, now=T0 + timedelta(seconds=at_s), leases=leases, heads=heads)


def test_a_partition_nobody_holds_is_eligible_at_once() -> None:
    leases: dict[int, PartitionLease | None] = {1: lease(1, None), 2: None, 3: lease(3, "b")}
    assert look(watch(), 0.0, leases, {3: head(3)}) == {1, 2}


def test_a_gone_owner_is_eligible_at_once_and_only_it() -> None:
    leases: dict[int, PartitionLease | None] = {
        3: lease(3, "b"),
        4: lease(4, "b"),
        5: lease(5, "c"),
    }
    heads = {3: head(30), 5: head(50)}
    w = watch()
    found = w.eligible(at_s=0.0, now=T0, leases=leases, heads=heads, gone=frozenset({"b"}))
    assert found == {3, 4}  # all of b's partitions; c, alive, is watched as before
    assert w.stalled_owners() == frozenset()  # gone is the store's word, not a verdict
    # Back in the store's view (a live process after all), b is judged by its heads again.
    assert look(w, 0.1, leases, heads) == frozenset()


def test_an_owner_whose_heads_stand_still_for_the_grace_is_stalled() -> None:
    w = watch()
    leases: dict[int, PartitionLease | None] = {3: lease(3, "b"), 4: lease(4, "b")}
    heads = {3: head(30)}
    assert look(w, 0.0, leases, heads) == frozenset()
    assert look(w, GRACE - 0.01, leases, heads) == frozenset()
    # All of b's partitions, those with nothing due yet too.
    assert look(w, GRACE, leases, heads) == {3, 4}
    assert w.stalled_owners() == {"b"}


def test_an_owner_that_claims_is_never_stalled_however_late_its_work() -> None:
    """The burst: b is behind, but each look finds one of its heads moved on."""
    w = watch()
    leases: dict[int, PartitionLease | None] = {3: lease(3, "b"), 4: lease(4, "b")}
    for step in range(40):
        heads = {3: head(300 + step // 2), 4: head(400 + (step + 1) // 2)}
        assert look(w, step * 0.125, leases, heads) == frozenset()
    assert w.stalled_owners() == frozenset()


def test_work_coming_due_is_not_progress() -> None:
    w = watch()
    leases: dict[int, PartitionLease | None] = {3: lease(3, "b"), 4: lease(4, "b")}
    look(w, 0.0, leases, {3: head(30)})
    assert look(w, 0.3, leases, {3: head(30), 4: head(40)}) == frozenset()
    assert look(w, GRACE, leases, {3: head(30), 4: head(40)}) == {3, 4}


def test_an_owner_with_nothing_due_is_not_judged() -> None:
    w = watch()
    leases: dict[int, PartitionLease | None] = {3: lease(3, "b")}
    for step in range(20):
        assert look(w, step * 0.25, leases, {}) == frozenset()


def test_the_verdict_survives_the_takeovers_own_claims() -> None:
    """Once b is stalled, the heads move because this scheduler claims b's work: b stays
    stalled, also against a renewal that b made before the verdict."""
    w = watch()
    leases: dict[int, PartitionLease | None] = {3: lease(3, "b", renewed_s=-0.2)}
    look(w, 0.0, leases, {3: head(30)})
    assert look(w, GRACE, leases, {3: head(30)}) == {3}
    for step in range(1, 10):
        assert look(w, GRACE + step * 0.125, leases, {3: head(30 + step)}) == {3}


def test_a_renewal_after_the_verdict_shows_the_owner_alive() -> None:
    w = watch()
    leases: dict[int, PartitionLease | None] = {3: lease(3, "b")}
    look(w, 0.0, leases, {3: head(30)})
    assert look(w, GRACE, leases, {3: head(30)}) == {3}
    renewed: dict[int, PartitionLease | None] = {3: lease(3, "b", renewed_s=GRACE + 0.1)}
    assert look(w, GRACE + 0.2, renewed, {3: head(31)}) == frozenset()
    assert w.stalled_owners() == frozenset()
    # Judged afresh: standing still again for a grace makes it stalled again.
    assert look(w, 2 * GRACE + 0.2, renewed, {3: head(31)}) == {3}


def test_a_verdict_lasts_one_lease_ttl() -> None:
    w = watch()
    leases: dict[int, PartitionLease | None] = {3: lease(3, "b")}
    look(w, 0.0, leases, {3: head(30)})
    assert look(w, GRACE, leases, {3: head(30)}) == {3}
    assert look(w, GRACE + TTL, leases, {3: head(31)}) == frozenset()


def test_an_owner_gone_from_the_view_is_forgotten() -> None:
    w = watch()
    look(w, 0.0, {3: lease(3, "b")}, {3: head(30)})
    look(w, GRACE, {3: lease(3, "b")}, {3: head(30)})
    assert look(w, GRACE + 0.1, {3: lease(3, "c")}, {3: head(30)}) == frozenset()
    assert w.stalled_owners() == frozenset()


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.floats(min_value=0.01, max_value=0.2), min_size=1, max_size=60),
    moves=st.lists(st.booleans(), min_size=60, max_size=60),
)
def test_an_owner_that_moves_a_head_within_every_grace_is_never_taken_over(
    gaps: list[float], moves: list[bool]
) -> None:
    """Looks at any times; the owner moves some head at least every other look, and looks
    come less than a quarter grace apart: so it moves within every grace, and nothing of it
    is ever eligible."""
    w = watch()
    leases: dict[int, PartitionLease | None] = {p: lease(p, "b") for p in range(4)}
    at, counter, since_move = 0.0, 0, 0
    for gap, moved in zip(gaps, moves, strict=False):
        at += min(gap, GRACE / 4)
        if moved or since_move >= 1:
            counter += 1
            since_move = 0
        else:
            since_move += 1
        heads = {p: head(p) for p in range(4)}
        heads[counter % 4] = head(1000 + counter)
        assert look(w, at, leases, heads) == frozenset()
