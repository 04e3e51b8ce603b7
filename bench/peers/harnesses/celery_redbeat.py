"""Celery 5 beat with RedBeat (the schedule in Redis) and one worker, on a Redis broker.

burst: N RedBeat entries with an rrule schedule of one occurrence (count=1) at T, the way
RedBeat expresses a one-shot; precision: J entries with an rrule SECONDLY schedule, which
starts on whole seconds only (every entry at the top of each second: the "aligned" variant).
Entries are saved straight into Redis before beat starts; `last_run_at` is the save time, so
the first occurrence is the rrule's first. One `celery beat -S ...` and one `celery worker`
(prefork, concurrency = cores: Celery's defaults), children of this script, stopped by pid.

The scheduled instant of each execution: beat does not send it, so the scheduler class is
RedBeat's with one override that adds it (the rrule's next occurrence after `last_run_at`, the
one beat is about to send) to the task's kwargs before RedBeat's own `maybe_due`.

This file is also the app module of both children (`celery -A celery_redbeat`).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from datetime import MINYEAR, UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import _celery
from _record import count_lines, harness_parser, report, wait_until
from celery import Celery
from redbeat import RedBeatScheduler, RedBeatSchedulerEntry
from redbeat.schedules import rrule

LEAD_S = 4.0  # T - end of the saves: beat and worker start in this time
SETTLE_S = 2.0

_url = os.environ.get("PEER_REDIS_URL", "redis://127.0.0.1:6379/9")
app = Celery("celery_redbeat", broker=_url)
app.conf.update(_celery.CONF, redbeat_redis_url=_url, redbeat_key_prefix="tw-peer:")


@app.task(name="noop")
def noop(key: str, scheduled_s: float = math.nan) -> None:
    """The job body: record that it ran (`scheduled_s` is added by StampingRedBeat)."""
    _celery.ran(key, scheduled_s)


class StampingRedBeat(RedBeatScheduler):  # type: ignore[misc]
    """RedBeat's scheduler, adding the occurrence's instant to the task it sends."""

    def maybe_due(self, entry: Any, **kwargs: Any) -> Any:
        since = entry.last_run_at or datetime(MINYEAR, 1, 2, tzinfo=UTC)
        due = entry.schedule.rrule.after(entry.schedule.maybe_make_aware(since))
        if due is not None:
            aware = entry.schedule.maybe_make_aware(due)
            entry.kwargs = {**(entry.kwargs or {}), "scheduled_s": aware.timestamp()}
        return super().maybe_due(entry, **kwargs)


def save_entries(prefix: str, jobs: int, schedule: Any) -> float:
    """Save `jobs` entries of `schedule`; returns the seconds it took."""
    started = time.monotonic()
    now = datetime.now(UTC)
    for i in range(jobs):
        entry = RedBeatSchedulerEntry(
            name=f"{prefix}{i}", task="noop", schedule=schedule, args=[f"{prefix}{i}"], app=app
        )
        entry.last_run_at = now  # so the first due instant is the rrule's first occurrence
        entry.save()
    return time.monotonic() - started


def save_rate() -> float:
    """Entries saved per second, measured with entries that are then deleted."""
    far = datetime.fromtimestamp(math.ceil(time.time()) + 86_400, UTC)
    took = save_entries("cal", 200, rrule("SECONDLY", dtstart=far, count=1))
    for i in range(200):
        RedBeatSchedulerEntry(name=f"cal{i}", app=app).delete()
    return 200 / took


def run(a: argparse.Namespace, end: float) -> dict[str, Any]:
    rate = save_rate()
    start_s = math.ceil(time.time() + a.jobs / rate * 1.3 + LEAD_S)
    first = datetime.fromtimestamp(start_s, UTC)
    if a.scenario == "burst":
        schedule = rrule("SECONDLY", dtstart=first, count=1)
        stop_s = end
    else:
        stop_s = start_s + a.warmup_s + a.seconds + SETTLE_S
        schedule = rrule("SECONDLY", dtstart=first, until=datetime.fromtimestamp(stop_s, UTC))
    save_entries("b" if a.scenario == "burst" else "p", a.jobs, schedule)
    beat_cmd = ("beat", "-l", "WARNING", "-S", "celery_redbeat.StampingRedBeat", "--pidfile=",
                "-s", str(Path(a.work_dir) / "beat-schedule"))  # fmt: skip
    worker = _celery.start("celery_redbeat", "worker", _celery.WORKER, a)
    beat = _celery.start("celery_redbeat", "beat", beat_cmd, a)
    try:
        _celery.wait_ready(app, worker)
        ready_before = round(start_s - time.time(), 2)
        print("measuring", flush=True)
        if a.scenario == "burst":
            completed = wait_until(lambda: count_lines(a.body_log), a.jobs, end, poll_s=0.1)
            return {"t_s": start_s, "ready_before_t_s": ready_before, "completed": completed,
                    "save_rate_per_s": round(rate, 1)}  # fmt: skip
        time.sleep(max(0.0, min(stop_s, end) - time.time()))  # the window is fixed in time
        window_start = start_s + math.ceil(a.warmup_s)
        return {"window_start_s": window_start, "window_end_s": window_start + a.seconds,
                "jobs": a.jobs, "ready_before_start_s": ready_before,
                "save_rate_per_s": round(rate, 1)}  # fmt: skip
    finally:
        _celery.stop(beat)
        _celery.stop(worker)


def main() -> None:
    a = harness_parser(("burst", "precision"), service="redis-url").parse_args()
    end = time.time() + a.budget_s
    app.conf.broker_url = app.conf.redbeat_redis_url = a.redis_url
    config = {"peer": "celery_redbeat", "celery": version("celery"),
              "celery_redbeat": version("celery-redbeat"), "redis_py": version("redis"),
              "broker": "redis", "pool": "prefork", "concurrency": os.cpu_count(),
              "beat_max_loop_interval_s": StampingRedBeat.max_interval,
              "schedule": "rrule SECONDLY (count=1 for the burst)"}  # fmt: skip
    try:
        report(**config, **run(a, end))
    except Exception as exc:  # the host reads the report line either way
        report(**config, error=f"{type(exc).__name__}: {exc}")
        raise


if __name__ == "__main__":
    main()
