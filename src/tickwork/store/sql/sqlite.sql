-- SQLite's own statements; with common.sql they are every statement the SQLite store runs.
-- SQLite has no SKIP LOCKED and no arrays: every write runs in one BEGIN IMMEDIATE
-- transaction (the store's writer thread), batches loop over per-row statements inside it, and
-- lists of ids travel as JSON text read with json_each.

-- name: delete_job
-- Delete one job (its runs go first, in the same transaction: tw_runs has no foreign key).
DELETE FROM tw_jobs WHERE id = :id

-- fragment: db_now
-- The database's clock, in epoch microseconds (SQLite's 'now' has millisecond resolution).
CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)

-- name: due_jobs
-- The due-scan: scheduled jobs due by :until, from the scan floor :not_before (ADR 0008), of
-- the partitions in :partitions (a JSON list; NULL: all of them). Served by the partial index
-- tw_jobs_due (next_run_us), which holds only schedulable rows: one process holds every
-- partition on SQLite, so the filter is only there to honour the contract.
SELECT id, partition, fence_token, next_run_us, fired_count, tenant, priority, {schedule_columns}
FROM tw_jobs
WHERE state = 'scheduled' AND next_run_us <= :until AND next_run_us >= :not_before
  AND (:partitions IS NULL OR partition IN (SELECT value FROM json_each(:partitions)))
ORDER BY next_run_us LIMIT :limit

-- name: count_due
-- The herd look (ADR 0036): how many jobs due_jobs would return with :limit, reading only the
-- index tw_jobs_due (no row is decoded).
SELECT count(*) AS n FROM (
    SELECT 1 FROM tw_jobs
    WHERE state = 'scheduled' AND next_run_us <= :until AND next_run_us >= :not_before
      AND (:partitions IS NULL OR partition IN (SELECT value FROM json_each(:partitions)))
    LIMIT :limit
) due

-- name: due_count_of_level
-- A scheduler behind its work (scheduler/fairness.py): how many jobs of one (tenant, priority)
-- level are due, counted no further than :cap; one range of tw_jobs_fair.
SELECT count(*) AS due FROM (
    SELECT 1 FROM tw_jobs
    WHERE tenant = :tenant AND priority = :priority AND state = 'scheduled'
      AND next_run_us <= :until AND next_run_us >= :not_before
      AND (:partitions IS NULL OR partition IN (SELECT value FROM json_each(:partitions)))
    LIMIT :cap)

-- name: due_jobs_of_level
-- Up to :limit due jobs of one (tenant, priority) level, earliest first.
SELECT id, partition, fence_token, next_run_us, fired_count, tenant, priority, {schedule_columns}
FROM tw_jobs
WHERE tenant = :tenant AND priority = :priority AND state = 'scheduled'
  AND next_run_us <= :until AND next_run_us >= :not_before
  AND (:partitions IS NULL OR partition IN (SELECT value FROM json_each(:partitions)))
ORDER BY next_run_us LIMIT :limit

-- name: all_tenant_limits
-- Every tenant's limits (no secrets): what the schedulers share capacity and pace fires by.
SELECT tenant, limits FROM tw_tenants ORDER BY tenant

-- name: planned_counts
-- Scheduled jobs planned to fire per epoch second of [:lo, :hi) (ADR 0022: the load a flexible
-- window is placed against), one range of tw_jobs_due.
SELECT next_run_us / 1000000 AS second, count(*) AS fires FROM tw_jobs
WHERE state = 'scheduled' AND next_run_us >= :lo AND next_run_us < :hi
GROUP BY 1

-- name: next_due
-- The earliest next_run_us of any scheduled job (of :partitions) at or after the scan floor.
SELECT min(next_run_us) AS next_us FROM tw_jobs
WHERE state = 'scheduled' AND next_run_us >= :not_before
  AND (:partitions IS NULL OR partition IN (SELECT value FROM json_each(:partitions)))

