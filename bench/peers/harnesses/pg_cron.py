"""pg_cron (Debian's postgresql-15-cron) on a THROWAWAY PostgreSQL 15 cluster of its own.

pg_cron must be in shared_preload_libraries, a server setting, so this script never touches a
shared server: it runs initdb in a fresh temporary directory, starts that cluster on a free
port (127.0.0.1 and a private socket directory, run as the `postgres` OS user when started as
root) with `shared_preload_libraries=pg_cron`, and stops and deletes it at the end, whatever
happens. Everything else is pg_cron's default (cron.max_running_jobs 32, one libpq connection
per job run to localhost, cron.use_background_workers off).

Scenario `precision` only (pg_cron has no one-shot jobs): K jobs on the same schedule whose
command records clock_timestamp() into a table; afterwards the table becomes the body log.
pg_cron 1.4 schedules are whole minutes (the "N seconds" interval syntax came in 1.5; probed at
run time and reported as `second_schedules`), so the jobs run '* * * * *' and the window is
`--minutes` whole minutes. Each run's scheduled time is the minute boundary it belongs to
(date_trunc('minute') of its start): unambiguous while a run starts less than a minute late,
and checked (each job should appear once per minute; `runs_per_job_minute_max` says).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from typing import Any

import psycopg
from _record import report

PGBIN = "/usr/lib/postgresql/15/bin"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", choices=["precision"], required=True)
    p.add_argument("--body-log", required=True)
    p.add_argument("--jobs", type=int, default=100, help="K jobs, all every minute")
    p.add_argument("--seconds", type=int, default=0, help="ignored: see --minutes")
    p.add_argument("--minutes", type=int, default=3, help="whole minutes measured")
    p.add_argument("--warmup-s", type=float, default=5.0, help="at least this before the window")
    p.add_argument("--work-dir", default=".")
    p.add_argument("--budget-s", type=float, default=290.0)
    p.add_argument("--pg-dsn", help="ignored: pg_cron gets a private cluster")
    return p.parse_args()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ThrowawayCluster:
    """initdb + pg_ctl start in a temp dir; `stop` stops it by pg_ctl and removes the dir."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="twpeer_pgcron_")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.started = False
        # PostgreSQL refuses to run as root: run its tools as the postgres OS user then.
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)

    def run(self, *argv: str) -> None:
        subprocess.run([*self.as_user, *argv], check=True, capture_output=True)

    def start(self) -> None:
        self.run(f"{PGBIN}/initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self.dir}"
            " -c shared_preload_libraries=pg_cron -c cron.database_name=postgres"
            " -c fsync=on -c log_min_messages=warning"
        )
        log = os.path.join(self.dir, "server.log")
        self.run(f"{PGBIN}/pg_ctl", "-D", self.data, "-o", options, "-l", log, "-w", "start")
        self.started = True

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        if self.started:
            self.run(f"{PGBIN}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


def probe_second_schedules(conn: psycopg.Connection[Any]) -> bool:
    try:
        with conn.transaction():
            conn.execute("SELECT cron.schedule('probe', '1 seconds', 'SELECT 1')")
            conn.execute("SELECT cron.unschedule('probe')")
        return True
    except psycopg.Error:
        return False


def schedule_jobs(conn: psycopg.Connection[Any], k: int) -> None:
    conn.execute("CREATE TABLE tw_body (job int NOT NULL, ran timestamptz NOT NULL)")
    for j in range(k):
        command = f"INSERT INTO tw_body VALUES ({j}, clock_timestamp())"
        conn.execute("SELECT cron.schedule(%s, '* * * * *', %s)", (f"j{j}", command))


def write_body_log(conn: psycopg.Connection[Any], path: str) -> Counter[tuple[int, float]]:
    """One body-log line per recorded run; returns runs per (job, minute) for the check."""
    rows = conn.execute(
        "SELECT job, extract(epoch FROM date_trunc('minute', ran))::float8,"
        " extract(epoch FROM ran)::float8 FROM tw_body ORDER BY ran"
    ).fetchall()
    # The body ran inside the server, so its time is the recorded one, not BodyLog's "now":
    # the same line format as _record.BodyLog, written directly.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    per_job_minute: Counter[tuple[int, float]] = Counter()
    for job, minute, ran in rows:
        os.write(fd, f"j{job} {round(minute * 1e6)} {round(ran * 1e6)}\n".encode())
        per_job_minute[(job, minute)] += 1
    os.close(fd)
    return per_job_minute


def main() -> None:
    args = parse_args()
    started = time.time()
    cluster = ThrowawayCluster()
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_cron")
            version = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'pg_cron'"
            ).fetchone()
            seconds_ok = probe_second_schedules(conn)
            schedule_jobs(conn, args.jobs)
            scheduled = time.time()
            start = (int(scheduled + args.warmup_s) // 60 + 1) * 60.0
            end = start + 60.0 * args.minutes
            if end + 10 > started + args.budget_s:
                raise SystemExit("the window does not fit in --budget-s; use fewer --minutes")
            print("measuring", flush=True)
            # the last minute's runs get up to 8 s to start (later ones would count as missed)
            time.sleep(max(0.0, end + 8.0 - time.time()))
            conn.execute("SELECT cron.unschedule(jobid) FROM cron.job")
            per_job_minute = write_body_log(conn, args.body_log)
            failed = conn.execute(
                "SELECT count(*) FROM cron.job_run_details WHERE status <> 'succeeded'"
            ).fetchone()
    finally:
        cluster.stop()
    report(
        peer="pg_cron",
        version=version[0] if version else None,
        second_schedules=seconds_ok,
        cron="* * * * *",
        period_s=60,
        max_running_jobs=32,
        window_start_s=start,
        window_end_s=end,
        jobs=args.jobs,
        expected=args.jobs * args.minutes,
        runs_per_job_minute_max=max(per_job_minute.values(), default=0),
        runs_not_succeeded=failed[0] if failed else None,
        server="throwaway PostgreSQL 15 cluster (initdb, pg_cron preloaded, defaults otherwise)",
    )


if __name__ == "__main__":
    main()
