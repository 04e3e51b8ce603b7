"""The peers: one entry each. Adding a peer is adding an entry (and its harness script).

An entry names its harness (a script in harnesses/, run by the peer's venv python), the pinned
packages of that venv, the scenarios it supports and the resources the runner prepares for it:
a throwaway PostgreSQL database (`postgres=True`: the harness gets `--pg-dsn`), a Redis DB
number of the shared server, flushed before and after (`redis_db`: `--redis-url`), or its own
async context manager (`resources`) yielding extra harness arguments (e.g. a private server).

Every harness is called the same way (see bench/peers/peer_case.py):

    python harnesses/<harness> --scenario burst|precision|failover --jobs N --seconds S
        --warmup-s W --body-log FILE --work-dir DIR --budget-s B [--pg-dsn DSN]
        [--redis-url URL] [--kill-after K (failover)] [extra...]

prints `measuring` on a line of its own when its jobs exist and it starts to wait for them, and
ends with its report line (`_record.report`): `t_s` (burst: the instant T) or `window_start_s`
and `window_end_s` (precision: the whole seconds measured), and its configuration. A failover
(the burst, its scheduling process killed with SIGKILL once K bodies ran, then started again at
once) also reports `killed_at_s` and, where the harness knows it, `restarted_at_s`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers.registry_pg import PG_PEERS

# "sustained" is the precision workload at rising rates (sustained.py): a peer that has
# "precision" has it too.
SCENARIOS = ("burst", "precision", "sustained", "failover")
# What a peer supports when its entry does not say: the scenarios every harness has.
BASIC = ("burst", "precision")

# A custom resource: given the run's context, an async context manager yielding extra argv.
Resources = Callable[[Any], AbstractAsyncContextManager[list[str]]]


@dataclass(frozen=True, kw_only=True)
class Peer:
    name: str
    harness: str
    venv: str  # venv name: entries with the same packages share one
    packages: tuple[str, ...]  # pinned specs, installed with `uv pip install`
    scenarios: tuple[str, ...]
    postgres: bool = False
    redis_db: int | None = None  # 8-15 on the shared server
    resources: Resources | None = None
    # The most every-second jobs the peer is given in "precision" (None: the run's number).
    precision_jobs: int | None = None
    # "spread": the jobs' phases spread evenly over the second; "aligned": all at its top (for
    # a peer whose schedules cannot start inside a second). tickwork runs the same variant.
    precision_variant: str = "spread"
    fair: str = ""  # the configuration chosen and why, in words (JSON and report)


APSCHEDULER = ("apscheduler==3.11.3", "sqlalchemy==2.0.58", "psycopg[binary]==3.3.9")
# 4.0.0a6 with anyio 4.16 fails in AsyncpgEventBroker's notification callback
# (NoEventLoopError); anyio 4.4 works.
APSCHEDULER4 = ("apscheduler==4.0.0a6", "sqlalchemy==2.0.58", "asyncpg==0.30.0",
                "anyio==4.4.0", "sniffio==1.3.1")  # fmt: skip
CELERY = ("celery[redis]==5.7.0", "redis==8.2.0", "celery-redbeat==2.4.2")

PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer(
            name="apscheduler",
            harness="apscheduler3.py",
            venv="apscheduler",
            packages=APSCHEDULER,
            scenarios=SCENARIOS,
            postgres=True,
            fair=(
                "APScheduler 3.11 BackgroundScheduler, SQLAlchemyJobStore on PostgreSQL "
                "(psycopg 3), ThreadPoolExecutor of 10 threads (its default), coalesce off, "
                "misfire_grace_time None (run however late: the 1 s default would drop late "
                "fires silently)"
            ),
        ),
        Peer(
            name="apscheduler4",
            harness="apscheduler4.py",
            venv="apscheduler4",
            packages=APSCHEDULER4,
            scenarios=BASIC,
            postgres=True,
            fair=(
                "APScheduler 4.0.0a6 (pre-release) AsyncScheduler in role both, "
                "SQLAlchemyDataStore on PostgreSQL (asyncpg) with AsyncpgEventBroker (its "
                "documented PostgreSQL setup), max_concurrent_jobs 100 (default), async no-op "
                "body, misfire_grace_time None, CoalescePolicy.all"
            ),
        ),
        Peer(
            name="celery_eta",
            harness="celery_eta.py",
            venv="celery",
            packages=CELERY,
            scenarios=("burst", "failover"),
            redis_db=8,
            fair=(
                "Celery 5.7 apply_async(eta=T) on a Redis broker, one worker, prefork pool "
                "with concurrency = cores (its default), results ignored, no gossip/mingle/"
                "heartbeat; ETA tasks wait in the worker's memory (no every-second schedule "
                "without beat: burst only)"
            ),
        ),
        Peer(
            name="celery_redbeat",
            harness="celery_redbeat.py",
            venv="celery",
            packages=CELERY,
            scenarios=BASIC,
            redis_db=9,
            precision_variant="aligned",
            fair=(
                "Celery 5.7 beat with RedBeat 2.4 (schedule in Redis) and one worker (prefork, "
                "concurrency = cores); burst = RedBeat rrule entries with count=1 at T, "
                "precision = rrule SECONDLY entries (whole seconds only: aligned variant)"
            ),
        ),
    )
}


def _from_pg_peers(name: str) -> Peer:
    """A PostgreSQL-family peer of registry_pg.py in the runner's shape: its fields, and of its
    scenarios those the runner drives."""
    spec = {k: v for k, v in PG_PEERS[name].items() if k in Peer.__dataclass_fields__}
    spec["scenarios"] = tuple(s for s in spec["scenarios"] if s in SCENARIOS)
    return Peer(**spec)


# pg_cron stays out: its schedules are per minute (a precision run of its own, PEERS-pg.md).
PEERS.update({name: _from_pg_peers(name) for name in ("procrastinate", "dbos")})

HARNESSES = Path(__file__).resolve().parent / "harnesses"