-- name: partition_heads
-- Each partition's (of :partitions, a JSON list; NULL: all) oldest due job that nobody has
-- claimed yet. SQLite fills a bare column of a min() aggregate from the row holding the min,
-- so `id` is that job's.
SELECT partition, id, min(next_run_us) AS next_run_us FROM tw_jobs
WHERE state = 'scheduled' AND next_run_us <= :now
  AND (:partitions IS NULL OR partition IN (SELECT value FROM json_each(:partitions)))
GROUP BY partition ORDER BY partition

-- name: delete_attempts_of_job
-- Delete the attempts of every run of one job, before its runs.
DELETE FROM tw_attempts WHERE run_id IN (SELECT id FROM tw_runs WHERE job_id = :id)

-- name: delete_runs_of_job
-- Delete every run of one job, before the job itself.
DELETE FROM tw_runs WHERE job_id = :id

-- fragment: claim_job_cas
-- The claim's compare-and-set on one job: it moves only if it is still scheduled at the fence
-- and next_run_us that the plan was made from, and if the claimer holds the job's partition
-- at the plan's epoch (:epoch NULL: no partition check) or the job is overdue (before
-- :overdue_before, a takeover); then the fence goes up by one and the job advances (or
-- completes), counting a fire for max_runs. Returns the partition's epoch, recorded on the run.
UPDATE tw_jobs SET fence_token = fence_token + 1, next_run_us = :new_next_us, state = :new_state,
    last_fired_us = coalesce(:fired_us, last_fired_us), claimed_by = :owner, claimed_us = :now,
    fired_count = fired_count + (CASE WHEN :fired_us IS NULL THEN 0 ELSE 1 END)
WHERE id = :id AND state = 'scheduled' AND fence_token = :fence AND next_run_us = :expected_us
  AND (:epoch IS NULL OR next_run_us < :overdue_before OR EXISTS (
        SELECT 1 FROM tw_partition_leases l
        WHERE l.partition = tw_jobs.partition AND l.owner = :owner AND l.epoch = :epoch
          AND l.expires_us > {db_now}))
RETURNING fence_token,
    (SELECT epoch FROM tw_partition_leases l WHERE l.partition = tw_jobs.partition) AS lease_epoch

-- name: claim_job
-- Claim one job for a hand-off (workers in other processes): returns only the new fence.
{claim_job_cas}

-- name: claim_refused
-- Whether a claim that changed nothing was refused for its partition epoch alone: the job is
-- still as the plan saw it (counted as a stale-epoch refusal).
SELECT 1 AS refused FROM tw_jobs
WHERE id = :id AND state = 'scheduled' AND fence_token = :fence AND next_run_us = :expected_us

-- name: claim_job_for_fire
-- Claim one job for an in-process fire: the new fence and what the fire needs to run.
{claim_job_cas}, target, retry_policy, webhook_secrets, on_failure, tenant,
    (SELECT webhook_secrets FROM tw_tenants WHERE tw_tenants.tenant = tw_jobs.tenant)
        AS tenant_secrets

-- name: insert_claimed_run
-- The run of an in-process claim: leased to the claimer at attempt 1 (nothing if the
-- occurrence already has a run: it never fires twice).
INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token, coalesced,
                     lease_owner, lease_until_us, created_us, claim_epoch, guarded, planned_us,
                     throttled_ms)
VALUES (:job_id, :key, 'schedule', :fired_us, 'pending', 1, :fence, :coalesced,
        :owner, :lease_until, :now, :lease_epoch, :guarded, :planned_us, :throttled_ms)
ON CONFLICT (key) DO NOTHING
RETURNING id

