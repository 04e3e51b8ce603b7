-- The statements that SQLite and PostgreSQL run as they are written here, with :named
-- parameters (tickwork.store.sql.named loads this file before each dialect's own file).
-- The dialects' hot statements (claims, leases, outcomes) differ and live in sqlite.sql and
-- postgres.sql. Instants are BIGINT microseconds since the Unix epoch (ADR 0003).

-- fragment: job_columns
-- Every column of tw_jobs that rows.job_from_row reads, in rows.job_params' names.
id, tenant, name, state, schedule_kind, cron_expr, timezone, every_ms, anchor_us, at_us,
start_us, end_us, misfire, misfire_grace_ms, target, next_run_us, fence_token, last_fired_us,
created_us, updated_us, retry_policy, webhook_secrets, on_failure, partition, overlap, max_runs,
dst_gap, dst_repeat, fired_count, pause_note, paused_us, catchup_window_ms, jitter_ms, window_ms,
priority

-- fragment: schedule_columns
-- The columns of tw_jobs that make up a Schedule (rows.schedule_from_row).
schedule_kind, cron_expr, timezone, every_ms, anchor_us, at_us, start_us, end_us, misfire,
misfire_grace_ms, overlap, max_runs, dst_gap, dst_repeat, catchup_window_ms, jitter_ms,
window_ms

-- fragment: run_columns
-- Every column of tw_runs that rows.run_from_row reads.
id, job_id, key, origin, scheduled_us, status, attempt, fence_token, coalesced, created_us,
started_us, finished_us, http_status, error, dead_lettered_us, last_error, claim_epoch,
lease_owner, lease_until_us, planned_us, throttled_ms

-- fragment: attempt_columns
-- Every column of tw_attempts (rows.attempt_from_row).
id, run_id, job_id, attempt, fence_token, worker, started_us, finished_us, status, http_status,
error

-- fragment: tenant_columns
-- Every column of tw_tenants (rows.tenant_from_row).
tenant, webhook_secrets, created_us, updated_us, egress, limits

-- fragment: fire_returning
-- What a lease of tw_runs returns (rows.fire_from_row): the run and, by primary-key lookups,
-- its job's and tenant's columns, so a worker signs and retries without another read.
-- Subqueries rather than a join because SQLite's RETURNING cannot name the tables of an
-- UPDATE ... FROM; PostgreSQL's batch leases join instead (postgres.sql says why).
id, job_id, key, scheduled_us, fence_token, attempt,
    (SELECT target FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS target,
    (SELECT retry_policy FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS retry_policy,
    (SELECT webhook_secrets FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS webhook_secrets,
    (SELECT on_failure FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS on_failure,
    (SELECT t.webhook_secrets FROM tw_tenants t JOIN tw_jobs j ON t.tenant = j.tenant
     WHERE j.id = tw_runs.job_id) AS tenant_secrets,
    (SELECT tenant FROM tw_jobs WHERE tw_jobs.id = tw_runs.job_id) AS tenant, planned_us

-- name: tenants_with_limits
-- The tenants that have limits, with them (the stores' cache of concurrency caps, ADR 0024).
SELECT tenant, limits FROM tw_tenants WHERE limits IS NOT NULL

-- name: ping
-- The cheapest round trip that proves the database answers (health checks).
SELECT 1

-- name: insert_job
-- Store a new job (create_job).
INSERT INTO tw_jobs ({job_columns})
VALUES (:id, :tenant, :name, :state, :schedule_kind, :cron_expr, :timezone, :every_ms,
        :anchor_us, :at_us, :start_us, :end_us, :misfire, :misfire_grace_ms, :target,
        :next_run_us, :fence_token, :last_fired_us, :created_us, :updated_us, :retry_policy,
        :webhook_secrets, :on_failure, :partition, :overlap, :max_runs, :dst_gap, :dst_repeat,
        :fired_count, :pause_note, :paused_us, :catchup_window_ms, :jitter_ms, :window_ms,
        :priority)

-- name: get_job
-- One job by id.
SELECT {job_columns} FROM tw_jobs WHERE id = :id

-- name: update_job
-- Overwrite a job's editable fields if its fence is still the one read (no row: stale or gone).
UPDATE tw_jobs SET tenant = :tenant, name = :name, state = :state,
    schedule_kind = :schedule_kind, cron_expr = :cron_expr, timezone = :timezone,
    every_ms = :every_ms, anchor_us = :anchor_us, at_us = :at_us, start_us = :start_us,
    end_us = :end_us, misfire = :misfire, misfire_grace_ms = :misfire_grace_ms,
    target = :target, next_run_us = :next_run_us, updated_us = :updated_us,
    retry_policy = :retry_policy, webhook_secrets = :webhook_secrets, on_failure = :on_failure,
    overlap = :overlap, max_runs = :max_runs, dst_gap = :dst_gap, dst_repeat = :dst_repeat,
    catchup_window_ms = :catchup_window_ms, jitter_ms = :jitter_ms, window_ms = :window_ms,
    pause_note = :pause_note, paused_us = :paused_us, priority = :priority
WHERE id = :id AND fence_token = :fence_token
RETURNING {job_columns}

-- name: list_jobs
-- A page of jobs in id (creation) order after :after_id, optionally filtered.
SELECT {job_columns} FROM tw_jobs
WHERE (CAST(:state AS TEXT) IS NULL OR state = :state)
  AND (CAST(:tenant AS TEXT) IS NULL OR tenant = :tenant)
  AND (CAST(:name_prefix AS TEXT) IS NULL
       OR substr(name, 1, length(:name_prefix)) = :name_prefix)
  AND (CAST(:after_id AS TEXT) IS NULL OR id > :after_id)
ORDER BY id LIMIT :limit

-- name: get_run_by_key
-- One run by its occurrence key.
SELECT {run_columns} FROM tw_runs WHERE key = :key

-- name: list_runs
-- A page of one job's runs, newest first, before :before_id.
SELECT {run_columns} FROM tw_runs
WHERE job_id = :job_id AND (CAST(:before_id AS BIGINT) IS NULL OR id < :before_id)
ORDER BY id DESC LIMIT :limit

-- name: get_run
-- One run by id.
SELECT {run_columns} FROM tw_runs WHERE id = :id

-- name: list_attempts
-- Every recorded attempt of one run, oldest first: its rows in tw_attempts and, once it
-- succeeded, its last attempt from its own row (ADR 0033). That row (id 0) comes after the
-- stored rows of the same attempt number, as it did when it was stored last: a retry that
-- does not lease again (a manual run's retry keeps attempt 1) shares the success's number.
SELECT {attempt_columns} FROM tw_attempt_history WHERE run_id = :run_id
ORDER BY attempt, id = 0, id

-- name: list_dead_letters
-- A page of the dead-letter queue, newest run first, optionally of one job and of the jobs of
-- one tenant (tw_jobs_tenant_name finds the tenant's jobs).
SELECT {run_columns} FROM tw_runs
WHERE dead_lettered_us IS NOT NULL
  AND (CAST(:before_id AS BIGINT) IS NULL OR id < :before_id)
  AND (CAST(:job_id AS TEXT) IS NULL OR job_id = :job_id)
  AND (CAST(:tenant AS TEXT) IS NULL
       OR job_id IN (SELECT id FROM tw_jobs WHERE tenant = :tenant))
ORDER BY id DESC LIMIT :limit

-- fragment: attempt_start
-- What every lease sets besides the fence, the attempt, the owner and the lease's end: the
-- attempt it starts began at the lease's instant (:now), and the previous attempt's finish and
-- result are cleared, so a leased run shows the attempt in progress (last_error keeps the
-- previous one's error). The row is rewritten for the lease anyway, and none of these columns
-- is in an index that holds pending runs: they cost nothing more.
started_us = :now, finished_us = NULL, http_status = NULL, error = NULL

-- fragment: insert_lost_attempts
-- Append to the history the attempt of each lease that ended without an outcome (its worker
-- stopped heartbeating), from a run's columns as they were before it is leased again: a
-- statement adds the FROM of such rows, whose lease_owner is set (an outcome clears it, so an
-- owner still recorded at a new lease is a lease that expired unfinished). The attempt ran
-- from its lease (a run leased at its claim has no started_us: the claim inserted it at that
-- instant) until its lease's end. Its error is domain/runs.py's LOST_ERROR, or RELEASED_ERROR
-- when release_leases ended the lease (it writes those words on the run; a lease clears them).
INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us, finished_us,
                         status, http_status, error)
SELECT id, job_id, attempt, fence_token, lease_owner, coalesce(started_us, created_us),
       lease_until_us, 'lost', NULL,
       CASE WHEN error = 'lease released: its worker is gone (no database session left)'
            THEN error ELSE 'lease expired: worker stopped heartbeating' END

-- name: get_tenant
-- One tenant's settings (no row: the tenant has none).
SELECT {tenant_columns} FROM tw_tenants WHERE tenant = :tenant

-- name: set_tenant_secrets
-- Upsert a tenant's signing secrets; the row keeps any other settings it holds.
INSERT INTO tw_tenants (tenant, webhook_secrets, created_us, updated_us)
VALUES (:tenant, :webhook_secrets, :now, :now)
ON CONFLICT (tenant) DO UPDATE SET webhook_secrets = excluded.webhook_secrets,
    updated_us = excluded.updated_us
RETURNING {tenant_columns}

-- name: set_tenant_egress
-- Replace an existing tenant's destination lists (JSON, NULL: none); no row: no such tenant.
UPDATE tw_tenants SET egress = :egress, updated_us = :now
WHERE tenant = :tenant
RETURNING {tenant_columns}

-- name: set_tenant_limits
-- Replace an existing tenant's limits (JSON of the limits set, NULL: none) if the row is still
-- as it was read (updated_us = :expected_us; NULL: whatever it is); no row: no such tenant, or
-- changed since it was read.
UPDATE tw_tenants SET limits = :limits, updated_us = :now
WHERE tenant = :tenant AND (CAST(:expected_us AS BIGINT) IS NULL OR updated_us = :expected_us)
RETURNING {tenant_columns}

-- name: count_tenant_jobs
-- How many jobs one tenant has, in any state (its usage against limits.max_jobs;
-- tw_jobs_tenant_name finds them).
SELECT count(*) AS n FROM tw_jobs WHERE tenant = :tenant

-- name: job_counts_by_tenant
-- How many jobs each tenant has, in any state (a tenant without jobs has no row).
SELECT tenant, count(*) AS n FROM tw_jobs GROUP BY tenant

-- name: job_state_counts
-- How many jobs are in each state (stats).
SELECT state, count(*) AS n FROM tw_jobs GROUP BY state

-- name: get_meta
-- One setting of the database itself (tw_meta), e.g. `partitions`.
SELECT value FROM tw_meta WHERE key = :key

-- fragment: node_columns
-- Every column of tw_nodes (rows.node_from_row).
id, role, host, pid, version, started_us, heartbeat_us, expires_us, info

-- name: remove_node
-- Forget a process that leaves, in every role (its partitions are released in the same
-- transaction).
DELETE FROM tw_nodes WHERE id = :id

-- name: remove_node_role
-- Forget one role of a process (a worker that stops; its scheduler role, if any, stays).
DELETE FROM tw_nodes WHERE id = :id AND role = :role

-- name: release_partitions_of
-- Release every partition `:owner` holds: a scheduler that leaves hands them over at once.
UPDATE tw_partition_leases SET owner = NULL, expires_us = 0 WHERE owner = :owner

-- API keys and tenants (ADR 0018). A key is stored by the SHA-256 of the whole key.

-- fragment: key_columns
-- Every column of tw_api_keys (rows.key_from_row, rows.key_params).
id, name, role, tenant, prefix, secret_hash, created_us, expires_us, revoked_us, last_used_us

-- name: insert_key
-- Store a new key; nothing (no row returned) if its id or its secret_hash is taken already.
INSERT INTO tw_api_keys ({key_columns})
VALUES (:id, :name, :role, :tenant, :prefix, :secret_hash, :created_us, :expires_us,
        :revoked_us, :last_used_us)
ON CONFLICT DO NOTHING
RETURNING id

-- name: get_key
-- One key by id.
SELECT {key_columns} FROM tw_api_keys WHERE id = :id

-- name: get_key_by_hash
-- The key a presented secret hashes to (the unique index on secret_hash), revoked or not.
SELECT {key_columns} FROM tw_api_keys WHERE secret_hash = :secret_hash

-- name: revoke_key
-- Revoke a key at :now; one revoked already keeps its first revoked_us. No row: no such key.
UPDATE tw_api_keys SET revoked_us = coalesce(revoked_us, :now) WHERE id = :id
RETURNING {key_columns}

-- name: insert_tenant
-- Create a tenant with its signing secrets (sealed) and limits; no row returned if it exists
-- already.
INSERT INTO tw_tenants (tenant, webhook_secrets, created_us, updated_us, limits)
VALUES (:tenant, :webhook_secrets, :now, :now, :limits)
ON CONFLICT (tenant) DO NOTHING
RETURNING {tenant_columns}

-- The audit log (tw_audit, migration 0007): append-only, newest first, pruned by age.

-- fragment: audit_columns
-- Every column of tw_audit (rows.audit_from_row).
id, at_us, key_id, key_prefix, role, actor_tenant, action, resource, tenant, status, client

-- A page of the audit log is newest first, below :before_id (the store passes the largest
-- BIGINT for the first page), at most :limit entries; of one tenant (the changed resource's),
-- of one key, or both. Each combination of filters is its own statement, with no
-- `:x IS NULL OR ...` test and no NULL bound: SQLite plans a statement once for any
-- parameters, and such a test kept it off the indexes (a rare tenant's first page scanned the
-- whole log: 72 ms instead of 1 ms at 400,000 entries). Each statement here is one index range
-- read backwards: the primary key, or tw_audit_tenant (tenant, id). There is no index by key:
-- a key's page reads the log backwards until it has found `:limit` entries.

-- name: list_audit
-- A page of the whole audit log.
SELECT {audit_columns} FROM tw_audit
WHERE id < :before_id
ORDER BY id DESC LIMIT :limit

-- name: list_audit_of_tenant
-- A page of one tenant's entries.
SELECT {audit_columns} FROM tw_audit
WHERE tenant = :tenant AND id < :before_id
ORDER BY id DESC LIMIT :limit

-- name: list_audit_of_key
-- A page of one key's entries.
SELECT {audit_columns} FROM tw_audit
WHERE key_id = :key_id AND id < :before_id
ORDER BY id DESC LIMIT :limit

-- name: list_audit_of_tenant_and_key
-- A page of one key's entries on one tenant's resources.
SELECT {audit_columns} FROM tw_audit
WHERE tenant = :tenant AND key_id = :key_id AND id < :before_id
ORDER BY id DESC LIMIT :limit

-- name: prune_audit
-- Delete a batch of the oldest entries made before :before (tw_audit_at).
DELETE FROM tw_audit WHERE id IN (
    SELECT id FROM tw_audit WHERE at_us < :before ORDER BY at_us, id LIMIT :limit)

-- Secrets at rest (store/sql/reseal.py): every column that may hold a secret, a page at a
-- time, and a compare-and-set rewrite that loses to any edit made in between.

-- name: job_secret_columns
-- A page of jobs' secret-bearing columns, by id.
SELECT id, target, webhook_secrets, on_failure FROM tw_jobs
WHERE id > :after ORDER BY id LIMIT :limit

-- name: reseal_job
-- Rewrite a job's secret-bearing columns if they are still what was read.
UPDATE tw_jobs SET target = :target, webhook_secrets = :webhook_secrets, on_failure = :on_failure
WHERE id = :id AND target = :old_target
  AND webhook_secrets IS NOT DISTINCT FROM :old_webhook_secrets
  AND on_failure IS NOT DISTINCT FROM :old_on_failure
RETURNING id

-- name: tenant_secret_columns
-- Every tenant's signing secrets column.
SELECT tenant, webhook_secrets FROM tw_tenants ORDER BY tenant

-- name: reseal_tenant
-- Rewrite a tenant's signing secrets if they are still what was read.
UPDATE tw_tenants SET webhook_secrets = :webhook_secrets
WHERE tenant = :tenant AND webhook_secrets IS NOT DISTINCT FROM :old_webhook_secrets
RETURNING tenant

-- fragment: ledger_columns
-- Every column of tw_occurrences that rows.ledger_from_row reads.
id, job_id, first_us, last_us, count, reason, run_id, recorded_us

-- name: insert_ledger_range
-- Record one range of occurrences that got no run of their own (a resume passing over what
-- fell while the job was paused), in the transaction of the job's update.
INSERT INTO tw_occurrences (job_id, first_us, last_us, count, reason, run_id, recorded_us)
VALUES (:job_id, :first_us, :last_us, :count, :reason, :run_id, :recorded_us)

-- name: list_ledger
-- One job's ledger ranges that overlap [:from_us, :to_us], oldest first: tw_occurrences_job
-- (job_id, first_us) reads the job's ranges that begin by :to_us, in order, and last_us
-- filters out those that ended before :from_us (a job keeps only the retention's worth).
SELECT {ledger_columns} FROM tw_occurrences
WHERE job_id = :job_id AND first_us <= :to_us AND last_us >= :from_us
ORDER BY first_us, id LIMIT :limit

-- name: list_runs_scheduled_between
-- One job's runs whose nominal instant lies in [:from_us, :to_us], oldest first: the
-- tw_runs_job index (job_id, id) finds the job's runs, scheduled_us filters them.
SELECT {run_columns} FROM tw_runs
WHERE job_id = :job_id AND scheduled_us >= :from_us AND scheduled_us <= :to_us
ORDER BY scheduled_us, id LIMIT :limit

-- name: prune_ledger
-- Delete a batch of ledger ranges recorded before :cutoff (history retention).
DELETE FROM tw_occurrences WHERE id IN (
    SELECT id FROM tw_occurrences WHERE recorded_us < :cutoff ORDER BY recorded_us LIMIT :limit)

-- name: delete_ledger_of_job
-- Delete one job's ledger, with the job.
DELETE FROM tw_occurrences WHERE job_id = :id
