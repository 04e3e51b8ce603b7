"""preview_schedule: the fires of any schedule, as the scheduler steps through them, and why
the list ends; preview_query_schedule: the schedule of a preview's flat parameters."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.domain.jobs import AtTrigger, CronTrigger, EveryTrigger, Schedule
from tickwork.errors import InvalidInput
from tickwork.timing import EndReason, first_occurrence, next_occurrence, preview_schedule
from tickwork.timing.preview import MAX_PASSED_OVER, preview_cron, schedule_end
from tickwork.timing.preview_query import preview_query_schedule

A = datetime(2026, 1, 1, tzinfo=UTC)
US = timedelta(microseconds=1)


def s(seconds: float) -> datetime:
    return A + timedelta(seconds=seconds)


def every(interval_s: float = 30, anchor: datetime = A, **options: object) -> Schedule:
    trigger = EveryTrigger(interval_ms=int(interval_s * 1000), anchor=anchor)
    return replace(Schedule(trigger=trigger), **options)  # type: ignore[arg-type]


def cron(expr: str, tz: str = "UTC", **options: object) -> Schedule:
    return replace(Schedule(trigger=CronTrigger(expr=expr, timezone=tz)), **options)  # type: ignore[arg-type]


def at(when: datetime, **options: object) -> Schedule:
    return replace(Schedule(trigger=AtTrigger(at=when)), **options)  # type: ignore[arg-type]


# --- tables ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schedule", "after", "count", "kwargs", "expected", "ends"),
    [
        pytest.param(every(), s(0), 3, {}, [s(0), s(30), s(60)], None, id="every-anchor-now"),
        pytest.param(every(), s(1), 2, {}, [s(30), s(60)], None, id="every-after-anchor"),
        pytest.param(
            every(anchor=s(100)), s(0), 2, {}, [s(100), s(130)], None, id="every-future-anchor"
        ),
        pytest.param(every(start_at=s(45)), s(0), 2, {}, [s(60), s(90)], None, id="every-start-at"),
        pytest.param(
            every(end_at=s(60)), s(0), 5, {}, [s(0), s(30), s(60)], "end_at", id="every-end-at"
        ),
        pytest.param(
            every(end_at=s(60)), s(0), 3, {}, [s(0), s(30), s(60)], "end_at", id="end-at-exact"
        ),
        pytest.param(
            every(end_at=s(90)), s(0), 3, {}, [s(0), s(30), s(60)], None, id="end-at-after-list"
        ),
        pytest.param(
            every(max_runs=2), s(0), 5, {}, [s(0), s(30)], "max_runs", id="every-max-runs"
        ),
        pytest.param(
            every(max_runs=5),
            s(0),
            5,
            {"fired_count": 3},
            [s(0), s(30)],
            "max_runs",
            id="max-runs-counts-fired",
        ),
        pytest.param(
            every(max_runs=3), s(0), 5, {"fired_count": 3}, [], "max_runs", id="max-runs-spent"
        ),
        pytest.param(
            every(max_runs=2, end_at=s(30)),
            s(0),
            5,
            {},
            [s(0), s(30)],
            "max_runs",
            id="max-runs-wins-a-tie-with-end-at",
        ),
        pytest.param(
            every(anchor=s(-60)),
            s(-31),
            2,
            {"first": s(-30)},
            [s(-30), s(0)],
            None,
            id="first-is-listed",
        ),
        pytest.param(
            every(max_runs=4),
            s(40),
            5,
            {"first": s(0)},
            [s(60), s(90)],
            "max_runs",
            id="fires-passed-over-count-against-max-runs",
        ),
        pytest.param(at(s(100)), s(0), 3, {}, [s(100)], "one_shot", id="at"),
        pytest.param(at(s(-100)), s(0), 3, {}, [s(-100)], "one_shot", id="at-late-fires-once"),
        pytest.param(cron("0 9 * * *"), s(0), 2, {}, [s(9 * 3600), s(33 * 3600)], None, id="cron"),
        pytest.param(
            cron("0 9 * * *", start_at=s(10 * 3600), end_at=s(40 * 3600)),
            s(0),
            5,
            {},
            [s(33 * 3600)],
            "end_at",
            id="cron-window",
        ),
        pytest.param(cron("0 9 * * *", end_at=s(3600)), s(0), 5, {}, [], "end_at", id="cron-ended"),
    ],
)
def test_preview_schedule(
    schedule: Schedule,
    after: datetime,
    count: int,
    kwargs: dict[str, object],
    expected: list[datetime],
    ends: str | None,
) -> None:
    preview = preview_schedule(schedule, after, count, **kwargs)  # type: ignore[arg-type]
    assert [e.utc for e in preview.fires] == expected
    assert (None if preview.ends is None else preview.ends.reason) == ends


def test_every_and_at_entries_are_in_utc_without_notes() -> None:
    preview = preview_schedule(every(end_at=s(30)), s(0), 5)
    assert [(e.local, e.note) for e in preview.fires] == [(s(0), None), (s(30), None)]
    assert preview.ends is not None
    assert "end_at (2026-01-01T00:00:30Z)" in preview.ends.message


def test_a_late_one_shot_says_so() -> None:
    [late] = preview_schedule(at(s(-100)), s(0), 1).fires
    assert late.note is not None
    assert "already past" in late.note
    [on_time] = preview_schedule(at(s(100)), s(0), 1).fires
    assert on_time.note is None


def test_max_runs_messages_say_which_fire_is_the_last() -> None:
    ends = preview_schedule(every(max_runs=2), s(0), 5).ends
    assert ends is not None
    assert ends.message == (
        "the last fire listed is fire number 2 (max_runs 2): the job then completes"
    )
    spent = preview_schedule(every(max_runs=2), s(0), 5, fired_count=2).ends
    assert spent is not None
    assert spent.message == "max_runs 2 is reached: no fire is left"


def test_cron_fires_keep_their_dst_notes_and_local_time() -> None:
    schedule = cron("30 2 * * *", "Europe/Berlin", end_at=datetime(2026, 3, 30, 1, tzinfo=UTC))
    after = datetime(2026, 3, 28, tzinfo=UTC)
    preview = preview_schedule(schedule, after, 5)
    assert preview.fires == preview_cron("30 2 * * *", "Europe/Berlin", after, 3)
    assert [e.local.isoformat() for e in preview.fires][1] == "2026-03-29T03:00:00+02:00"
    assert preview.fires[1].note is not None
    assert "02:30 does not exist" in preview.fires[1].note
    assert preview.ends is not None
    assert preview.ends.reason is EndReason.END_AT


def test_cron_notes_from_a_job_next_run_at() -> None:
    schedule = cron("30 2 * * *", "Europe/Berlin")
    first = datetime(2026, 3, 29, 1, tzinfo=UTC)  # the fire moved to the 03:00 jump
    preview = preview_schedule(schedule, first - US, 2, first=first)
    assert [e.utc for e in preview.fires] == [first, datetime(2026, 3, 30, 0, 30, tzinfo=UTC)]
    assert preview.fires[0].note is not None
    assert "does not exist" in preview.fires[0].note


def test_why_a_schedule_ends() -> None:
    assert schedule_end(at(A)).reason is EndReason.ONE_SHOT
    assert schedule_end(every(end_at=s(60))).reason is EndReason.END_AT
    # a cron with no end only ends where cronsim's 50-year search finds nothing
    assert schedule_end(cron("* * * * *")).reason is EndReason.HORIZON


def test_counting_too_many_passed_fires_is_refused_naming_after() -> None:
    schedule = every(1, max_runs=10**9)
    far = s(MAX_PASSED_OVER + 5)
    with pytest.raises(InvalidInput) as caught:
        preview_schedule(schedule, far, 1, first=s(0))
    assert caught.value.field == "after"
    assert caught.value.code == "after_too_far"
    # without max_runs nothing needs counting
    assert preview_schedule(every(1), far, 1, first=s(0)).fires[0].utc == s(MAX_PASSED_OVER + 6)


@pytest.mark.parametrize(
    ("after", "count", "field"),
    [(A, 0, "count"), (A, 1001, "count"), (A, True, "count"), (A.replace(tzinfo=None), 1, "after")],
)
def test_bad_count_or_after(after: datetime, count: int, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        preview_schedule(every(), after, count)
    assert caught.value.field == field


# --- properties ------------------------------------------------------------------------------


def walk(schedule: Schedule, first: datetime | None, count: int) -> list[datetime]:
    """What the scheduler fires, one next_occurrence at a time (no misfires)."""
    fires: list[datetime] = []
    while first is not None and len(fires) < count:
        fires.append(first)
        first = next_occurrence(schedule, first)
    return fires


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    kind = draw(st.sampled_from(["every", "cron", "at"]))
    offset = draw(st.integers(-86_400, 86_400))
    if kind == "every":
        interval = draw(st.integers(1, 7200))
        schedule = every(interval, anchor=s(offset))
    elif kind == "cron":
        expr = draw(st.sampled_from(["*/7 * * * *", "30 2 * * *", "0 */5 * * *", "15 9 * * 1-5"]))
        tz = draw(st.sampled_from(["UTC", "Europe/Berlin", "America/New_York"]))
        schedule = cron(expr, tz)
    else:
        schedule = at(s(offset))
    bound = st.none() | st.integers(-86_400, 5 * 86_400).map(s)
    start_at, end_at = draw(bound), draw(bound)
    if start_at is not None and end_at is not None and end_at <= start_at:
        start_at, end_at = end_at - timedelta(seconds=1), start_at
    max_runs = draw(st.none() | st.integers(1, 40))
    return replace(schedule, start_at=start_at, end_at=end_at, max_runs=max_runs)


@settings(max_examples=150, deadline=None)
@given(
    schedule=schedules(),
    now=st.integers(-86_400, 3 * 86_400).map(s),
    count=st.integers(1, 30),
    fired=st.integers(0, 45),
)
def test_a_new_job_fires_what_next_occurrence_walks(
    schedule: Schedule, now: datetime, count: int, fired: int
) -> None:
    remaining = None if schedule.max_runs is None else max(schedule.max_runs - fired, 0)
    limit = count if remaining is None else min(count, remaining)
    walked = walk(schedule, first_occurrence(schedule, now), limit + 1)
    preview = preview_schedule(schedule, now, count, fired_count=fired)
    assert [e.utc for e in preview.fires] == walked[:limit]
    more = len(walked) > limit
    if remaining is not None and remaining <= count and remaining <= len(walked):
        assert preview.ends is not None
        assert preview.ends.reason is EndReason.MAX_RUNS
    elif more:
        assert preview.ends is None
    else:
        assert preview.ends is not None
        assert preview.ends.reason is not EndReason.MAX_RUNS


@settings(max_examples=100, deadline=None)
@given(
    schedule=schedules(),
    now=st.integers(-86_400, 3 * 86_400).map(s),
    skip=st.integers(0, 20),
    count=st.integers(1, 20),
)
def test_a_job_preview_after_an_instant_lists_the_rest_of_the_same_walk(
    schedule: Schedule, now: datetime, skip: int, count: int
) -> None:
    first = first_occurrence(schedule, now)
    if first is None:
        return
    walked = walk(schedule, first, 60)
    cut = walked[min(skip, len(walked) - 1)]
    rest = [f for f in walked if f > cut]
    if schedule.max_runs is not None:
        rest = [f for f in rest if walked.index(f) < schedule.max_runs]
    preview = preview_schedule(schedule, cut, count, first=first)
    assert [e.utc for e in preview.fires] == rest[:count]


@settings(max_examples=60, deadline=None)
@given(
    expr=st.sampled_from(["*/20 * * * *", "30 2 * * *", "0 * * * *", "15,45 1-3 * * *"]),
    tz=st.sampled_from(["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    after=st.builds(
        lambda day, seconds: (
            datetime.fromisoformat(day).replace(tzinfo=UTC) + timedelta(seconds=seconds)
        ),
        st.sampled_from(["2026-03-07", "2026-03-28", "2026-04-04", "2026-10-24", "2026-10-31"]),
        st.integers(0, 2 * 86_400),
    ),
    count=st.integers(1, 20),
)
def test_an_open_cron_schedule_previews_exactly_as_its_expression(
    expr: str, tz: str, after: datetime, count: int
) -> None:
    """Notes included: what GET /v1/preview answered for a cron before it took any schedule."""
    assert preview_schedule(cron(expr, tz), after, count).fires == preview_cron(
        expr, tz, after, count
    )


# --- preview_query_schedule --------------------------------------------------------------------


def test_query_every_is_anchored_at_start_at_else_at_the_start() -> None:
    built = preview_query_schedule(start=s(7), every="PT30S")
    assert built.trigger == EveryTrigger(interval_ms=30_000, anchor=s(7))
    built = preview_query_schedule(start=s(7), every="30", start_at=s(100))
    assert built.trigger == EveryTrigger(interval_ms=30_000, anchor=s(100))
    built = preview_query_schedule(start=s(7), every="PT1M", anchor=s(-5), max_runs=3)
    assert built.trigger == EveryTrigger(interval_ms=60_000, anchor=s(-5))
    assert built.max_runs == 3


def test_query_cron_defaults_to_utc_and_at_is_kept() -> None:
    assert preview_query_schedule(start=A, cron="@daily").trigger == CronTrigger(
        expr="@daily", timezone="UTC"
    )
    assert preview_query_schedule(start=A, at=s(5)).trigger == AtTrigger(at=s(5))


@pytest.mark.parametrize(
    ("params", "field", "code"),
    [
        ({}, "schedule", "schedule_kind"),
        ({"cron": "* * * * *", "every": "PT1S"}, "schedule", "schedule_kind"),
        ({"every": "PT1S", "at": A}, "schedule", "schedule_kind"),
        ({"every": "PT1S", "timezone": "UTC"}, "schedule.timezone", "schedule_kind"),
        ({"at": A, "anchor": A}, "schedule.anchor", "schedule_kind"),
        ({"every": "soon"}, "schedule.every", "invalid_duration"),
        ({"cron": "0 0 30 2 *"}, "schedule.cron", "invalid_cron"),
        ({"every": "PT1S", "start_at": s(10), "end_at": s(5)}, "schedule.end_at", "invalid_window"),
        ({"at": s(1), "end_at": s(0)}, "schedule.at", "never_fires"),
        ({"every": "PT1S", "max_runs": 0}, "max_runs", "invalid"),
    ],
)
def test_query_mistakes_name_the_field(params: dict[str, object], field: str, code: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        preview_query_schedule(start=A, **params)  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.code) == (field, code)