-- name: record_missed
-- The occurrence ledger's row of a claim that folded or skipped occurrences (only such plans
-- run it): coalesced into the occurrence's run (inserted just before in this transaction, or
-- already there: the key existed), or skipped for misfire (:key NULL: no run).
INSERT INTO tw_occurrences (job_id, first_us, last_us, count, reason, run_id, recorded_us)
VALUES (:job_id, :missed_first_us, :missed_last_us, :coalesced,
        CASE WHEN :key IS NULL THEN 'skipped_misfire' ELSE 'coalesced_into' END,
        (SELECT id FROM tw_runs WHERE key = :key), :now)

-- name: insert_catchup
-- The catch-up backfill of a late misfire fire_all claim (only such plans run it), in the
-- claim's transaction: the missed occurrences :from_us..:last_us within the job's
-- catchup_window, as the range [from, last + 1 us), replayed by the paced lane.
INSERT INTO tw_backfills (job_id, tenant, kind, from_us, to_us, cursor_us, total, done, state,
                          rate_per_s, created_us, updated_us, paced_us)
SELECT id, tenant, 'catchup', :from_us, :last_us + 1, NULL, :total, 0, 'running', :rate_per_s,
       :now, :now, :now
FROM tw_jobs WHERE id = :job_id

-- name: insert_handed_off_run
-- The run of a hand-off claim: unowned at attempt 0, leasable from its own instant, or from
-- the instant its jitter or window planned it at (:planned_us; the worker's lease makes it
-- attempt 1).
INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token, coalesced,
                     lease_owner, lease_until_us, created_us, claim_epoch, guarded, planned_us,
                     throttled_ms)
VALUES (:job_id, :key, 'schedule', :fired_us, 'pending', 0, :fence, :coalesced,
        NULL, coalesce(:planned_us, :fired_us), :now, :lease_epoch, :guarded, :planned_us,
        :throttled_ms)
ON CONFLICT (key) DO NOTHING
RETURNING id

-- Overlap policies (docs/policies.md): run only in the claim transaction, for plans whose job
-- has a policy other than allow, and in finish_run's for a run that releases a held one.

-- name: pending_runs_of_job
-- The runs of a job still going (pending: waiting, leased or between retries) and their lease
-- ends (:held marks one held back by buffer_one); read through tw_runs_active.
SELECT id, lease_until_us FROM tw_runs
WHERE job_id = :job_id AND status = 'pending' AND guarded = 1

-- name: insert_held_run
-- overlap buffer_one: the occurrence's run, held back (lease end :held, never leasable) until
-- the run still going ends; unowned at attempt 0, like a hand-off.
INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token, coalesced,
                     lease_owner, lease_until_us, created_us, claim_epoch, guarded, planned_us)
VALUES (:job_id, :key, 'schedule', :fired_us, 'pending', 0, :fence, :coalesced,
        NULL, :held, :now, :lease_epoch, 1, :planned_us)
ON CONFLICT (key) DO NOTHING
RETURNING id

-- name: mark_releases
-- overlap buffer_one: the run still going (:blocker) releases the held run (:key) when it ends.
UPDATE tw_runs SET releases_key = :key WHERE id = :blocker

-- name: extend_skipped_overlap
-- overlap skip, right after a skip for the same blocking run (:blocker): the job's latest
-- ledger row takes in the occurrence :fired_us too (no occurrence came between them).
UPDATE tw_occurrences SET last_us = :fired_us, count = count + 1, recorded_us = :now
WHERE id = (SELECT id FROM tw_occurrences WHERE job_id = :job_id ORDER BY first_us DESC LIMIT 1)
  AND reason = 'skipped_overlap' AND run_id = :blocker

-- name: record_skipped_overlap
-- overlap skip (or buffer_one with one held already): the occurrence :fired_us of :job_id gets
-- no run; the ledger names the run that was still going (:blocker). Unless
-- extend_skipped_overlap took it in.
INSERT INTO tw_occurrences (job_id, first_us, last_us, count, reason, run_id, recorded_us)
VALUES (:job_id, :fired_us, :fired_us, 1, 'skipped_overlap', :blocker, :now)

