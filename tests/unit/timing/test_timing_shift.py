"""timing.shift: a schedule's jitter or window moves each occurrence to its planned instant,
and the nominal instant is recovered from the planned one (it is not stored: ADR 0022).

The round trip is what the scheduler relies on: `nominal_of(planned_of(n)) == n` for every
occurrence n of every schedule, or a claim would fire the wrong occurrence."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork.domain.jobs import AtTrigger, CronTrigger, EveryTrigger, Schedule
from tickwork.errors import InvalidInput
from tickwork.timing.shift import nominal_of, planned_of, shift_ms, window_seconds
from tickwork.timing.triggers import (
    next_occurrence,
    parse_shift_ms,
    validate_schedule,
)
from tickwork.timing.window import LoadMap

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
START = datetime(2026, 3, 1, tzinfo=UTC)
ANCHOR = datetime(2026, 1, 1, tzinfo=UTC)

triggers = st.one_of(
    st.sampled_from(
        [
            CronTrigger(expr="* * * * *"),
            CronTrigger(expr="0 * * * *"),
            CronTrigger(expr="*/5 * * * *"),
            CronTrigger(expr="30 2 * * *", timezone="Europe/Berlin"),
            CronTrigger(expr="0 * * * *", timezone="America/New_York"),
        ]
    ),
    st.integers(min_value=1, max_value=7_200_000).map(
        lambda ms: EveryTrigger(interval_ms=ms, anchor=ANCHOR)
    ),
    st.integers(min_value=0, max_value=10**9).map(
        lambda ms: AtTrigger(at=START + timedelta(milliseconds=ms))
    ),
)
shifts = st.integers(min_value=1, max_value=86_400_000)


@st.composite
def shifted_occurrences(draw: st.DrawFn) -> tuple[str, Schedule, datetime]:
    trigger = draw(triggers)
    kind = draw(st.sampled_from(["jitter_ms", "window_ms"]))
    schedule = Schedule(trigger=trigger, **{kind: draw(shifts)})
    after = START + timedelta(seconds=draw(st.integers(min_value=0, max_value=10**7)))
    nominal = next_occurrence(schedule, after - timedelta(microseconds=1))
    if nominal is None:  # a one-shot already past: its own instant
        assert isinstance(trigger, AtTrigger)
        nominal = trigger.at
    return draw(st.text(min_size=1, max_size=30)), schedule, nominal


@FAST
@given(shifted_occurrences())
def test_the_nominal_instant_is_recovered_from_the_planned_one(
    case: tuple[str, Schedule, datetime],
) -> None:
    job_id, schedule, nominal = case
    planned = planned_of(job_id, schedule, nominal, load={})
    assert nominal <= planned <= nominal + timedelta(milliseconds=shift_ms(schedule))
    following = next_occurrence(schedule, nominal)
    if following is not None:
        assert planned < following
    assert nominal_of(schedule, planned) == nominal


@FAST
@given(shifted_occurrences())
def test_a_jitter_is_the_same_on_every_call_and_a_window_follows_the_load(
    case: tuple[str, Schedule, datetime],
) -> None:
    job_id, schedule, nominal = case
    first = planned_of(job_id, schedule, nominal, load={})
    assert planned_of(job_id, schedule, nominal, load={}) == first
    following = next_occurrence(schedule, nominal)
    room = None if following is None else following - nominal
    if schedule.window_ms >= 3_000 and (room is None or room >= timedelta(seconds=4)):
        # At least two whole seconds to choose from. Load the one the empty map chose: the
        # placement moves to another one.
        busy = {int(first.timestamp()) // 1: 10**6}
        assert int(planned_of(job_id, schedule, nominal, load=busy).timestamp()) != int(
            first.timestamp()
        )


def test_an_unshifted_schedule_is_left_alone() -> None:
    schedule = Schedule(trigger=CronTrigger(expr="* * * * *"))
    instant = datetime(2026, 3, 1, 12, 0, 17, tzinfo=UTC)  # not even an occurrence
    assert planned_of("j", schedule, instant) is instant
    assert nominal_of(schedule, instant) is instant
    assert window_seconds(schedule, instant) is None


def test_a_load_map_is_counted_each_placement_so_a_batch_spreads_flat() -> None:
    schedule = Schedule(trigger=CronTrigger(expr="0 * * * *"), window_ms=30_000)
    nominal = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
    load = LoadMap()
    for n in range(3000):
        planned_of(f"job-{n}", schedule, nominal, load=load)
    first, last = window_seconds(schedule, nominal) or (0, 0)
    counts = [load.get(second, 0) for second in range(first, last + 1)]
    assert len(counts) == 30  # [nominal, nominal + 30 s): the end is not in it
    assert counts == [100] * 30


@pytest.mark.parametrize(
    ("value", "expected"),
    [("PT30S", 30_000), (30, 30_000), ("PT0S", 0), (0, 0), ("P1D", 86_400_000), (0.5, 500)],
)
def test_jitter_and_window_take_durations_up_to_a_day(value: str | int, expected: int) -> None:
    assert parse_shift_ms(value, "schedule.jitter") == expected


@pytest.mark.parametrize("value", ["P2D", "PT24H0.001S", -1, "soon", "P1M"])
def test_a_bad_jitter_names_its_field(value: str | int) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_shift_ms(value, "schedule.jitter")
    assert raised.value.field == "schedule.jitter"
    assert raised.value.code == "invalid_shift"


def test_jitter_and_window_together_are_refused() -> None:
    schedule = Schedule(trigger=CronTrigger(expr="* * * * *"), jitter_ms=1_000, window_ms=5_000)
    with pytest.raises(InvalidInput) as raised:
        validate_schedule(schedule)
    assert raised.value.field == "schedule.window"
    assert raised.value.code == "jitter_and_window"
