"""place_in_window / LoadMap: bounds, least loaded seconds, even spread, flattening a batch.

The oracle for "least loaded" is a plain dict scanned second by second; LoadMap must answer
exactly as that scan does (same second, same tie rule) while reading whole blocks by their
kept minimum.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork.clock import from_us, to_us
from tickwork.timing.window import LoadMap, least_loaded_second, place_in_window

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOMINAL = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
NOMINAL_S = to_us(NOMINAL) // 1_000_000
LAST_US = to_us(datetime(2199, 12, 31, tzinfo=UTC))

job_ids = st.text(min_size=1, max_size=40)
nominals = st.integers(min_value=0, max_value=LAST_US).map(from_us)
windows_ms = st.one_of(
    st.integers(min_value=0, max_value=3_000),
    st.integers(min_value=0, max_value=300_000),
)
gaps = st.one_of(
    st.none(),
    st.integers(min_value=1, max_value=5_000_000).map(lambda us: timedelta(microseconds=us)),
    st.integers(min_value=1, max_value=400_000).map(lambda ms: timedelta(milliseconds=ms)),
)
# Planned fires around the window, as offsets from its first second.
loads = st.dictionaries(
    st.integers(min_value=-3, max_value=310), st.integers(min_value=0, max_value=4), max_size=60
)
draws = st.binary(min_size=8, max_size=8)


def candidate_seconds(nominal: datetime, window_ms: int, next_nominal: datetime | None) -> range:
    """The seconds a placement may take: those wholly inside [nominal, nominal + window) and
    before the next occurrence, or, when there is none, those holding a whole millisecond of
    it; worked out here from the definition, not taken from the module."""
    first_us = to_us(nominal)
    last_us = first_us + window_ms * 1_000 - 1
    if next_nominal is not None:
        last_us = min(last_us, to_us(next_nominal) - 1)
    first_ms, last_ms = -(-first_us // 1_000), last_us // 1_000
    whole = range(-(-first_ms // 1_000), (last_ms + 1) // 1_000)
    return whole if len(whole) else range(first_ms // 1_000, last_ms // 1_000 + 1)


def absolute(load: dict[int, int], nominal: datetime) -> dict[int, int]:
    first_s = to_us(nominal) // 1_000_000
    return {first_s + offset: fires for offset, fires in load.items()}


def chi_square(counts: list[int]) -> float:
    expected = sum(counts) / len(counts)
    return sum((count - expected) ** 2 / expected for count in counts)


# -- bounds and the least loaded second ----------------------------------------------------------


@FAST
@given(job_id=job_ids, nominal=nominals, window_ms=windows_ms, gap=gaps, relative_load=loads)
def test_placed_in_the_window_before_the_next_occurrence(
    job_id: str,
    nominal: datetime,
    window_ms: int,
    gap: timedelta | None,
    relative_load: dict[int, int],
) -> None:
    next_nominal = None if gap is None else nominal + gap
    placed = place_in_window(
        job_id, nominal, window_ms, next_nominal=next_nominal, load=absolute(relative_load, nominal)
    )
    assert nominal <= placed
    assert placed < nominal + timedelta(milliseconds=window_ms) or placed == nominal
    if next_nominal is not None:
        assert placed < next_nominal
    if placed != nominal:
        assert to_us(placed) % 1_000 == 0  # a whole epoch millisecond


@FAST
@given(job_id=job_ids, nominal=nominals, window_ms=windows_ms, gap=gaps, relative_load=loads)
def test_the_chosen_second_is_a_least_loaded_one(
    job_id: str,
    nominal: datetime,
    window_ms: int,
    gap: timedelta | None,
    relative_load: dict[int, int],
) -> None:
    next_nominal = None if gap is None else nominal + gap
    load = absolute(relative_load, nominal)
    seconds = candidate_seconds(nominal, window_ms, next_nominal)
    placed = place_in_window(job_id, nominal, window_ms, next_nominal=next_nominal, load=load)
    if window_ms == 0 or not seconds:
        assert placed == nominal
        return
    placed_s = to_us(placed) // 1_000_000
    assert placed_s in seconds
    assert load.get(placed_s, 0) == min(load.get(second, 0) for second in seconds)


@FAST
@given(job_id=job_ids, nominal=nominals, window_ms=windows_ms, gap=gaps, relative_load=loads)
def test_a_load_map_places_as_a_plain_mapping_does(
    job_id: str,
    nominal: datetime,
    window_ms: int,
    gap: timedelta | None,
    relative_load: dict[int, int],
) -> None:
    next_nominal = None if gap is None else nominal + gap
    load = absolute(relative_load, nominal)
    plain = place_in_window(job_id, nominal, window_ms, next_nominal=next_nominal, load=load)
    mapped = place_in_window(
        job_id, nominal, window_ms, next_nominal=next_nominal, load=LoadMap(load)
    )
    assert mapped == plain


@FAST
@given(
    additions=st.lists(st.integers(min_value=-200, max_value=600), max_size=400),
    first=st.integers(min_value=-250, max_value=650),
    length=st.integers(min_value=0, max_value=700),
    draw=draws,
)
def test_least_loaded_agrees_with_a_scan_of_every_second(
    additions: list[int], first: int, length: int, draw: bytes
) -> None:
    """Counts grown one fire at a time (the blocks' kept minimums must follow), ranges short
    and long, inside one block and across many, with missing blocks in between."""
    counts: Counter[int] = Counter()
    load_map = LoadMap()
    for second in additions:
        counts[second] += 1
        load_map.add_to_second(second)
    last = first + length
    assert load_map.least_loaded(first, last, tie_draw=draw) == least_loaded_second(
        counts, first, last, tie_draw=draw
    )


# -- spread and flattening ---------------------------------------------------------------------


def test_an_empty_load_spreads_jobs_over_the_window_not_on_its_first_second() -> None:
    """With nothing planned every second ties; the tie is broken by the occurrence's own draw.
    10,000 jobs, PT30S: 30 seconds (the window's end, nominal + 30 s, is not in it). Each
    count is Binomial(10,000, 1/30): chi-square over 30 buckets (29 degrees of freedom: mean
    29, deviation 7.6) stays under 70 unless the draw is biased (p < 1e-4 for a uniform one);
    fixed ids and a pure function, so the outcome never changes between runs."""
    placed = [
        place_in_window(f"job-{i}", NOMINAL, 30_000, next_nominal=None, load={})
        for i in range(10_000)
    ]
    buckets = Counter(to_us(at) // 1_000_000 - NOMINAL_S for at in placed)
    assert sorted(buckets) == list(range(30))
    assert chi_square([buckets[second] for second in range(30)]) < 70


def test_a_batch_of_100_000_jobs_flattens_to_an_even_load() -> None:
    """Each placement takes a least loaded second and counts itself: the 30 seconds of a PT30S
    window end with 100,000 / 30 fires each (3,333 or 3,334)."""
    loads = LoadMap()
    for i in range(100_000):
        loads.add(place_in_window(f"job-{i}", NOMINAL, 30_000, next_nominal=None, load=loads))
    counts = [loads.get(NOMINAL_S + second, 0) for second in range(30)]
    assert sorted(set(counts)) == [3_333, 3_334]
    assert loads.total == sum(counts) == 100_000


def test_a_long_window_flattens_too() -> None:
    """PT1H (3,600 seconds, read by block minimums): 20,000 jobs end at 5 or 6 per second."""
    loads = LoadMap()
    for i in range(20_000):
        loads.add(place_in_window(f"job-{i}", NOMINAL, 3_600_000, next_nominal=None, load=loads))
    counts = [loads.get(NOMINAL_S + second, 0) for second in range(3_600)]
    assert sorted(set(counts)) == [5, 6]
    assert sum(counts) == 20_000


def test_placing_on_top_of_an_existing_load_fills_the_gaps_first() -> None:
    """Seconds 0-9 already hold 5 fires each: the next 20 x 5 jobs go to seconds 10-29 before
    any lands in 0-9 again."""
    loads = LoadMap({NOMINAL_S + second: 5 for second in range(10)})
    for i in range(20 * 5):
        loads.add(place_in_window(f"job-{i}", NOMINAL, 30_000, next_nominal=None, load=loads))
    assert [loads[NOMINAL_S + second] for second in range(30)] == [5] * 30


def test_a_window_longer_than_the_interval_stays_before_the_next_occurrence() -> None:
    """PT30S of window on a PT5S interval: all in [nominal, next), every second used."""
    next_nominal = NOMINAL + timedelta(seconds=5)
    loads = LoadMap()
    for i in range(1_000):
        at = place_in_window(f"job-{i}", NOMINAL, 30_000, next_nominal=next_nominal, load=loads)
        assert NOMINAL <= at < next_nominal
        loads.add(at)
    assert dict(loads) == {NOMINAL_S + second: 200 for second in range(5)}


def test_partial_first_and_last_seconds_are_not_packed() -> None:
    """A nominal instant at .9986 s with PT2S: its own second holds one millisecond of the
    window (.999) and the last one 998 (2.000 .. 2.998): only second 1 is wholly inside, and
    every placement goes there, none crowding a partial second. A window with no whole second
    inside (PT0.5S from .9986 s) uses the partial ones, within their bounds."""
    nominal = NOMINAL + timedelta(microseconds=998_600)
    placed = {
        place_in_window(f"job-{i}", nominal, 2_000, next_nominal=None, load={})
        for i in range(3_000)
    }
    assert {to_us(at) // 1_000_000 - NOMINAL_S for at in placed} == {1}
    short = {
        place_in_window(f"job-{i}", nominal, 500, next_nominal=None, load={}) for i in range(3_000)
    }
    assert min(short) == NOMINAL + timedelta(milliseconds=999)
    assert max(short) < nominal + timedelta(milliseconds=500)
    assert {to_us(at) // 1_000_000 - NOMINAL_S for at in short} == {0, 1}


def test_zero_window_is_the_nominal_instant() -> None:
    nominal = NOMINAL + timedelta(microseconds=123)
    assert place_in_window("job", nominal, 0, next_nominal=None, load={}) == nominal


def test_the_same_occurrence_is_placed_the_same_way() -> None:
    load = {NOMINAL_S + 3: 1}
    first = place_in_window("job", NOMINAL, 10_000, next_nominal=None, load=load)
    assert place_in_window("job", NOMINAL, 10_000, next_nominal=None, load=dict(load)) == first
    others = {
        place_in_window("job", NOMINAL + timedelta(minutes=m), 10_000, next_nominal=None, load={})
        - timedelta(minutes=m)
        for m in range(50)
    }
    assert len(others) > 40  # each occurrence draws its own place


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="window_ms"):
        place_in_window("job", NOMINAL, -1, next_nominal=None, load={})
    with pytest.raises(ValueError, match="next_nominal"):
        place_in_window("job", NOMINAL, 1_000, next_nominal=NOMINAL, load={})
    with pytest.raises(ValueError, match="fires"):
        LoadMap().add_to_second(NOMINAL_S, -1)
    with pytest.raises(ValueError, match="last_s"):
        LoadMap().least_loaded(10, 9)


# -- LoadMap as a Mapping ------------------------------------------------------------------------


def test_load_map_is_a_mapping_of_the_seconds_with_fires() -> None:
    loads = LoadMap({5: 2, -70: 1, 200: 0})
    loads.add(from_us(5_500_000))
    loads.add_us(130_000_001)
    assert dict(loads) == {-70: 1, 5: 3, 130: 1}
    assert list(loads) == [-70, 5, 130]
    assert len(loads) == 3
    assert loads.total == 5
    assert 200 not in loads
    assert loads.get(6, 0) == 0
    with pytest.raises(KeyError):
        loads[6]
