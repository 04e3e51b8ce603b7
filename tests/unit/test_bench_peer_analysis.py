"""The peer suite's figures from body logs (bench/peers/analysis.py)."""

from __future__ import annotations

import math

from bench.peers import analysis
from bench.peers.analysis import Execution

T = 1_000.0
T_US = 1_000_000_000


def test_parse_skips_torn_and_malformed_lines() -> None:
    lines = ["a 1 2", "b 3", "c x 4", "d 5 6", "e 7 8 9"]
    assert analysis.parse_lines(lines) == [Execution("a", 1, 2), Execution("d", 5, 6)]


def test_burst_fires_per_second_and_lateness() -> None:
    runs = [Execution(f"b{i}", T_US, T_US + (i + 1) * 100_000) for i in range(10)]
    found = analysis.burst(runs, T, jobs=10)
    assert found["completion_s"] == 1.0
    assert found["fires_per_s"] == 10.0
    assert found["drain_s"] == 0.9
    assert found["first_ran_ms"] == 100.0
    assert found["lateness_ms"]["p50"] == 500.0
    assert found["lateness_ms"]["max"] == 1000.0
    assert (found["missing"], found["duplicates"], found["early"]) == (0, 0, 0)


def test_burst_counts_missing_duplicates_and_early() -> None:
    runs = [
        Execution("b0", T_US, T_US + 10_000),
        Execution("b0", T_US, T_US + 20_000),  # the same one-shot ran twice
        Execution("b1", T_US, T_US - 5_000),  # before its instant
    ]
    found = analysis.burst(runs, T, jobs=4)
    assert found["missing"] == 2
    assert found["duplicates"] == 1
    assert found["early"] == 1
    assert found["distinct"] == 2
    # Lateness of each one-shot's first execution only.
    assert found["lateness_ms"]["n"] == 2


def test_burst_with_nothing_run() -> None:
    found = analysis.burst([], T, jobs=3)
    assert found["missing"] == 3
    assert math.isnan(found["fires_per_s"])
    assert found["lateness_ms"] == {"n": 0}


def test_precision_counts_only_the_window() -> None:
    runs = [
        Execution(f"p{j}", (int(T) + s) * 1_000_000, (int(T) + s) * 1_000_000 + 2_000)
        for j in range(3)
        for s in range(-1, 5)  # one second before the window and one after it
    ]
    found = analysis.precision(runs, T, T + 4, jobs=3)
    assert found["expected"] == 12
    assert found["executions"] == 12
    assert (found["missed"], found["duplicates"]) == (0, 0)
    assert found["lateness_ms"]["p99"] == 2.0


def test_precision_missed_and_duplicated_occurrences() -> None:
    second = int(T) * 1_000_000
    runs = [
        Execution("p0", second, second + 1_000),
        Execution("p0", second, second + 3_000),
        Execution("p1", second + 1_000_000, second + 1_001_000),
    ]
    found = analysis.precision(runs, T, T + 2, jobs=2)
    assert found["expected"] == 4
    assert found["missed"] == 2
    assert found["duplicates"] == 1


def test_fires_over_time_bins() -> None:
    runs = [Execution("a", 0, T_US + 100_000), Execution("b", 0, T_US + 1_200_000)]
    assert analysis.fires_over_time(runs, T, 0.5) == [1, 0, 1]
    assert analysis.fires_over_time([], T, 1.0) == []


def test_ratio_handles_missing_figures() -> None:
    assert analysis.ratio(10.0, 4) == 2.5
    assert analysis.ratio(None, 4) is None
    assert analysis.ratio(1.0, 0) is None
    assert analysis.ratio(math.nan, 2.0) is None


def test_percentiles_for_the_distribution_plot() -> None:
    found = analysis.percentiles([float(v) for v in range(1, 201)])
    assert len(found) == 101
    assert (found[0], found[50], found[100]) == (1.0, 100.0, 200.0)
    assert analysis.percentiles([]) == []


def test_failover_counts_what_the_kill_did() -> None:
    killed_s, restarted_s = T + 1.0, T + 1.5
    runs = [
        Execution("a", T_US, T_US + 200_000),
        Execution("b", T_US, T_US + 900_000),  # ran before the kill, its outcome unwritten
        Execution("b", T_US, T_US + 3_000_000),  # so it ran again after the restart
        Execution("c", T_US, T_US + 2_500_000),  # the next fire: 1.5 s after the kill
    ]
    found = analysis.failover(runs, T, jobs=4, killed_at_s=killed_s, restarted_at_s=restarted_s)
    assert found["ran_before_kill"] == 2
    assert found["killed_after_t_s"] == 1.0
    assert found["restart_delay_s"] == 0.5
    assert found["next_fire_after_kill_s"] == 1.5
    assert found["last_fire_after_kill_s"] == 2.0
    assert (found["missing"], found["duplicates"], found["jobs_run_twice_or_more"]) == (1, 1, 1)


def test_failover_with_nothing_after_the_kill() -> None:
    runs = [Execution("a", T_US, T_US + 100_000)]
    found = analysis.failover(runs, T, jobs=2, killed_at_s=T + 1.0, restarted_at_s=None)
    assert found["next_fire_after_kill_s"] is None
    assert found["restart_delay_s"] is None
    assert found["missing"] == 1
