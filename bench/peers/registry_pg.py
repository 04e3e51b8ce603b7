"""The PostgreSQL-family peers (Procrastinate, DBOS, pg_cron), for the lead to fold into
bench/peers/registry.py: one dict per peer with the fields of the runner's `Peer` (name,
harness, venv, packages, scenarios, postgres, precision_jobs, precision_variant, fair), plus
`extra_args` (harness arguments beyond the common ones) and `period_s` (pg_cron's schedules are
per minute: the precision analysis must expect jobs x seconds / 60 occurrences).

Every harness takes the runner's common arguments (--scenario, --jobs, --seconds, --warmup-s,
--body-log, --work-dir, --budget-s, --pg-dsn), prints `measuring`, and ends with its report
line. `failover` is an extra scenario the harness runs by itself (kill -9 mid-burst, restart);
its body log and report (`t_s`, `jobs`) have the burst's shape.
"""

from __future__ import annotations

from typing import Any

PSYCOPG = "psycopg[binary,pool]==3.3.9"

PG_PEERS: dict[str, dict[str, Any]] = {
    "procrastinate": {
        "name": "procrastinate",
        "harness": "procrastinate3.py",
        "venv": "procrastinate-3.10.0",
        "packages": ("procrastinate==3.10.0", PSYCOPG),
        "scenarios": ("burst", "precision", "failover"),
        "postgres": True,  # an empty database; the harness applies Procrastinate's schema
        "precision_jobs": None,  # 1,000 are accepted; it falls behind (see PEERS-pg.md)
        "precision_variant": "aligned",  # cron instants: every job at the top of the second
        "period_s": 1,
        "extra_args": (),
        "fair": (
            "Procrastinate 3.10, one worker (run_worker_async) with concurrency 10 (async "
            "no-op task), fetch_job_polling_interval 0.5 s (default 5 s: a job deferred with "
            "schedule_at is NOTIFYed at defer time, so only a poll finds it at T), LISTEN/"
            "NOTIFY on, psycopg pool max 20; burst = batch_defer_async(schedule_at=T) in "
            "batches of 1,000; precision = @app.periodic with a six-field every-second cron"
        ),
    },
    "dbos": {
        "name": "dbos",
        "harness": "dbos3.py",
        "venv": "dbos-3.4.0",
        "packages": ("dbos==3.4.0",),
        "scenarios": ("burst", "precision", "failover"),
        "postgres": True,  # used as DBOS's system database (DBOS creates its tables)
        "precision_jobs": 100,  # 1,000 exhausts the default 20-connection pool (PEERS-pg.md)
        "precision_variant": "aligned",
        "period_s": 1,
        "extra_args": (),
        "fair": (
            "DBOS Transact 3.4, one process; burst = enqueue with delay_seconds on a queue "
            "with DBOS's defaults (polling_interval_sec 1 s, no worker_concurrency limit, "
            "unbounded executor threads, system-db pool 20); precision = DBOS.create_schedule "
            "every second ('* * * * * *') at runtime, on the internal queue"
        ),
    },
    "pg_cron": {
        "name": "pg_cron",
        "harness": "pg_cron.py",
        "venv": "pg_cron-1.4.2",
        "packages": (PSYCOPG,),  # the harness's client; pg_cron itself is the Debian package
        "scenarios": ("precision",),
        "postgres": False,  # starts its own throwaway cluster (shared_preload_libraries)
        "precision_jobs": None,
        "precision_variant": "aligned",
        "period_s": 60,  # pg_cron 1.4 has no second schedules
        "extra_args": ("--minutes", "3"),
        "fair": (
            "pg_cron 1.4.2 (Debian postgresql-15-cron) on a throwaway PostgreSQL 15 cluster "
            "with pg_cron preloaded, its defaults otherwise (cron.max_running_jobs 32, a libpq "
            "connection per run); K jobs '* * * * *' (no second schedules before 1.5) for 3 "
            "minutes; the body is an INSERT of clock_timestamp()"
        ),
    },
}