-- name: cancel_runs_of_job
-- overlap cancel_previous: every pending run of :job_id ends cancelled at :now, its fence moved
-- on so its holder's heartbeat and outcome are refused. Returns those that were leased, for
-- their attempt rows.
UPDATE tw_runs SET status = 'cancelled', fence_token = fence_token + 1, finished_us = :now,
    error = :error, last_error = :error
WHERE job_id = :job_id AND status = 'pending' AND guarded = 1
RETURNING id AS run_id, job_id, attempt, fence_token - 1 AS fence, lease_owner AS worker

-- name: release_held_run
-- overlap buffer_one: the run held back (its key :key) becomes leasable at :finished_us, the
-- instant the run it waited for ended.
UPDATE tw_runs SET lease_until_us = :finished_us
WHERE key = :key AND status = 'pending' AND lease_until_us = :held

-- name: runs_to_lease
-- The table queue's dequeue, its first half: up to :limit pending runs whose lease is free by
-- :now, soonest first; a hand-off never leased (attempt 0, origin 'schedule', its lease end
-- still its instant: not a released buffer_one run) must also be free by :hand_offs_by
-- (postgres.sql says why). Read in the lease's transaction, so nothing
-- changes them before lease_runs leases them; `lease_owner` says which were leased before
-- (SQLite's RETURNING shows only the new values, so the lost attempts are read here).
-- With :fresh_from, three ranges of tw_runs_pending, as postgres.sql's lease_runs_fresh_first
-- (ADR 0026): free since :fresh_from and by :due_by, the newest first; then free after :due_by
-- (the look-ahead), the soonest first, of which up to :ahead_first go before the first range
-- (the same rows in the same order twice: nothing else writes in this transaction, so the
-- second read skips exactly what the first took); then the backlog free before :fresh_from.
-- Without it (:fresh_from and :due_by far in the past, :ahead_first 0) the first range is
-- empty and the rest is one range in order. Every range takes only runs free after :after
-- (the far past unless given: ADR 0029).
SELECT * FROM (
    SELECT id, fence_token, lease_owner FROM tw_runs
    WHERE status = 'pending' AND lease_until_us <= :now AND lease_until_us > :due_by
      AND lease_until_us >= :fresh_from AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR attempt > 0 OR origin <> 'schedule'
           OR lease_until_us <> coalesce(planned_us, scheduled_us))
    ORDER BY lease_until_us, id LIMIT :ahead_first)
UNION ALL
SELECT * FROM (
    SELECT id, fence_token, lease_owner FROM tw_runs
    WHERE status = 'pending' AND lease_until_us <= :due_by AND lease_until_us >= :fresh_from
      AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR attempt > 0 OR origin <> 'schedule'
           OR lease_until_us <> coalesce(planned_us, scheduled_us))
    ORDER BY lease_until_us DESC LIMIT :limit)
UNION ALL
SELECT * FROM (
    SELECT id, fence_token, lease_owner FROM tw_runs
    WHERE status = 'pending' AND lease_until_us <= :now AND lease_until_us > :due_by
      AND lease_until_us >= :fresh_from AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR attempt > 0 OR origin <> 'schedule'
           OR lease_until_us <> coalesce(planned_us, scheduled_us))
    ORDER BY lease_until_us, id LIMIT :limit OFFSET :ahead_first)
UNION ALL
SELECT * FROM (
    SELECT id, fence_token, lease_owner FROM tw_runs
    WHERE status = 'pending' AND lease_until_us < :fresh_from AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR attempt > 0 OR origin <> 'schedule'
           OR lease_until_us <> coalesce(planned_us, scheduled_us))
    ORDER BY lease_until_us LIMIT :limit)
LIMIT :limit

