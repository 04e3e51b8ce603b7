"""DBOS Transact 3.4 on PostgreSQL: the `--pg-dsn` database (empty, the caller's) is DBOS's
system database; DBOS creates its tables there at launch.

Scenarios (`--scenario`):
  burst      N workflows enqueued on one queue with `delay_seconds` so all become due at T
             (SetEnqueueOptions; the queue's `worker_concurrency` and `polling_interval_sec`
             are `--worker-concurrency` and `--poll`). One process enqueues, then works them.
  precision  K every-second schedules created at runtime (`DBOS.create_schedule`, six-field
             cron "* * * * * *"), measured for `--seconds` after `--warmup-s`.
  failover   the burst in a child process of this script, SIGKILLed after `--kill-after`
             bodies; then a fresh process with the same executor id and application version:
             DBOS.launch() recovers the workflows the dead one had started (it re-runs them
             from the top; a body that ran but whose completion was not recorded runs twice),
             and the still-enqueued ones are dequeued as usual.

DBOS behaviours that shape the figures (from its source, 3.4.0): a queue is polled every
`polling_interval_sec` (default 1 s); each schedule is one thread that sleeps until the next
cron instant plus a random jitter of up to 10% of the sleep (at most 0.1 s for every-second
schedules) and then enqueues the workflow on the internal queue (polled every 1 s) or on
`queue_name`; new schedules are picked up by a thread polling the schedules table (fast for the
first seconds after launch, then every 30 s).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime
from typing import Any

import dbos as dbos_pkg
from _record import BodyLog, count_lines, kill_after, report, wait_until
from dbos import DBOS, DBOSConfig, SetEnqueueOptions, SetWorkflowID

QUEUE = "burst"
CRON_EVERY_SECOND = "* * * * * *"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=["burst", "precision", "failover"], required=True)
    p.add_argument("--body-log", required=True)
    p.add_argument("--pg-dsn", required=True, help="an empty database: DBOS's system database")
    p.add_argument("--jobs", type=int, default=10_000, help="burst: N; precision: K")
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--work-dir", default=".")
    p.add_argument("--budget-s", type=float, default=290.0)
    p.add_argument("--lead", type=float, default=40.0, help="burst: seconds from start to T")
    p.add_argument("--worker-concurrency", type=int, default=0, help="0: no limit (default)")
    p.add_argument("--poll", type=float, default=1.0, help="queue polling_interval_sec")
    p.add_argument(
        "--schedule-queue",
        choices=["internal", "own"],
        default="internal",
        help="precision: enqueue scheduled workflows on DBOS's internal queue or on ours (--poll)",
    )
    p.add_argument("--sys-db-pool-size", type=int, default=0, help="0: DBOS's default (20)")
    p.add_argument("--kill-after", type=int, default=3000)
    p.add_argument("--role", choices=["victim", "survivor"], help=argparse.SUPPRESS)
    p.add_argument("--at", type=float, help=argparse.SUPPRESS)
    p.add_argument("--started", type=float, help=argparse.SUPPRESS)
    return p.parse_args()


ARGS = parse_args()
LOG = BodyLog(ARGS.body_log)
RAN = [0]
RAN_LOCK = threading.Lock()
# What the report can already say, for the watchdog if the run overstays its budget.
STATE: dict[str, Any] = {}


def start_watchdog(args: argparse.Namespace, started: float) -> None:
    """At the budget's end: dump every thread's stack (where DBOS is stuck) to the work dir,
    print the report with what is known and an error, and exit."""

    def expire() -> None:
        with open(os.path.join(args.work_dir, "stacks.txt"), "w") as f:
            faulthandler.dump_traceback(file=f, all_threads=True)
        report(**config(args), **STATE, error="budget exceeded (stacks.txt in the work dir)")
        os._exit(3)

    timer = threading.Timer(max(1.0, started + args.budget_s - 5.0 - time.time()), expire)
    timer.daemon = True
    timer.start()


@DBOS.workflow()
def noop(key: str, scheduled_s: float) -> None:
    LOG.ran(key, scheduled_s)
    with RAN_LOCK:
        RAN[0] += 1


@DBOS.workflow()
def tick(scheduled_at: datetime, context: Any) -> None:
    LOG.ran(str(context), scheduled_at.timestamp())


def launch(args: argparse.Namespace) -> None:
    config: DBOSConfig = {
        "name": "twpeer",
        "system_database_url": args.pg_dsn,
        "log_level": "WARNING",
        # fixed, so a restarted process recovers the dead one's workflows (same executor,
        # same application version)
        "executor_id": "local",
        "application_version": "v1",
    }
    if args.sys_db_pool_size:
        config["sys_db_pool_size"] = args.sys_db_pool_size
    DBOS(config=config)
    DBOS.launch()
    DBOS.register_queue(
        QUEUE, worker_concurrency=args.worker_concurrency or None, polling_interval_sec=args.poll
    )


def deadline(args: argparse.Namespace, started: float) -> float:
    budget: float = args.budget_s
    return started + budget - 20.0


def enqueue_burst(n: int, at: float) -> float:
    queue = DBOS.retrieve_queue(QUEUE)
    assert queue is not None
    for i in range(n):
        key = f"b-{i}"
        # the workflow id is the key, so a re-run after recovery is visible as a duplicate
        with SetWorkflowID(key), SetEnqueueOptions(delay_seconds=max(0.0, at - time.time())):
            queue.enqueue(noop, key, at)
    return time.time()


def config(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "peer": "dbos",
        "version": dbos_pkg.__version__ if hasattr(dbos_pkg, "__version__") else "3.4.0",
        "worker_concurrency": args.worker_concurrency,
        "queue_polling_interval_s": args.poll,
        "sys_db_pool_size": args.sys_db_pool_size or "default (20)",
        "processes": 1,
    }


def run_burst(args: argparse.Namespace, started: float) -> dict[str, Any]:
    launch(args)
    at = float(int(time.time() + args.lead))
    STATE.update(t_s=at, jobs=args.jobs)
    t0 = time.time()
    done = enqueue_burst(args.jobs, at)
    print("measuring", flush=True)
    wait_until(lambda: RAN[0], args.jobs, deadline(args, started), poll_s=0.05)
    return {
        "t_s": at,
        "jobs": args.jobs,
        "enqueue_s": round(done - t0, 2),
        "enqueue_per_s": round(args.jobs / (done - t0), 1),
        "all_enqueued_before_t": done < at,
    }


def run_precision(args: argparse.Namespace) -> dict[str, Any]:
    launch(args)
    queue_name = QUEUE if args.schedule_queue == "own" else None
    t0 = time.time()
    STATE.update(jobs=args.jobs, schedule_queue=args.schedule_queue)
    for j in range(args.jobs):
        STATE["schedules_created"] = j
        try:
            DBOS.create_schedule(
                schedule_name=f"s{j}",
                workflow_fn=tick,
                schedule=CRON_EVERY_SECOND,
                context=f"s{j}",
                queue_name=queue_name,
            )
        except Exception as e:  # seen at K = 1,000: the pool is taken by the schedule threads
            STATE["error"] = f"create_schedule #{j} failed: {type(e).__name__}: {e}"[:300]
            report(**config(args), **STATE)
            os._exit(4)
    created = time.time()
    start = float(int(created + args.warmup_s) + 1)
    end = start + args.seconds
    STATE.update(window_start_s=start, window_end_s=end, schedules_created=args.jobs)
    print("measuring", flush=True)
    time.sleep(max(0.0, end + 5.0 - time.time()))
    return {
        "window_start_s": start,
        "window_end_s": end,
        "jobs": args.jobs,
        "create_schedules_s": round(created - t0, 2),
        "schedule_queue": args.schedule_queue,
    }


def run_victim(args: argparse.Namespace, started: float) -> None:
    launch(args)
    enqueue_burst(args.jobs, args.at)
    wait_until(lambda: RAN[0], args.jobs, deadline(args, started), poll_s=0.05)


def distinct_keys(path: str) -> int:
    with open(path, "rb") as f:
        return len({line.split(b" ", 1)[0] for line in f})


def run_survivor(args: argparse.Namespace, started: float) -> dict[str, Any]:
    t0 = time.time()
    launch(args)  # recovery of the dead executor's pending workflows starts here
    launched = time.time()
    while distinct_keys(args.body_log) < args.jobs and time.time() < deadline(args, started):
        time.sleep(0.2)
    time.sleep(2.0)  # let recovered re-runs still in flight write their lines
    return {"survivor_launch_s": round(launched - t0, 2), "survivor_ran": RAN[0]}


def run_failover(args: argparse.Namespace, started: float) -> dict[str, Any]:
    at = float(int(time.time() + args.lead))
    STATE.update(t_s=at, jobs=args.jobs)
    argv = [sys.executable, __file__, "--scenario", "failover", "--body-log", args.body_log,
            "--pg-dsn", args.pg_dsn, "--at", str(at), "--jobs", str(args.jobs),
            "--worker-concurrency", str(args.worker_concurrency), "--poll", str(args.poll),
            "--budget-s", str(args.budget_s), "--started", str(started)]  # fmt: skip
    victim = [*argv, "--role", "victim"]
    killed_at = kill_after(victim, args.body_log, args.kill_after, deadline(args, started))
    before = count_lines(args.body_log)
    out = subprocess.run([*argv, "--role", "survivor"], check=True, capture_output=True, text=True)
    return {
        "t_s": at,
        "jobs": args.jobs,
        "killed_at_s": killed_at,
        "bodies_before_kill": before,
        "survivor": json.loads(out.stdout.strip().splitlines()[-1]),
    }


def main(args: argparse.Namespace) -> None:
    started = args.started or time.time()
    if args.role is None:
        start_watchdog(args, started)
    if args.role == "victim":
        run_victim(args, started)
    elif args.role == "survivor":
        print(json.dumps(run_survivor(args, started)), flush=True)
    elif args.scenario == "burst":
        report(**config(args), **run_burst(args, started))
    elif args.scenario == "precision":
        report(**config(args), **run_precision(args))
    else:
        report(**config(args), **run_failover(args, started))
    sys.stdout.flush()
    # DBOS's background threads (queue pollers, schedule threads) do not stop on their own
    os._exit(0)


if __name__ == "__main__":
    main(ARGS)
