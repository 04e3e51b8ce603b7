"""The partition benchmarks' own arithmetic: what they read from /metrics and from tw_runs."""

from __future__ import annotations

from typing import Any

from bench import claim_seed
from bench.partitions.common import parse_metrics, spread_over, table
from bench.partitions.takeover import Window, _analyse, _mark_late, _series

from tickwork.domain.partitions import partition_of

S = 1_000_000  # one second in µs


def test_metrics_are_summed_over_their_labels_and_others_ignored() -> None:
    text = "\n".join(
        [
            "# HELP tickwork_fires_total Occurrences claimed",
            "# TYPE tickwork_fires_total counter",
            'tickwork_fires_total{origin="schedule"} 40.0',
            'tickwork_fires_total{origin="manual"} 2.0',
            "tickwork_fires_created 1.7e9",
            "tickwork_claim_conflicts_total 3.0",
            "tickwork_partitions_owned 21.0",
        ]
    )
    found = parse_metrics(text)
    assert found["tickwork_fires_total"] == 42.0
    assert found["tickwork_claim_conflicts_total"] == 3.0
    assert found["tickwork_partitions_owned"] == 21.0
    assert found["tickwork_takeover_fires_total"] == 0.0  # absent (the racing tree): zero


def test_spread_means_every_partition_held_by_exactly_these_owners_within_one() -> None:
    even = {"s1": set(range(32)), "s2": set(range(32, 64))}
    assert spread_over(even, ["s1", "s2"], 64)
    assert not spread_over(even, ["s1", "s2", "s3"], 64)
    uneven = {"s1": set(range(40)), "s2": set(range(40, 64))}
    assert not spread_over(uneven, ["s1", "s2"], 64)
    assert not spread_over({"s1": set(range(63))}, ["s1"], 64)


def test_seeded_rows_carry_the_partition_tickwork_gives_their_ids() -> None:
    shape = claim_seed.Shape(
        rows=500, due=100, dirty=50, kind="every", misfire_grace_ms=1000, now_us=10**15,
        partitions=64,
    )  # fmt: skip
    rows = list(claim_seed.seed_rows(shape))
    column = claim_seed.COLUMNS.index("partition")
    assert all(r[column] == partition_of(r[0], 64) for r in rows)
    assert len({r[column] for r in rows}) == 64  # spread over every partition, not all in 0


def test_series_is_the_instants_of_the_job_in_the_window() -> None:
    assert _series(anchor_us=250_000, start_us=2 * S, end_us=5 * S) == [
        2 * S + 250_000,
        3 * S + 250_000,
        4 * S + 250_000,
    ]
    assert _series(anchor_us=3 * S, start_us=0, end_us=5 * S) == [3 * S, 4 * S]


def run(job: str, at_s: int, *, late_ms: float = 1.0, attempts: int = 1) -> dict[str, Any]:
    scheduled = at_s * S
    return {
        "job_id": job, "scheduled_us": scheduled, "created_us": scheduled - 100_000,
        "started_us": scheduled + int(late_ms * 1000), "status": "succeeded", "coalesced": 0,
        "attempts": attempts,
    }  # fmt: skip


def test_a_window_counts_missing_duplicates_gaps_and_late_fires() -> None:
    anchors = {"a": 0, "b": 0}
    runs = [run("a", s) for s in range(10)]
    runs += [run("b", s) for s in range(5)]  # b: 5..9 missing in "after" (4 is before it)
    runs += [run("b", 10, late_ms=700, attempts=2)]  # late, and executed twice
    before = Window("kill9 baseline", 0, 5 * S, {})
    after = Window("kill9 after", 5 * S, 11 * S, {})
    found = [_analyse(w, runs, anchors) for w in (before, after)]  # type: ignore[arg-type]
    _mark_late(found)
    base, fault = found
    assert (base["expected"], base["fired"], base["missing"]) == (10, 10, 0)
    assert (fault["expected"], fault["fired"], fault["missing"]) == (12, 6, 6)
    assert fault["duplicates"] == 1
    assert fault["late_beyond_baseline_max"] == 1
    assert fault["max_gap_per_job_ms"]["max"] == 6_699.0  # b: from 4 s to 10.7 s
    assert table(["window", "n"], [["x", 1_000]]).splitlines()[2] == "x       1,000"
