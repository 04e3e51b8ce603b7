"""Expected occurrences, computed without tickwork's code: cronsim for cron, arithmetic for
intervals. tickwork has its own local-time mapping (docs/cron-and-dst.md); the chaos windows
avoid DST transitions, where the two are known to differ."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim

from bench.chaos.load import JobPlan


def expected_ms(plan: JobPlan, start_ms: int, end_ms: int) -> list[int]:
    """The job's occurrences in [start_ms, end_ms] (both inclusive), as epoch milliseconds."""
    if plan.kind == "at":
        assert plan.at_ms is not None
        return [plan.at_ms]  # a one-shot fires at its instant, whatever the window
    if plan.kind == "every":
        assert plan.every_ms is not None
        assert plan.anchor_ms is not None
        first_k = max(0, -(-(start_ms - plan.anchor_ms) // plan.every_ms))
        out = []
        at = plan.anchor_ms + first_k * plan.every_ms
        while at <= end_ms:
            out.append(at)
            at += plan.every_ms
        return out
    assert plan.cron is not None
    zone = ZoneInfo(plan.timezone)
    # cronsim yields instants strictly after its start and drops sub-second parts.
    begin = datetime.fromtimestamp(start_ms / 1000, UTC).astimezone(zone) - timedelta(seconds=2)
    out = []
    for local in CronSim(plan.cron, begin):
        at = int(local.timestamp() * 1000)
        if at > end_ms:
            break
        if at >= start_ms:
            out.append(at)
    return out