-- name: running_by_tenant
-- max_concurrent_runs (ADR 0024): how many runs of each tenant of :tenants (a JSON list) are
-- going at :now: pending, leased to a worker, the lease live. Only while some tenant has
-- that limit, in the lease's write transaction (nothing else writes meanwhile).
SELECT j.tenant, count(*) AS n FROM tw_runs r JOIN tw_jobs j ON j.id = r.job_id
WHERE r.status = 'pending' AND r.lease_owner IS NOT NULL AND r.lease_until_us > :now
  AND j.tenant IN (SELECT value FROM json_each(:tenants))
GROUP BY j.tenant

-- name: runs_to_lease_capped
-- runs_to_lease while some tenant has max_concurrent_runs: the same range, each run with its
-- job's tenant, without the runs of the tenants at their cap (:full, a JSON list); the store
-- keeps of the others at most each capped tenant's room.
SELECT r.id, r.fence_token, r.lease_owner, j.tenant FROM tw_runs r JOIN tw_jobs j ON j.id = r.job_id
WHERE r.status = 'pending' AND r.lease_until_us <= :now AND r.lease_until_us > :after
  AND (r.lease_until_us <= :hand_offs_by OR r.attempt > 0 OR r.origin <> 'schedule'
       OR r.lease_until_us <> coalesce(r.planned_us, r.scheduled_us))
  AND j.tenant NOT IN (SELECT value FROM json_each(:full))
ORDER BY r.lease_until_us LIMIT :limit

-- name: tenants_of_runs
-- The fence and tenant of each run of :ids (a JSON list) still pending (a lease by fence,
-- while some tenant has max_concurrent_runs).
SELECT r.id, r.fence_token, j.tenant FROM tw_runs r JOIN tw_jobs j ON j.id = r.job_id
WHERE r.id IN (SELECT value FROM json_each(:ids)) AND r.status = 'pending'

-- name: refuse_for_cap
-- A hand-off a lease by fence left for its tenant's cap is no longer in flight: its lease end
-- moves one microsecond past its instant, so lease_runs takes it as soon as it is free (not a
-- backstop later) and the cap has room.
UPDATE tw_runs SET lease_until_us = lease_until_us + 1
WHERE id = :id AND fence_token = :fence AND status = 'pending' AND lease_owner IS NULL
  AND attempt = 0 AND origin = 'schedule' AND lease_until_us = coalesce(planned_us, scheduled_us)

-- name: lease_runs
-- The dequeue's second half: lease the runs runs_to_lease chose (:ids, a JSON list): fence + 1,
-- attempt + 1, the attempt starting at :now.
UPDATE tw_runs SET fence_token = fence_token + 1, attempt = attempt + 1,
    lease_owner = :owner, lease_until_us = :lease_until, {attempt_start}
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING {fire_returning}

-- name: record_lost_leases
-- Before runs are leased again: the lost attempts of those whose lease (:pairs, a JSON list
-- of [id, fence]) is still at that fence and held by an owner that gave no outcome. Each run
-- is one primary-key lookup.
{insert_lost_attempts}
FROM (SELECT json_extract(value, '$[0]') AS run, json_extract(value, '$[1]') AS fence
      FROM json_each(:pairs)) w
JOIN tw_runs ON tw_runs.id = w.run AND tw_runs.fence_token = w.fence
WHERE tw_runs.status = 'pending' AND tw_runs.lease_owner IS NOT NULL

-- name: lease_run
-- Lease one pending run if its fence is still the one the envelope carried (fence + 1), the
-- attempt starting at :now. A redelivered or superseded envelope finds the fence moved and
-- leases nothing. (record_lost_leases runs first, in the same transaction.)
UPDATE tw_runs SET fence_token = fence_token + 1, attempt = attempt + 1,
    lease_owner = :owner, lease_until_us = :lease_until, {attempt_start}
WHERE id = :id AND fence_token = :fence AND status = 'pending'
RETURNING {fire_returning}

