-- Backfills (tw_backfills, migration 0011): the statements both dialects run as written.
-- Each dialect advances a backfill its own way (sqlite.sql, postgres.sql: advance_backfill).

-- fragment: backfill_columns
-- Every column of tw_backfills (rows_of_backfills.backfill_from_row).
id, job_id, tenant, kind, from_us, to_us, cursor_us, total, done, state, rate_per_s,
created_us, updated_us, paced_us

-- name: insert_backfill
-- Store a new backfill; the database assigns its id.
INSERT INTO tw_backfills (job_id, tenant, kind, from_us, to_us, cursor_us, total, done, state,
                          rate_per_s, created_us, updated_us, paced_us)
VALUES (:job_id, :tenant, :kind, :from_us, :to_us, :cursor_us, :total, :done, :state,
        :rate_per_s, :created_us, :updated_us, :paced_us)
RETURNING {backfill_columns}

-- name: get_backfill
-- One backfill by id.
SELECT {backfill_columns} FROM tw_backfills WHERE id = :id

-- name: list_backfills_of_job
-- One job's backfills, newest first (tw_backfills_job).
SELECT {backfill_columns} FROM tw_backfills WHERE job_id = :job_id ORDER BY id DESC LIMIT :limit

-- name: running_backfills
-- The lane's work: running backfills, oldest first, each with its job's schedule as it is
-- now (a backfill whose job is gone has no row here). Served by tw_backfills_running.
SELECT b.id, b.job_id, b.tenant, b.kind, b.from_us, b.to_us, b.cursor_us, b.total, b.done,
       b.state, b.rate_per_s, b.created_us, b.updated_us, b.paced_us, {schedule_columns}
FROM tw_backfills b JOIN tw_jobs j ON j.id = b.job_id
WHERE b.state = 'running'
ORDER BY b.id LIMIT :limit

-- name: cancel_backfill
-- Cancel a running backfill (no row: it is finished already, or unknown).
UPDATE tw_backfills SET state = 'cancelled', updated_us = :now
WHERE id = :id AND state = 'running'
RETURNING {backfill_columns}

-- name: prune_backfills
-- Delete a batch of finished backfills (completed or cancelled) last changed before :cutoff,
-- oldest first (history retention). No index on updated_us: a backfill is one row per request
-- or catch-up, few beside the runs it made, and the running ones are never touched.
DELETE FROM tw_backfills WHERE id IN (
    SELECT id FROM tw_backfills
    WHERE state IN ('completed', 'cancelled') AND updated_us < :cutoff
    ORDER BY updated_us, id LIMIT :limit)
