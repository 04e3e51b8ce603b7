"""jitter_delay / planned_instant: bounds, determinism across processes, even spread.

Spread tests use fixed job ids, and the delay is a pure function of its inputs: each such
test has one outcome on every run and machine, so it cannot flake. The bounds it checks are
derived below so that a uniform draw passes them and the usual mistakes do not (a delay from
the job id alone, piling up at a cap, a draw that favours the low end).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork.clock import from_us, to_us
from tickwork.timing.jitter import jitter_delay, planned_instant, uniform_index

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ONE_MS = timedelta(milliseconds=1)
ONE_SECOND = timedelta(seconds=1)
NOMINAL = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
LAST_US = to_us(datetime(2199, 12, 31, tzinfo=UTC))
DAY_MS = 86_400_000

job_ids = st.text(min_size=1, max_size=40)
nominals = st.integers(min_value=0, max_value=LAST_US).map(from_us)
jitters_ms = st.one_of(
    st.integers(min_value=0, max_value=2_000),
    st.integers(min_value=0, max_value=DAY_MS),
)
gaps = st.one_of(
    st.none(),
    st.integers(min_value=1, max_value=5_000_000).map(lambda us: timedelta(microseconds=us)),
    st.integers(min_value=1, max_value=2 * DAY_MS).map(lambda ms: timedelta(milliseconds=ms)),
)


def chi_square(counts: list[int]) -> float:
    expected = sum(counts) / len(counts)
    return sum((count - expected) ** 2 / expected for count in counts)


# -- bounds ------------------------------------------------------------------------------------


@FAST
@given(job_id=job_ids, nominal=nominals, jitter_ms=jitters_ms, gap=gaps)
def test_never_early_never_past_jitter_never_at_the_next_occurrence(
    job_id: str, nominal: datetime, jitter_ms: int, gap: timedelta | None
) -> None:
    next_nominal = None if gap is None else nominal + gap
    delay = jitter_delay(job_id, nominal, jitter_ms, next_nominal=next_nominal)
    assert timedelta(0) <= delay <= timedelta(milliseconds=jitter_ms)
    assert delay % ONE_MS == timedelta(0)  # whole milliseconds
    planned = planned_instant(job_id, nominal, jitter_ms, next_nominal=next_nominal)
    assert planned == nominal + delay
    if next_nominal is not None:
        assert planned < next_nominal


@FAST
@given(job_id=job_ids, nominal=nominals, gap=gaps)
def test_zero_jitter_is_the_nominal_instant(
    job_id: str, nominal: datetime, gap: timedelta | None
) -> None:
    next_nominal = None if gap is None else nominal + gap
    assert planned_instant(job_id, nominal, 0, next_nominal=next_nominal) == nominal


@FAST
@given(job_id=job_ids, nominal=nominals, jitter_ms=jitters_ms, gap=gaps)
def test_the_same_occurrence_always_gets_the_same_delay(
    job_id: str, nominal: datetime, jitter_ms: int, gap: timedelta | None
) -> None:
    next_nominal = None if gap is None else nominal + gap
    first = jitter_delay(job_id, nominal, jitter_ms, next_nominal=next_nominal)
    # An equal instant in another zone is the same occurrence.
    elsewhere = nominal.astimezone(timezone(timedelta(hours=5, minutes=30)))
    assert jitter_delay(job_id, elsewhere, jitter_ms, next_nominal=next_nominal) == first
    assert jitter_delay(job_id, nominal, jitter_ms, next_nominal=next_nominal) == first


def test_another_process_computes_the_same_delays() -> None:
    """A restarted scheduler, or another one taking the partition over, must agree: str
    hashes are salted per process (PYTHONHASHSEED differs here), the delay must not be."""
    cases = [(f"job-{i}", NOMINAL + timedelta(minutes=i), 30_000 + i) for i in range(20)]
    here = [
        jitter_delay(job_id, at, jitter, next_nominal=None) // ONE_MS
        for job_id, at, jitter in cases
    ]
    code = (
        "import sys\n"
        "from datetime import datetime, timedelta\n"
        "from tickwork.timing.jitter import jitter_delay\n"
        "for line in sys.stdin:\n"
        "    job_id, at, jitter = line.split()\n"
        "    delay = jitter_delay(job_id, datetime.fromisoformat(at), int(jitter), "
        "next_nominal=None)\n"
        "    print(delay // timedelta(milliseconds=1))\n"
    )
    lines = "".join(f"{job_id} {at.isoformat()} {jitter}\n" for job_id, at, jitter in cases)
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    there = subprocess.run(
        [sys.executable, "-c", code],
        input=lines,
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    ).stdout.split()
    assert [int(value) for value in there] == here
    assert len(set(here)) > 1  # and the delays do depend on the occurrence


# -- spread ------------------------------------------------------------------------------------


def test_jobs_at_one_instant_spread_evenly_over_the_jitter() -> None:
    """40,000 jobs at one instant, PT30S: each one-second bucket holds the mean +-15 %.

    The bound, derived: for a uniform draw each bucket's count is Binomial(n, 1/30), with a
    relative deviation of sqrt(29 / n). At n = 10,000 that is 5.4 %, so +-15 % is only 2.8
    deviations: a perfectly uniform draw breaks it in about 1 id set out of 7 (30 buckets x
    0.5 %); the 10,000 ids job-0..job-9999 do (one bucket holds 384 against a mean of 333).
    At n = 40,000 it is 2.7 %, and +-15 % is 5.6 deviations: a uniform draw breaks it with
    p < 1e-6. On top, the chi-square statistic (29 degrees of freedom: mean 29, deviation
    7.6) must stay under 70, which a uniform draw exceeds with p < 1e-4.

    And it cannot flake at all: the ids are fixed and the delay is a pure function, so the
    outcome is the same on every run. What it catches: a delay from the job id or the instant
    alone (everything in one bucket), a cap that piles delays up (the last bucket overflows),
    a draw that favours some delays (modulo on a narrow hash, float rounding).
    """
    jobs = 40_000
    buckets = Counter(
        # 30,000 ms itself is a possible delay: it belongs to the last second, [29 s, 30 s].
        min(jitter_delay(f"job-{i}", NOMINAL, 30_000, next_nominal=None) // ONE_SECOND, 29)
        for i in range(jobs)
    )
    counts = [buckets[second] for second in range(30)]
    mean = jobs / 30
    assert all(abs(count - mean) <= 0.15 * mean for count in counts), counts
    assert chi_square(counts) < 70, counts


def test_a_jitter_longer_than_the_interval_is_scaled_not_capped() -> None:
    """PT60S of jitter on a PT10S interval: the delays spread over the whole 10 s gap, each
    second holding its share (same derivation as above: Binomial(10,000, 1/10), mean 1,000,
    deviation 30; +-15 % is 5 deviations). Capping at gap - 1 ms instead would put 5/6 of the
    fires on the last millisecond."""
    next_nominal = NOMINAL + timedelta(seconds=10)
    delays = [
        jitter_delay(f"job-{i}", NOMINAL, 60_000, next_nominal=next_nominal) for i in range(10_000)
    ]
    assert max(delays) < timedelta(seconds=10)
    buckets = Counter(delay // timedelta(seconds=1) for delay in delays)
    assert sorted(buckets) == list(range(10))
    assert all(abs(count - 1_000) <= 150 for count in buckets.values()), buckets
    assert Counter(delays).most_common(1)[0][1] < 10  # no millisecond collects a pile


def test_one_job_gets_different_delays_at_different_occurrences() -> None:
    """The delay changes from occurrence to occurrence, or a job unlucky enough to draw 29 s
    would always fire 29 s late. 1,000 hourly occurrences draw from 30,001 delays: a uniform
    draw repeats about 1,000**2 / (2 * 30,001) = 17 of them, far fewer than 100."""
    delays = {
        jitter_delay("nightly-report", NOMINAL + timedelta(hours=h), 30_000, next_nominal=None)
        for h in range(1_000)
    }
    assert len(delays) > 900


# -- edges -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gap", "longest"),
    [
        (timedelta(milliseconds=1), timedelta(0)),  # the only instant before the next: nominal
        (timedelta(microseconds=1), timedelta(0)),
        (timedelta(microseconds=1_001), ONE_MS),  # 1 ms later is still before the next
        (timedelta(milliseconds=2), ONE_MS),
    ],
)
def test_a_tiny_gap_leaves_only_the_delays_before_it(gap: timedelta, longest: timedelta) -> None:
    delays = {
        jitter_delay(f"job-{i}", NOMINAL, 1_000, next_nominal=NOMINAL + gap) for i in range(200)
    }
    assert delays == {timedelta(0), longest}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="jitter_ms"):
        jitter_delay("job", NOMINAL, -1, next_nominal=None)
    with pytest.raises(ValueError, match="next_nominal"):
        jitter_delay("job", NOMINAL, 1_000, next_nominal=NOMINAL)
    with pytest.raises(ValueError, match="naive"):
        jitter_delay("job", NOMINAL.replace(tzinfo=None), 1_000, next_nominal=None)


@given(word=st.binary(min_size=8, max_size=8), count=st.integers(min_value=1, max_value=10**9))
def test_uniform_index_stays_in_range(word: bytes, count: int) -> None:
    assert 0 <= uniform_index(word, count) < count


def test_uniform_index_reaches_both_ends() -> None:
    assert uniform_index(bytes(8), 30_001) == 0
    assert uniform_index(b"\xff" * 8, 30_001) == 30_000
    assert math.isclose(uniform_index(b"\x80" + bytes(7), 1_000), 500)