-- name: take_back_own_leases
-- Take back the live leases of ours that a lost lease_runs reply left behind (those not in
-- :holding, a JSON list of run ids): same fence, a fresh lease.
UPDATE tw_runs SET lease_until_us = :lease_until
WHERE id IN (SELECT id FROM tw_runs
             WHERE status = 'pending' AND lease_owner = :owner AND lease_until_us > :now
               AND id NOT IN (SELECT value FROM json_each(:holding))
             ORDER BY lease_until_us, id LIMIT :limit)
RETURNING {fire_returning}

-- name: release_leases
-- The live leases of :owners (a JSON list), processes judged gone (ADR 0035), end at :now;
-- each run carries domain/runs.py's RELEASED_ERROR for its lost attempt's record.
UPDATE tw_runs
SET lease_until_us = :now,
    error = 'lease released: its worker is gone (no database session left)'
WHERE status = 'pending' AND lease_owner IN (SELECT value FROM json_each(:owners))
  AND lease_until_us > :now

-- name: extend_lease
-- Heartbeat: move one pending run's lease if its fence is still ours.
UPDATE tw_runs SET lease_until_us = :lease_until
WHERE id = :id AND fence_token = :fence AND status = 'pending'

-- name: finish_run
-- Apply one outcome if the run is still pending at the outcome's fence (a zombie's late
-- outcome changes nothing); the store records the attempt only when this changed a row and
-- the outcome is not a success (a success stays on its run: ADR 0033), and releases the run it
-- names (releases_key: buffer_one) when the outcome ends the run.
UPDATE tw_runs SET status = :status, started_us = :started_us, finished_us = :finished_us,
    http_status = :http_status, error = :error, last_error = :error,
    dead_lettered_us = :dead_us, lease_owner = NULL, lease_until_us = :retry_us,
    finished_by = :worker
WHERE id = :id AND fence_token = :fence AND status = 'pending'
RETURNING releases_key

-- name: insert_attempt
-- Append one applied outcome other than a success to the attempt history.
INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us, finished_us,
                         status, http_status, error)
VALUES (:run_id, :job_id, :attempt, :fence, :worker, :started_us, :finished_us, :status,
        :http_status, :error)

-- name: redrive
-- Put dead letters (:ids, a JSON list; NULL: all) back to pending, leasable at :now.
UPDATE tw_runs SET status = 'pending', dead_lettered_us = NULL, lease_owner = NULL,
    lease_until_us = :now
WHERE dead_lettered_us IS NOT NULL
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))

-- name: purge_dead_letters
-- Take dead letters (:ids, a JSON list; NULL: all) out of the queue; they stay failed.
UPDATE tw_runs SET dead_lettered_us = NULL
WHERE dead_lettered_us IS NOT NULL
  AND (:ids IS NULL OR id IN (SELECT value FROM json_each(:ids)))

-- name: prune_attempts
-- Delete a batch of attempts that finished before :cutoff, except dead letters' (ADR 0005:
-- the DLQ is where an operator reads why a run failed, until it is redriven or purged).
DELETE FROM tw_attempts WHERE id IN (
    SELECT a.id FROM tw_attempts a
    WHERE a.finished_us < :cutoff
      AND NOT EXISTS (SELECT 1 FROM tw_runs r
                      WHERE r.id = a.run_id AND r.dead_lettered_us IS NOT NULL)
    ORDER BY a.finished_us LIMIT :limit)

-- Partition leases and nodes (ADR 0015). On SQLite one process holds every partition; the
-- statements are the same protocol as PostgreSQL's, so `tickwork up` runs it unchanged.

-- fragment: lease_columns
-- Every column of tw_partition_leases, and the database's clock when read.
partition, owner, epoch, expires_us, renewed_us, {db_now} AS now_us

-- name: list_partition_leases
-- Every partition's lease, with the database's clock.
SELECT {lease_columns} FROM tw_partition_leases ORDER BY partition

