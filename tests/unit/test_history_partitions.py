"""The pure plan of tw_attempts' daily partitions, and how PostgreSQL's bounds are read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.clock import to_us
from tickwork.domain.history_partitions import (
    DAY_US,
    Partition,
    day_partition,
    plan_partitions,
)
from tickwork.store.postgres.history import parse_bound

DAY = timedelta(days=1)
MIDNIGHT = datetime(2026, 12, 2, tzinfo=UTC)


def us(when: datetime) -> int:
    return to_us(when)


def day(when: datetime) -> Partition:
    return day_partition(us(when))


def names(partitions: tuple[Partition, ...]) -> list[str]:
    return [p.name for p in partitions]


def test_day_partitions_are_utc_days_named_by_date() -> None:
    p = day(MIDNIGHT)
    assert p.name == "tw_attempts_p20261202"
    assert (p.from_us, p.to_us) == (us(MIDNIGHT), us(MIDNIGHT + DAY))
    assert p.to_us - p.from_us == DAY_US


def test_no_partitions_yet_creates_today_and_three_days_ahead() -> None:
    plan = plan_partitions(
        now_us=us(MIDNIGHT + timedelta(hours=15)), retention=30 * DAY, existing=()
    )
    assert names(plan.create) == [
        "tw_attempts_p20261202",
        "tw_attempts_p20261203",
        "tw_attempts_p20261204",
        "tw_attempts_p20261205",
    ]
    assert plan.drop == ()


@pytest.mark.parametrize(
    ("now", "first"),
    [
        (MIDNIGHT, "tw_attempts_p20261202"),  # midnight itself belongs to the new day
        (MIDNIGHT - timedelta(microseconds=1), "tw_attempts_p20261201"),
        (MIDNIGHT + DAY - timedelta(microseconds=1), "tw_attempts_p20261202"),
        (datetime(2026, 12, 31, 23, 59, tzinfo=UTC), "tw_attempts_p20261231"),
        (datetime(1969, 12, 31, 12, tzinfo=UTC), "tw_attempts_p19691231"),  # before the epoch
    ],
)
def test_today_follows_utc_day_boundaries(now: datetime, first: str) -> None:
    plan = plan_partitions(now_us=us(now), retention=30 * DAY, existing=(), days_ahead=0)
    assert names(plan.create) == [first]


def test_existing_partitions_are_not_created_again() -> None:
    existing = [day(MIDNIGHT), day(MIDNIGHT + DAY)]
    plan = plan_partitions(now_us=us(MIDNIGHT), retention=30 * DAY, existing=existing)
    assert names(plan.create) == ["tw_attempts_p20261204", "tw_attempts_p20261205"]
    assert plan_partitions(
        now_us=us(MIDNIGHT), retention=30 * DAY, existing=[*existing, *plan.create]
    ).empty


def test_a_wider_partition_covering_a_day_is_respected() -> None:
    weekly = Partition(name="ops_week", from_us=us(MIDNIGHT + DAY), to_us=us(MIDNIGHT + 8 * DAY))
    plan = plan_partitions(now_us=us(MIDNIGHT), retention=30 * DAY, existing=[weekly])
    assert names(plan.create) == ["tw_attempts_p20261202"]


def test_partitions_go_only_when_their_whole_day_has_expired() -> None:
    now = MIDNIGHT + timedelta(hours=6)
    old = [day(MIDNIGHT - n * DAY) for n in (32, 31, 30, 29)]  # Oct 31, Nov 1, Nov 2, Nov 3
    plan = plan_partitions(now_us=us(now), retention=30 * DAY, existing=old)
    # cutoff = Nov 2 06:00: Oct 31 and Nov 1 have ended; Nov 2 still holds rows inside the
    # retention; Nov 3 is young.
    assert names(plan.drop) == ["tw_attempts_p20261031", "tw_attempts_p20261101"]


def test_an_upper_bound_equal_to_the_cutoff_is_dropped() -> None:
    expired = day(MIDNIGHT - 31 * DAY)  # ends at MIDNIGHT - 30 days, exactly the cutoff
    plan = plan_partitions(now_us=us(MIDNIGHT), retention=30 * DAY, existing=[expired])
    assert plan.drop == (expired,)


@pytest.mark.parametrize(
    ("retention", "dropped"),
    [
        (timedelta(days=2, hours=12), ["tw_attempts_p20261128", "tw_attempts_p20261129"]),
        (timedelta(days=2, hours=11), ["tw_attempts_p20261128", "tw_attempts_p20261129"]),
        (timedelta(days=2, hours=13), ["tw_attempts_p20261128"]),
        (timedelta(hours=1), ["tw_attempts_p20261128", "tw_attempts_p20261129",
                              "tw_attempts_p20261130", "tw_attempts_p20261201"]),
    ],
)  # fmt: skip
def test_retention_need_not_be_whole_days(retention: timedelta, dropped: list[str]) -> None:
    now = MIDNIGHT + timedelta(hours=12)  # Dec 2, 12:00
    existing = [day(MIDNIGHT - n * DAY) for n in (4, 3, 2, 1)]  # Nov 28 .. Dec 1
    plan = plan_partitions(now_us=us(now), retention=retention, existing=existing)
    assert names(plan.drop) == dropped
    assert names(plan.create)[0] == "tw_attempts_p20261202"  # today is never dropped


def test_far_future_leftovers_are_kept_and_do_not_block_the_coming_days() -> None:
    # From a clock that once ran a year ahead: they will expire in their turn.
    future = [day(MIDNIGHT + 365 * DAY), day(MIDNIGHT + 366 * DAY)]
    plan = plan_partitions(now_us=us(MIDNIGHT), retention=30 * DAY, existing=future)
    assert plan.drop == ()
    assert len(plan.create) == 4


def test_nonsense_is_refused() -> None:
    with pytest.raises(ValueError, match="retention"):
        plan_partitions(now_us=0, retention=timedelta(0), existing=())
    with pytest.raises(ValueError, match="days_ahead"):
        plan_partitions(now_us=0, retention=DAY, existing=(), days_ahead=-1)


@given(
    now_us=st.integers(min_value=0, max_value=4_000_000_000 * 1_000_000),
    retention_us=st.integers(min_value=1, max_value=400 * DAY_US),
    ahead=st.integers(min_value=0, max_value=7),
)
def test_after_applying_a_plan_the_next_plan_is_empty(
    now_us: int, retention_us: int, ahead: int
) -> None:
    retention = timedelta(microseconds=retention_us)
    existing = [day_partition(now_us - now_us % DAY_US - n * DAY_US) for n in range(0, 40, 3)]
    plan = plan_partitions(now_us=now_us, retention=retention, existing=existing, days_ahead=ahead)
    after = [p for p in existing if p not in plan.drop] + list(plan.create)
    assert plan_partitions(
        now_us=now_us, retention=retention, existing=after, days_ahead=ahead
    ).empty
    cutoff_us = now_us - retention_us
    assert all(p.to_us <= cutoff_us for p in plan.drop)  # nothing inside the retention goes
    assert all(p.to_us > cutoff_us for p in after)
    assert any(p.from_us <= now_us < p.to_us for p in after)  # today is covered


@pytest.mark.parametrize(
    ("bound", "expected"),
    [
        ("FOR VALUES FROM ('100') TO ('200')", (100, 200)),
        ("FOR VALUES FROM ('-5') TO ('7')", (-5, 7)),
        ("FOR VALUES FROM (MINVALUE) TO ('10')", (-(2**63), 10)),
        ("FOR VALUES FROM ('10') TO (MAXVALUE)", (10, 2**63 - 1)),
        ("DEFAULT", None),
    ],
)
def test_postgresql_bounds_are_read(bound: str, expected: tuple[int, int] | None) -> None:
    found = parse_bound("p", bound)
    assert (None if found is None else (found.from_us, found.to_us)) == expected
