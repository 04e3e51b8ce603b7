"""The PostgreSQL-family peers (Procrastinate, DBOS, pg_cron), for the lead to fold into
bench/peers/registry.py. Each harness takes the runner's common arguments (--scenario, --jobs,
--seconds, --warmup-s, --body-log, --work-dir, --budget-s, --pg-dsn) and prints `measuring`.
"""

from __future__ import annotations

from typing import Any

PSYCOPG = "psycopg[binary,pool]==3.3.9"

PG_PEERS: dict[str, dict[str, Any]] = {
    "procrastinate": {
        "harness": "procrastinate3.py",
        "version": "3.10.0",
        "packages": ("procrastinate==3.10.0", PSYCOPG),
        "scenarios": ("burst", "precision", "failover"),
        "postgres": True,  # an empty database; the harness applies Procrastinate's schema
        "fair": "",
    },
    "dbos": {
        "harness": "dbos3.py",
        "version": "3.4.0",
        "packages": ("dbos==3.4.0",),
        "scenarios": ("burst", "precision", "failover"),
        "postgres": True,  # used as DBOS's system database (DBOS creates its tables)
        "fair": "",
    },
    "pg_cron": {
        "harness": "pg_cron.py",
        "version": "1.4.2",
        "packages": (PSYCOPG,),
        "scenarios": ("precision",),
        "postgres": False,  # starts its own throwaway cluster (shared_preload_libraries)
        "fair": "",
    },
}
