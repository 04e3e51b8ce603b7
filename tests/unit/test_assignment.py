"""The pure partition assignment: even, complete, sticky, and still under a steady membership."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.domain.partitions import partition_of
from tickwork.scheduler.assignment import moves, plan_assignment

MEMBERS = [f"s{n}" for n in range(8)]


@st.composite
def clusters(draw: st.DrawFn) -> tuple[int, list[str], dict[int, str | None]]:
    """P, the live members, and who holds what now (live members, gone ones, nobody)."""
    partitions = draw(st.integers(1, 96))
    members = draw(st.lists(st.sampled_from(MEMBERS), min_size=1, max_size=6, unique=True))
    holders = draw(
        st.dictionaries(
            st.integers(0, partitions - 1), st.none() | st.sampled_from(MEMBERS), max_size=96
        )
    )
    return partitions, members, holders


@given(clusters())
@settings(max_examples=300)
def test_every_partition_goes_to_exactly_one_member_evenly(
    cluster: tuple[int, list[str], dict[int, str | None]],
) -> None:
    partitions, members, holders = cluster
    plan = plan_assignment(partitions, members, holders)
    assert set(plan) == set(members)
    everyone = [p for share in plan.values() for p in share]
    assert sorted(everyone) == list(range(partitions))  # all of them, none twice
    sizes = [len(share) for share in plan.values()]
    assert max(sizes) - min(sizes) <= 1


@given(clusters())
@settings(max_examples=300)
def test_members_keep_what_they_hold_up_to_their_share(
    cluster: tuple[int, list[str], dict[int, str | None]],
) -> None:
    partitions, members, holders = cluster
    plan = plan_assignment(partitions, members, holders)
    for member in members:
        held = {p for p, h in holders.items() if h == member}
        kept = held & plan[member]
        assert len(kept) == min(len(held), len(plan[member]))


@given(clusters())
@settings(max_examples=300)
def test_a_steady_membership_changes_nothing(
    cluster: tuple[int, list[str], dict[int, str | None]],
) -> None:
    partitions, members, holders = cluster
    plan = plan_assignment(partitions, members, holders)
    settled = {p: m for m, share in plan.items() for p in share}
    assert plan_assignment(partitions, members, settled) == plan  # no flapping


def test_a_join_moves_only_the_newcomers_share() -> None:
    one = plan_assignment(64, ["a"], {})
    holders = {p: "a" for p in one["a"]}
    two = plan_assignment(64, ["a", "b"], holders)
    assert len(two["a"]) == len(two["b"]) == 32
    assert two["a"] <= one["a"]  # a gives up half and takes nothing new
    three = plan_assignment(64, ["a", "b", "c"], {p: m for m, s in two.items() for p in s})
    assert sorted(len(s) for s in three.values()) == [21, 21, 22]
    assert three["a"] <= two["a"]
    assert three["b"] <= two["b"]


def test_a_leaver_s_partitions_are_shared_by_the_rest() -> None:
    three = plan_assignment(64, ["a", "b", "c"], {})
    holders = {p: m for m, s in three.items() for p in s}
    two = plan_assignment(64, ["a", "c"], holders)
    assert three["a"] <= two["a"]
    assert three["c"] <= two["c"]
    assert two["a"] | two["c"] == set(range(64))


def test_moves_acquire_only_what_nobody_live_holds() -> None:
    holders: dict[int, str | None] = {0: "a", 1: "b", 2: None}
    keep, release, acquire = moves("a", frozenset({0, 1, 2}), {0, 3}, holders)
    assert keep == {0}
    assert release == {3}
    assert acquire == {2}  # 1 is still b's: b releases it first


@given(st.text(min_size=1, max_size=40), st.integers(1, 1024))
def test_partition_of_is_stable_and_in_range(job_id: str, partitions: int) -> None:
    first = partition_of(job_id, partitions)
    assert 0 <= first < partitions
    assert partition_of(job_id, partitions) == first


def test_ids_made_in_one_millisecond_go_round_the_partitions() -> None:
    base = int("019bc186de0082a21d32fac4694830bd", 16)
    ids = [f"{base + n:032x}" for n in range(128)]
    assert [partition_of(i, 64) for i in ids[:64]] == [(base + n) % 64 for n in range(64)]
    assert sorted({partition_of(i, 64) for i in ids}) == list(range(64))
