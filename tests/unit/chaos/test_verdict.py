"""The chaos verdict: each invariant is caught, and delays are blamed on the right fault."""

from __future__ import annotations

from bench.chaos.verdict import Delivery, FaultWindow, Timing, judge

S = 1_000_000  # one second in µs
TIMING = Timing(lease_ttl_ms=5000, backstop_ms=0)


def delivery(key: str, at_us: int, ok: bool = True) -> Delivery:
    return Delivery(key=key, arrival_us=at_us, fence=1, attempt=1, signature_ok=ok)


def test_a_clean_run_passes_with_its_delays() -> None:
    expected = {f"j:{i}": i * S for i in range(1, 101)}
    deliveries = [delivery(k, t + 10_000) for k, t in expected.items()]
    v = judge(expected=expected, deliveries=deliveries, successes={}, faults=[], timing=TIMING)
    assert v.invariants_ok
    assert v.steady.count == 100
    assert v.steady.p99_ms == 10.0
    assert v.targets_ok


def test_each_broken_invariant_is_reported() -> None:
    expected = {"a": 10 * S, "b": 20 * S, "c": 30 * S}
    deliveries = [
        delivery("a", 10 * S - 1000),  # early by 1 ms
        delivery("b", 20 * S + 5, ok=False),  # bad signature
        delivery("b", 21 * S),  # a repeat with no fault anywhere near
        delivery("zzz", 40 * S),  # no schedule implies it
    ]
    v = judge(
        expected=expected, deliveries=deliveries, successes={"b": 2, "a": 1}, faults=[],
        timing=TIMING,
    )  # fmt: skip
    assert v.lost == ["c"]
    assert v.early == [("a", 1.0)]
    assert v.bad_signatures == 1
    assert v.unexplained_duplicates == ["b"]
    assert v.unexpected == ["zzz"]
    assert v.duplicate_effect == ["b"]
    assert not v.invariants_ok


def test_a_catch_up_delivery_is_its_occurrences_and_both_ways_is_a_duplicate() -> None:
    # fire_all found late replays the missed occurrences as catch-up runs, keyed
    # `<job>:<ms>:catchup`: each is the delivery its occurrence is owed.
    expected = {"j:1000": 1 * S, "j:2000": 2 * S, "j:3000": 3 * S}
    deliveries = [
        delivery("j:1000:catchup", 4 * S),
        delivery("j:2000:catchup", 4 * S + 20_000),
        delivery("j:3000", 3 * S + 5_000),
    ]
    successes = {"j:1000:catchup": 1, "j:2000:catchup": 1, "j:3000": 1}
    v = judge(
        expected=expected, deliveries=deliveries, successes=successes, faults=[], timing=TIMING
    )
    assert (v.lost, v.unexpected, v.duplicate_effect) == ([], [], [])
    assert v.invariants_ok
    twice = judge(
        expected=expected,
        deliveries=deliveries,
        successes={**successes, "j:1000": 1},
        faults=[],
        timing=TIMING,
    )
    assert twice.duplicate_effect == ["j:1000"]


def test_a_repeat_during_a_fault_is_explained_and_its_delay_blamed_on_it() -> None:
    kill = FaultWindow("kill_scheduler", "scheduler-1", 100 * S, 103 * S)
    expected = {"x": 101 * S, "y": 500 * S}
    deliveries = [
        delivery("x", 109 * S),  # 8 s late: over lease TTL + 2 s
        delivery("x", 110 * S),
        delivery("y", 500 * S + 2000),
    ]
    v = judge(expected=expected, deliveries=deliveries, successes={}, faults=[kill], timing=TIMING)
    assert v.invariants_ok
    assert v.raw_duplicates == 1
    assert v.unexplained_duplicates == []
    assert v.steady.count == 1  # only y: x belongs to the fault
    (impact,) = v.impacts
    assert impact.affected == 1
    assert impact.max_delay_ms == 8000.0
    assert impact.bound_ms == 7000.0
    assert not impact.within_bound
    assert not v.targets_ok


def test_overlapping_faults_blame_the_one_that_began_last() -> None:
    kill = FaultWindow("kill_worker", "worker-1", 100 * S, 102 * S)
    crash = FaultWindow("pg_crash", None, 104 * S, 107 * S)
    expected = {"before": 101 * S, "during": 105 * S}
    deliveries = [delivery("before", 101 * S + 500), delivery("during", 108 * S)]
    v = judge(
        expected=expected, deliveries=deliveries, successes={}, faults=[kill, crash],
        timing=TIMING,
    )  # fmt: skip
    by_kind = {i.fault.kind: i for i in v.impacts}
    assert by_kind["kill_worker"].affected == 1
    assert by_kind["pg_crash"].affected == 1
    assert by_kind["pg_crash"].max_delay_ms == 3000.0
    assert by_kind["pg_crash"].bound_ms == 8000.0  # the 3 s outage + 5 s
    assert by_kind["pg_crash"].within_bound


def test_a_run_whose_queue_row_disagrees_fails_the_invariants() -> None:
    expected = {"j1:1000": 1_000_000}
    deliveries = [Delivery("j1:1000", 1_000_500, 1, 1, True)]
    clean = judge(expected=expected, deliveries=deliveries, successes={}, faults=[], timing=TIMING)
    broken = judge(
        expected=expected,
        deliveries=deliveries,
        successes={},
        faults=[],
        timing=TIMING,
        queue_mismatches=[7, 3],
    )
    assert clean.invariants_ok
    assert not broken.invariants_ok
    assert broken.queue_mismatches == [3, 7]
