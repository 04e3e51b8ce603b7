"""scheduler.fairness: weighted max-min fair shares of a batch, and round-robin order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.scheduler.fairness import fair_shares, interleave

tenants = st.sampled_from(["a", "b", "c", "d", "e"])
dues = st.dictionaries(tenants, st.integers(min_value=0, max_value=3000), max_size=5)
weights = st.dictionaries(tenants, st.integers(min_value=1, max_value=10), max_size=5)


@settings(max_examples=300, deadline=None)
@given(dues, weights, st.integers(min_value=0, max_value=5000))
def test_shares_are_work_conserving_bounded_and_max_min_fair(
    due: dict[str, int], weight: dict[str, int], capacity: int
) -> None:
    shares = fair_shares(due, weight, capacity)
    assert set(shares) == set(due)
    assert sum(shares.values()) == min(capacity, sum(due.values()))
    for tenant, share in shares.items():
        assert 0 <= share <= due[tenant]
    # Max-min: no tenant has more per unit of weight than a tenant left wanting would have
    # with one unit more (the most a whole-unit split can be off by).
    w = {t: weight.get(t, 1) for t in due}
    for starved, share in shares.items():
        if share < due[starved]:
            for other, other_share in shares.items():
                assert other_share / w[other] <= (share + 1) / w[starved] + 1e-9


def test_the_seed_case_a_small_tenant_gets_all_it_needs_the_big_one_the_rest() -> None:
    assert fair_shares({"a": 1000, "b": 100}, {}, 1000) == {"a": 900, "b": 100}
    assert fair_shares({"a": 1000, "b": 1000}, {}, 1000) == {"a": 500, "b": 500}
    assert fair_shares({"a": 1000, "b": 1000}, {"a": 3}, 1000) == {"a": 750, "b": 250}
    assert fair_shares({"a": 5, "b": 0}, {}, 1000) == {"a": 5, "b": 0}


def test_interleave_takes_weight_items_per_turn() -> None:
    groups = {"b": ["b1", "b2"], "a": ["a1", "a2", "a3", "a4", "a5"]}
    assert interleave(groups, {"a": 2}) == ["a1", "a2", "b1", "a3", "a4", "b2", "a5"]
    assert interleave({}, {}) == []