-- name: renew_partition_lease
-- Renew one lease `:owner` holds at `:epoch`; nothing if it changed hands meanwhile.
UPDATE tw_partition_leases SET expires_us = {db_now} + :ttl_us, renewed_us = {db_now}
WHERE partition = :partition AND owner = :owner AND epoch = :epoch
RETURNING {lease_columns}

-- name: acquire_partition_lease
-- Take one partition nobody holds (released, or its lease expired): the epoch goes up by one.
UPDATE tw_partition_leases
SET owner = :owner, epoch = epoch + 1, expires_us = {db_now} + :ttl_us, renewed_us = {db_now}
WHERE partition = :partition AND (owner IS NULL OR expires_us <= {db_now})
RETURNING {lease_columns}

-- name: release_partition_leases
-- Release the given partitions (:partitions, a JSON list) if `:owner` holds them (the epoch
-- stays: the next owner bumps it).
UPDATE tw_partition_leases SET owner = NULL, expires_us = 0
WHERE owner = :owner AND partition IN (SELECT value FROM json_each(:partitions))

-- name: heartbeat_node
-- Announce a node: insert it, or renew its heartbeat and figures.
INSERT INTO tw_nodes (id, role, host, pid, version, started_us, heartbeat_us, expires_us, info)
VALUES (:id, :role, :host, :pid, :version, :started_us, {db_now}, {db_now} + :ttl_us, :info)
ON CONFLICT (id, role) DO UPDATE SET heartbeat_us = excluded.heartbeat_us,
    expires_us = excluded.expires_us, info = excluded.info

-- name: list_nodes
-- The nodes whose heartbeat is live (all of them with :all), with the database's clock.
SELECT {node_columns}, {db_now} AS now_us FROM tw_nodes
WHERE :all OR expires_us > {db_now} ORDER BY id, role

-- API keys and tenants (ADR 0018). Orders by name are SQLite's BINARY collation: code point
-- order, as in PostgreSQL's COLLATE "C" and in Python.

-- name: list_keys
-- Every key, or the keys of :tenant, by id.
SELECT {key_columns} FROM tw_api_keys
WHERE :tenant IS NULL OR tenant = :tenant
ORDER BY id

-- name: touch_keys
-- Record when keys were last used: :used is a JSON object {key id: epoch us}; each named key's
-- last_used_us becomes the later of the stored and the given instant. Unknown ids match no row.
UPDATE tw_api_keys
SET last_used_us = max(coalesce(last_used_us, u.used_us), u.used_us)
FROM (SELECT key AS id, value AS used_us FROM json_each(:used)) u
WHERE tw_api_keys.id = u.id

-- name: list_tenants
-- Every tenant, by name.
SELECT {tenant_columns} FROM tw_tenants ORDER BY tenant

-- name: tenant_limits
-- A tenant's limits (create_job's quota check, inside its write transaction: SQLite runs one
-- writer at a time, so the count that follows cannot change before the insert).
SELECT limits FROM tw_tenants WHERE tenant = :tenant

-- name: tenant_jobs
-- Whether :tenant exists, and how many jobs name it (delete_tenant's checks, in its
-- transaction).
SELECT EXISTS (SELECT 1 FROM tw_tenants WHERE tenant = :tenant) AS found,
       (SELECT count(*) FROM tw_jobs WHERE tenant = :tenant) AS jobs

-- name: delete_tenant
-- Delete a tenant's row (its keys are revoked in the same transaction).
DELETE FROM tw_tenants WHERE tenant = :tenant

