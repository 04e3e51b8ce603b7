"""APScheduler 4 (pre-release 4.0.0a6): AsyncScheduler, SQLAlchemyDataStore on PostgreSQL
(asyncpg) and AsyncpgEventBroker on the same engine, the setup its docs show for PostgreSQL.

burst: N schedules with a DateTrigger at T; precision: J IntervalTrigger(seconds=1) schedules,
their start times spread evenly over one second. Schedules are added before the scheduler
starts processing (T comes after the adds, from a calibration of their rate). One scheduler
in role "both" (it processes schedules and runs jobs), max_concurrent_jobs=100 (default),
misfire_grace_time None and CoalescePolicy.all (every fire runs, however late), the body an
async function (run in the event loop: no thread pool hop). The scheduled instant comes from
`current_job.get().scheduled_fire_time`, which APScheduler 4 gives every job.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from typing import Any

from _record import BodyLog, await_until, harness_parser, report
from apscheduler import AsyncScheduler, CoalescePolicy, current_job
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy.ext.asyncio import create_async_engine

CALIBRATION_SCHEDULES = 200
LEAD_S = 3.0  # T - estimated end of the adds
SETTLE_S = 2.0

_body: BodyLog | None = None
_count = 0


async def noop(key: str) -> None:
    """The job body: record that it ran (key, scheduled instant, now)."""
    global _count
    assert _body is not None
    scheduled = current_job.get().scheduled_fire_time
    _body.ran(key, scheduled.timestamp() if scheduled else math.nan)
    _count += 1


async def add_rate(scheduler: AsyncScheduler) -> float:
    """Schedules added per second, measured with far-future ones that are then removed."""
    far = datetime.now(UTC) + timedelta(days=1)
    started = time.monotonic()
    for i in range(CALIBRATION_SCHEDULES):
        await scheduler.add_schedule(noop, DateTrigger(far), id=f"cal{i}", args=["cal"])
    rate = CALIBRATION_SCHEDULES / (time.monotonic() - started)
    for i in range(CALIBRATION_SCHEDULES):
        await scheduler.remove_schedule(f"cal{i}")
    return rate


async def run(scheduler: AsyncScheduler, a: argparse.Namespace, end: float) -> dict[str, Any]:
    rate = await add_rate(scheduler)
    start = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S)
    stop = start + a.warmup_s + a.seconds + SETTLE_S
    common = {"misfire_grace_time": None, "coalesce": CoalescePolicy.all}
    for i in range(a.jobs):
        if a.scenario == "burst":
            trigger: Any = DateTrigger(datetime.fromtimestamp(start, UTC))
        else:
            trigger = IntervalTrigger(seconds=1, start_time=datetime.fromtimestamp(
                start + i / a.jobs, UTC), end_time=datetime.fromtimestamp(stop, UTC))  # fmt: skip
        key = f"{a.scenario[0]}{i}"
        await scheduler.add_schedule(noop, trigger, id=key, args=[key], **common)
    added_before = round(start - time.time(), 2)
    await scheduler.start_in_background()
    print("measuring", flush=True)
    found: dict[str, Any] = {"added_before_t_s": added_before, "add_rate_per_s": round(rate, 1)}
    if a.scenario == "burst":
        completed = await await_until(lambda: _count, a.jobs, end, poll_s=0.05)
        return found | {"t_s": start, "completed": completed}
    await asyncio.sleep(max(0.0, min(stop, end) - time.time()))  # the window is fixed in time
    window_start = start + math.ceil(a.warmup_s)
    return found | {"window_start_s": window_start, "window_end_s": window_start + a.seconds,
                    "jobs": a.jobs}  # fmt: skip


async def main() -> None:
    global _body
    a = harness_parser(("burst", "precision"), service="pg-dsn").parse_args()
    end = time.time() + a.budget_s
    _body = BodyLog(a.body_log)
    config = {"peer": "apscheduler4", "apscheduler": version("apscheduler"),
              "sqlalchemy": version("sqlalchemy"), "asyncpg": version("asyncpg"),
              "scheduler": "AsyncScheduler(role=both)", "max_concurrent_jobs": 100,
              "data_store": "SQLAlchemyDataStore(postgresql+asyncpg)",
              "event_broker": "AsyncpgEventBroker", "misfire_grace_time": None,
              "coalesce": "all"}  # fmt: skip
    engine = create_async_engine(a.pg_dsn.replace("postgresql://", "postgresql+asyncpg://", 1))
    try:
        data_store = SQLAlchemyDataStore(engine)
        broker = AsyncpgEventBroker.from_async_sqla_engine(engine)
        async with AsyncScheduler(data_store, broker, max_concurrent_jobs=100) as scheduler:
            found = await run(scheduler, a, end)
            await scheduler.stop()
        report(**config, **found)
    except Exception as exc:  # the host reads the report line either way
        report(**config, error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        await engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
