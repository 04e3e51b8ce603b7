"""SQL shared by the SQLite and PostgreSQL stores, with :named parameters.

The PostgreSQL store rewrites :name into $n (`to_numbered`); hot statements that differ by
dialect (claim, lease) live in the store modules themselves.
"""

from __future__ import annotations

import re
from functools import lru_cache

from tickwork.store.sql.rows import (
    ATTEMPT_COLUMNS,
    JOB_COLUMNS,
    RUN_COLUMNS,
    SCHEDULE_COLUMNS,
    TENANT_COLUMNS,
)

_JOB_PARAMS = ", ".join(":" + c.strip() for c in JOB_COLUMNS.split(","))

INSERT_JOB = f"INSERT INTO tw_jobs ({JOB_COLUMNS}) VALUES ({_JOB_PARAMS})"
GET_JOB = f"SELECT {JOB_COLUMNS} FROM tw_jobs WHERE id = :id"
UPDATE_JOB = """
UPDATE tw_jobs SET tenant = :tenant, name = :name, state = :state,
    schedule_kind = :schedule_kind, cron_expr = :cron_expr, timezone = :timezone,
    every_ms = :every_ms, anchor_us = :anchor_us, at_us = :at_us, start_us = :start_us,
    end_us = :end_us, misfire = :misfire, misfire_grace_ms = :misfire_grace_ms,
    target = :target, next_run_us = :next_run_us, updated_us = :updated_us,
    retry_policy = :retry_policy, webhook_secrets = :webhook_secrets, on_failure = :on_failure
WHERE id = :id AND fence_token = :fence_token
"""
DELETE_JOB = "DELETE FROM tw_jobs WHERE id = :id"
DELETE_RUNS_OF_JOB = "DELETE FROM tw_runs WHERE job_id = :id"
# tw_runs has no foreign key to tw_jobs: its trigger cost ~20 ms per 1,000-fire claim (bench/).
# Deleting a job deletes its runs in the same statement instead (PostgreSQL) or transaction.
DELETE_JOB_AND_RUNS = """
WITH gone AS (DELETE FROM tw_runs WHERE job_id = :id)
DELETE FROM tw_jobs WHERE id = :id RETURNING id
"""
LIST_JOBS = f"""
SELECT {JOB_COLUMNS} FROM tw_jobs
WHERE (CAST(:state AS TEXT) IS NULL OR state = :state)
  AND (CAST(:tenant AS TEXT) IS NULL OR tenant = :tenant)
  AND (CAST(:name_prefix AS TEXT) IS NULL
       OR substr(name, 1, length(:name_prefix)) = :name_prefix)
  AND (CAST(:after_id AS TEXT) IS NULL OR id > :after_id)
ORDER BY id LIMIT :limit
"""
DUE_JOBS = f"""
SELECT id, fence_token, next_run_us, {SCHEDULE_COLUMNS} FROM tw_jobs
WHERE state = 'scheduled' AND next_run_us <= :until AND next_run_us >= :not_before
ORDER BY next_run_us LIMIT :limit
"""
NEXT_DUE = """
SELECT min(next_run_us) AS next_us FROM tw_jobs
WHERE state = 'scheduled' AND next_run_us >= :not_before
"""
INSERT_MANUAL_RUN = """
INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token, coalesced,
                     lease_owner, lease_until_us, created_us)
SELECT id, :key, 'manual', :now, 'pending', 0, fence_token, 0, NULL, :now, :now
FROM tw_jobs WHERE id = :job_id
ON CONFLICT (key) DO NOTHING
"""
GET_RUN_BY_KEY = f"SELECT {RUN_COLUMNS} FROM tw_runs WHERE key = :key"
LIST_RUNS = f"""
SELECT {RUN_COLUMNS} FROM tw_runs
WHERE job_id = :job_id AND (CAST(:before_id AS BIGINT) IS NULL OR id < :before_id)
ORDER BY id DESC LIMIT :limit
"""
GET_RUN = f"SELECT {RUN_COLUMNS} FROM tw_runs WHERE id = :id"
LIST_ATTEMPTS = (
    f"SELECT {ATTEMPT_COLUMNS} FROM tw_attempts WHERE run_id = :run_id ORDER BY attempt, id"
)
LIST_DEAD = f"""
SELECT {RUN_COLUMNS} FROM tw_runs
WHERE dead_lettered_us IS NOT NULL
  AND (CAST(:before_id AS BIGINT) IS NULL OR id < :before_id)
  AND (CAST(:job_id AS TEXT) IS NULL OR job_id = :job_id)
ORDER BY id DESC LIMIT :limit
"""
# The job and tenant columns a leased fire carries, read beside an UPDATE ... RETURNING of
# tw_runs (SQLite's RETURNING cannot name the tables of an UPDATE ... FROM). Each is a lookup
# by primary key; the tenant's secrets ride along so workers sign without a read per fire.
FIRE_EXTRAS = """
    (SELECT target FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS target,
    (SELECT retry_policy FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS retry_policy,
    (SELECT webhook_secrets FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS webhook_secrets,
    (SELECT on_failure FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS on_failure,
    (SELECT t.webhook_secrets FROM tw_tenants t JOIN tw_jobs j ON t.tenant = j.tenant
     WHERE j.id = tw_runs.job_id) AS tenant_secrets
"""
# A worker that got a run's envelope from an external queue leases it by id, if the fence is
# still the one the scheduler published (a redelivered or superseded envelope finds it moved).
# What a lease of tw_runs returns (rows.fire_from_row): the run and, by primary-key lookups,
# its job's and tenant's columns. One RETURNING list serves both dialects and every by-id lease.
FIRE_RETURNING = "id, job_id, key, scheduled_us, fence_token, attempt," + FIRE_EXTRAS
LEASE_RUN = f"""
UPDATE tw_runs SET fence_token = fence_token + 1, attempt = attempt + 1,
    lease_owner = :owner, lease_until_us = :lease_until
WHERE id = :id AND fence_token = :fence AND status = 'pending'
RETURNING {FIRE_RETURNING}
"""
# A lease of ours whose reply was lost: same fence, same owner, a fresh lease_until.
RELET_OWN_RUN = f"""
UPDATE tw_runs SET lease_until_us = :lease_until
WHERE id = :id AND fence_token = :fence AND status = 'pending' AND lease_owner = :owner
RETURNING {FIRE_RETURNING}
"""
NEXT_LEASE = "SELECT min(lease_until_us) AS next_us FROM tw_runs WHERE status = 'pending'"
# One outcome; the attempt is recorded only when this applied (the stores check the row count).
FINISH_RUN = """
UPDATE tw_runs SET status = :status, started_us = :started_us, finished_us = :finished_us,
    http_status = :http_status, error = :error, last_error = :error,
    dead_lettered_us = :dead_us, lease_owner = NULL, lease_until_us = :retry_us
WHERE id = :id AND fence_token = :fence AND status = 'pending'
"""
INSERT_ATTEMPT = """
INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us, finished_us,
                         status, http_status, error)
VALUES (:run_id, :job_id, :attempt, :fence, :worker, :started_us, :finished_us, :status,
        :http_status, :error)
"""
# Dead letters' attempts stay with them (ADR 0005): the DLQ is where an operator reads why a run
# failed, until it is redriven or purged. `{table}`: PostgreSQL prunes only its DEFAULT partition.
PRUNE_ATTEMPTS_IN = """
DELETE FROM {table} WHERE id IN (
    SELECT a.id FROM {table} a
    WHERE a.finished_us < :cutoff
      AND NOT EXISTS (SELECT 1 FROM tw_runs r
                      WHERE r.id = a.run_id AND r.dead_lettered_us IS NOT NULL)
    ORDER BY a.finished_us LIMIT :limit)
"""
PRUNE_ATTEMPTS = PRUNE_ATTEMPTS_IN.format(table="tw_attempts")
PRUNE_RUNS = """
DELETE FROM tw_runs WHERE id IN (
    SELECT id FROM tw_runs
    WHERE status <> 'pending' AND dead_lettered_us IS NULL AND finished_us < :cutoff
    ORDER BY finished_us LIMIT :limit)
"""
GET_TENANT = f"SELECT {TENANT_COLUMNS} FROM tw_tenants WHERE tenant = :tenant"
# An upsert: the row may already hold other settings (stage 3 adds limits), which it keeps.
SET_TENANT_SECRETS = f"""
INSERT INTO tw_tenants (tenant, webhook_secrets, created_us, updated_us)
VALUES (:tenant, :webhook_secrets, :now, :now)
ON CONFLICT (tenant) DO UPDATE SET webhook_secrets = excluded.webhook_secrets,
    updated_us = excluded.updated_us
RETURNING {TENANT_COLUMNS}
"""
JOB_STATE_COUNTS = "SELECT state, count(*) AS n FROM tw_jobs GROUP BY state"
PENDING_RUNS = "SELECT count(*) AS n FROM tw_runs WHERE status = 'pending'"
# The table queue's depth: runs a worker could lease now. Served by the partial index
# tw_runs_pending (lease_until_us) WHERE status = 'pending', so it never reads finished history.
LEASABLE_RUNS = (
    "SELECT count(*) AS n FROM tw_runs WHERE status = 'pending' AND lease_until_us <= :now"
)

_PARAM = re.compile(r"(?<![:\w]):([a-z_]+)")


@lru_cache(maxsize=256)
def to_numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """Rewrite :name parameters as $1, $2... (asyncpg); returns the SQL and the name order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _PARAM.sub(number, sql), tuple(names)
