"""The chaos oracle (cronsim + arithmetic) and the job mix it judges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bench.chaos.load import JobPlan, build_load
from bench.chaos.oracle import expected_ms

from tickwork.domain.jobs import AtTrigger, CronTrigger, EveryTrigger, MisfirePolicy, Schedule
from tickwork.timing.triggers import next_occurrence


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def test_every_second_cron_includes_both_ends_of_the_window() -> None:
    plan = JobPlan(name="c", kind="cron", cron="* * * * * *")
    got = expected_ms(plan, ms("2026-12-02T10:00:00+00:00"), ms("2026-12-02T10:00:10+00:00"))
    assert got == [ms("2026-12-02T10:00:00+00:00") + 1000 * i for i in range(11)]


def test_even_minutes_in_kathmandu_are_odd_minutes_in_utc() -> None:
    # UTC+5:45: local minute = UTC minute + 45, so local even minutes are odd UTC minutes.
    plan = JobPlan(name="k", kind="cron", cron="*/5 */2 * * * *", timezone="Asia/Kathmandu")
    got = expected_ms(plan, ms("2026-12-02T00:00:00+00:00"), ms("2026-12-02T00:04:00+00:00"))
    minutes = {datetime.fromtimestamp(t / 1000, UTC).minute for t in got}
    assert minutes == {1, 3}
    assert len(got) == 24


def test_interval_counts_from_the_anchor_inside_the_window() -> None:
    plan = JobPlan(name="e", kind="every", every_ms=1500, anchor_ms=1_000)
    assert expected_ms(plan, 5_000, 10_000) == [5_500, 7_000, 8_500, 10_000]
    assert expected_ms(plan, 0, 2_600) == [1_000, 2_500]  # nothing before the anchor


def test_the_load_is_replayable_from_its_seed() -> None:
    a = build_load(3, 1_000_000, 1_100_000)
    assert a == build_load(3, 1_000_000, 1_100_000)
    assert a != build_load(4, 1_000_000, 1_100_000)
    kinds = {plan.kind for plan in a}
    assert kinds == {"cron", "every", "at"}


def test_the_oracle_agrees_with_tickworks_own_schedule_arithmetic() -> None:
    # Two implementations that share no code: a disagreement would make every chaos run fail.
    start = ms("2026-12-02T13:58:30.000+00:00")
    end = start + 150_000
    for plan in build_load(11, start, end):
        schedule = _schedule(plan, start, end)
        ours: list[int] = []
        after = datetime.fromtimestamp(start / 1000, UTC) - timedelta(microseconds=1)
        while (found := next_occurrence(schedule, after)) is not None:
            ours.append(int(found.timestamp() * 1000))
            after = found
        assert ours == expected_ms(plan, start, end), plan


def _schedule(plan: JobPlan, start: int, end: int) -> Schedule:
    def dt(value: int) -> datetime:
        return datetime.fromtimestamp(value / 1000, UTC)

    if plan.kind == "at":
        assert plan.at_ms is not None
        return Schedule(trigger=AtTrigger(at=dt(plan.at_ms)), misfire=MisfirePolicy.FIRE_ALL)
    if plan.kind == "every":
        assert plan.every_ms is not None
        assert plan.anchor_ms is not None
        trigger: CronTrigger | EveryTrigger = EveryTrigger(
            interval_ms=plan.every_ms, anchor=dt(plan.anchor_ms)
        )
    else:
        assert plan.cron is not None
        trigger = CronTrigger(expr=plan.cron, timezone=plan.timezone)
    return Schedule(trigger=trigger, start_at=dt(start), end_at=dt(end))