-- name: revoke_tenant_keys
-- Revoke at :now every key of :tenant not revoked already (a deleted tenant's keys).
UPDATE tw_api_keys SET revoked_us = :now WHERE tenant = :tenant AND revoked_us IS NULL

-- name: insert_audit
-- Append one audit entry (record_audit runs it for each entry of a batch, in one transaction);
-- AUTOINCREMENT gives ascending ids, never reused after a prune.
INSERT INTO tw_audit (at_us, key_id, key_prefix, role, actor_tenant, action, resource, tenant,
                      status, client)
VALUES (:at_us, :key_id, :key_prefix, :role, :actor_tenant, :action, :resource, :tenant,
        :status, :client)

-- name: delete_backfills_of_job
-- Delete a job's backfills, with the job.
DELETE FROM tw_backfills WHERE job_id = :id

-- name: advance_backfill
-- The lane's compare-and-set on one backfill: it moves only while running at the cursor the
-- slice was planned from (and, one at a time, while its job has no pending run); returns the
-- job's fence for the runs the same transaction inserts next (insert_backfill_run).
UPDATE tw_backfills SET cursor_us = :cursor_us, done = done + :n, state = :state,
    paced_us = :paced_us, updated_us = :now
WHERE id = :id AND state = 'running' AND cursor_us IS :expected_us
  AND (:one_at_a_time = 0 OR NOT EXISTS (
        SELECT 1 FROM tw_runs r
        WHERE r.job_id = tw_backfills.job_id AND r.status = 'pending' AND r.guarded = 1))
RETURNING job_id,
    (SELECT fence_token FROM tw_jobs WHERE tw_jobs.id = tw_backfills.job_id) AS fence_token

-- name: insert_backfill_run
-- One occurrence of a backfill slice: unowned and leasable at once, like a manual run; its
-- origin's key suffix keeps it apart from the scheduled occurrence (nothing if it has a run).
INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token, coalesced,
                     lease_owner, lease_until_us, created_us, guarded)
VALUES (:job_id, :key, :origin, :at_us, 'pending', 0, :fence, 0, NULL, :now, :now, :guarded)
ON CONFLICT (key) DO NOTHING

-- The pending runs on SQLite are found through tw_runs_pending and tw_runs_active, on
-- tw_runs itself (PostgreSQL keeps a queue table instead: ADR 0030).

-- name: insert_manual_run
-- Record an out-of-schedule occurrence at :now, unowned and leasable at once (guarded when its
-- job has an overlap policy: a manual run still going counts as the job's run still going).
INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token, coalesced,
                     lease_owner, lease_until_us, created_us, guarded)
SELECT id, :key, 'manual', :now, 'pending', 0, fence_token, 0, NULL, :now, :now,
       CASE WHEN overlap = 'allow' THEN 0 ELSE 1 END
FROM tw_jobs WHERE id = :job_id
ON CONFLICT (key) DO NOTHING

-- name: next_lease
-- The earliest instant at which some pending run's lease is, or becomes, free (of those
-- later than :after, unless it is NULL): the first entry of tw_runs_pending past :after. A run
-- held back by overlap buffer_one (lease end :held) has no such instant until it is released.
SELECT min(lease_until_us) AS next_us FROM tw_runs
WHERE status = 'pending' AND (CAST(:after AS BIGINT) IS NULL OR lease_until_us > :after)
  AND lease_until_us < :held

-- name: prune_runs
-- Delete a batch of finished runs (not dead letters) that finished before :cutoff.
DELETE FROM tw_runs WHERE id IN (
    SELECT id FROM tw_runs
    WHERE status <> 'pending' AND dead_lettered_us IS NULL AND finished_us < :cutoff
    ORDER BY finished_us LIMIT :limit)

-- name: pending_runs
-- How many runs are pending, leased or not (stats).
SELECT count(*) AS n FROM tw_runs WHERE status = 'pending'

-- name: oldest_leasable
-- When the longest-waiting leasable run became leasable (the queue's oldest waiting fire).
-- The first entry of the partial index tw_runs_pending.
SELECT min(lease_until_us) AS since_us FROM tw_runs
WHERE status = 'pending' AND lease_until_us <= :now

-- name: leasable_runs
-- The table queue's depth: pending runs a worker could lease at :now. Served by the partial
-- index tw_runs_pending, so it never reads finished history.
SELECT count(*) AS n FROM tw_runs WHERE status = 'pending' AND lease_until_us <= :now
