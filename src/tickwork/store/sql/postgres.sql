-- PostgreSQL's own statements; with common.sql they are every statement the PostgreSQL store
-- runs. Batches travel as parallel arrays (unnest), so one round trip and one statement serve
-- a whole batch. The store runs with plan_cache_mode = force_custom_plan: a generic plan cached
-- while a table was small or empty can stay slow after it fills.

-- name: notify
-- Wake other processes: LISTENers of :channel learn that :topic ("jobs" or "runs") changed.
SELECT pg_notify(:channel, :topic)

-- fragment: due_columns
-- What the due-scan reads of a job (rows.due_from_row).
id, partition, fence_token, next_run_us, fired_count, tenant, priority, {schedule_columns}

-- name: due_jobs_of_partition
-- One branch of the due-scan: partition {partition}'s earliest due jobs, one range of the
-- index tw_jobs_due (partition, next_run_us). A template: due_jobs_in_partitions joins one
-- per partition held.
SELECT {due_columns} FROM tw_jobs
WHERE partition = {partition} AND state = 'scheduled'
  AND next_run_us <= :until AND next_run_us >= :not_before
ORDER BY next_run_us LIMIT :limit

-- name: due_jobs_in_partitions
-- The due-scan of the partitions a scheduler holds ({branches}: due_jobs_of_partition for
-- each, joined by UNION ALL), merged in time order (a Merge Append reads about :limit rows in
-- all, whatever the table holds), from the scan floor :not_before (ADR 0008).
SELECT * FROM ({branches}) due ORDER BY next_run_us LIMIT :limit

-- name: due_counts
-- A scheduler behind its work (scheduler/fairness.py): how many jobs of each tenant in
-- :tenants are due, per priority level (1..9), each level counted no further than :cap. One
-- probe of tw_jobs_fair (tenant, priority, next_run_us) per tenant and level: a level is one
-- index range, so future jobs of a level are never walked. Two things keep it that way:
-- - the ORDER BY: the planner knows a level's tenant and priority only as the outer row's, so
--   with one tenant and one priority in the table it reckons every due row matches, and without
--   an order to serve it chose a scan of tw_jobs_due or of the table, filtering each level's
--   rows out of all the due ones (9 walks of the whole due range per tick: 300 ms at 20,000 due);
--   only tw_jobs_fair yields a level's rows in next_run_us order, so the ORDER BY makes it the
--   cheap plan;
-- - the LATERAL: a scalar subquery named by both the filter and the output ran twice per level.
SELECT t.tenant, l.priority, x.due
FROM unnest(:tenants::text[]) AS t(tenant) CROSS JOIN generate_series(1, 9) AS l(priority)
CROSS JOIN LATERAL (
    SELECT count(*) AS due FROM (
        SELECT 1 FROM tw_jobs j
        WHERE j.tenant = t.tenant AND j.priority = l.priority AND j.state = 'scheduled'
          AND j.next_run_us <= :until AND j.next_run_us >= :not_before
          AND j.partition = ANY(:parts::int[])
        ORDER BY j.next_run_us LIMIT :cap) y
) x
WHERE x.due > 0

-- name: due_jobs_by_level
-- The due jobs of each (tenant, priority) level asked for, at most its limit each, earliest
-- first within a level: one range of tw_jobs_fair per level.
SELECT d.* FROM unnest(:tenants::text[], :priorities::int[], :limits::int[])
    AS w(want_tenant, want_priority, want_limit)
CROSS JOIN LATERAL (
    SELECT {due_columns} FROM tw_jobs
    WHERE tenant = w.want_tenant AND priority = w.want_priority AND state = 'scheduled'
      AND next_run_us <= :until AND next_run_us >= :not_before
      AND partition = ANY(:parts::int[])
    ORDER BY next_run_us LIMIT w.want_limit
) d

-- name: all_tenant_limits
-- Every tenant's limits (no secrets): what the schedulers share capacity and pace fires by.
SELECT tenant, limits FROM tw_tenants ORDER BY tenant

-- name: planned_counts
-- Scheduled jobs planned to fire per epoch second of [:lo, :hi) (ADR 0022: the load a flexible
-- window is placed against). Every partition (:parts), each one range of tw_jobs_due.
SELECT next_run_us / 1000000 AS second, count(*) AS fires FROM tw_jobs
WHERE partition = ANY(:parts::int[]) AND state = 'scheduled'
  AND next_run_us >= :lo AND next_run_us < :hi
GROUP BY 1

-- name: gone_nodes
-- Which nodes of :ids are gone (store.gone_nodes, ADR 0032): each announced in its heartbeat
-- the application_name of its sessions, and no session of that name is open to this database
-- now. Every role can read those columns of pg_stat_activity. A node that announced no name
-- is never listed.
SELECT DISTINCT n.id FROM tw_nodes n
WHERE n.id = ANY(:ids::text[]) AND (n.info::jsonb) ->> 'session' IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM pg_stat_activity a
      WHERE a.datname = current_database() AND a.application_name = (n.info::jsonb) ->> 'session')

-- name: count_due_of_partition
-- One branch of count_due_in_partitions: up to :limit of partition {partition}'s due jobs, one
-- range of tw_jobs_due, nothing read but the index and the rows' visibility.
SELECT 1 FROM tw_jobs
WHERE partition = {partition} AND state = 'scheduled'
  AND next_run_us <= :until AND next_run_us >= :not_before
LIMIT :limit

-- name: count_due_in_partitions
-- The herd look (ADR 0036): how many jobs the due-scan would return with :limit, without
-- reading or sending their columns ({branches}: count_due_of_partition for each partition).
SELECT count(*) AS n FROM (SELECT 1 FROM ({branches}) due LIMIT :limit) capped

-- name: next_due_of_partition
-- One branch of next_due_in_partitions: partition {partition}'s earliest scheduled job.
SELECT next_run_us FROM tw_jobs
WHERE partition = {partition} AND state = 'scheduled' AND next_run_us >= :not_before
ORDER BY next_run_us LIMIT 1

-- name: next_due_in_partitions
-- The earliest next_run_us of the partitions held ({branches}), at or after the scan floor.
SELECT min(next_run_us) AS next_us FROM ({branches}) due

-- name: partition_heads
-- The oldest due job that nobody has claimed yet (a claimed job has moved on to its next
-- occurrence) of each partition in :partitions: one probe of the due index per partition. Among
-- jobs due at the same instant the index's order decides, which stays the same while nobody
-- claims (so an unchanged head means nobody is claiming there).
SELECT p.partition, d.id, d.next_run_us FROM unnest(:partitions::int[]) AS p(partition)
CROSS JOIN LATERAL (
    SELECT id, next_run_us FROM tw_jobs
    WHERE partition = p.partition AND state = 'scheduled' AND next_run_us <= :now
    ORDER BY next_run_us LIMIT 1
) d
ORDER BY p.partition

-- name: delete_job_and_runs
-- Delete a job, its runs and their attempts, its backfills and its ledger, in one statement (no
-- foreign keys: a trigger cost ~20 ms per 1,000-fire claim). Returns the job's id, or nothing if
-- it did not exist.
WITH runs AS (DELETE FROM tw_runs WHERE job_id = :id RETURNING id),
queued AS (DELETE FROM tw_queue WHERE run_id IN (SELECT id FROM runs)),
attempts AS (DELETE FROM tw_attempts WHERE run_id IN (SELECT id FROM runs)),
backfills AS (DELETE FROM tw_backfills WHERE job_id = :id),
ledger AS (DELETE FROM tw_occurrences WHERE job_id = :id)
DELETE FROM tw_jobs WHERE id = :id RETURNING id

-- fragment: db_now
-- The database's clock in epoch microseconds: leases expire by it, whoever's clock is off.
(extract(epoch FROM clock_timestamp()) * 1000000)::bigint

-- fragment: claim_jobs
-- Both claims' compare-and-set and advance, as CTEs: the plans arrive as arrays; `locked`
-- keeps the jobs still scheduled at the plan's fence and next_run_us, skipping rows another
-- scheduler holds (SKIP LOCKED: skipped, not waited for); `allowed` keeps those whose
-- partition the claimer holds at the plan's epoch by the database's clock (a plan without an
-- epoch is not checked), or that are overdue (before :overdue_before: a takeover of a dead
-- owner's work); `claimed` bumps each fence and advances the job (or completes it), recording
-- :owner as its last claimer and the partition's epoch for the run, and counting a fire for
-- max_runs. `locked` rows that are not
-- `allowed` are the stale-epoch refusals the statements report.
--
-- Arrays that would hold only NULLs for the whole batch (no plan past its misfire grace, no
-- overlap policy, no catch-up: an on-time batch) arrive empty: unnest pads them with NULLs.
--
-- Overlap policies (docs/policies.md): a plan's `overlap` is NULL for allow (and for a plan
-- that fires nothing), and then `decided` reads nothing more. Otherwise it
-- looks up the job's runs still going through tw_queue_guarded: the oldest active one, locked
-- (a finish that commits meanwhile drops it: the next one, or none, is taken), and the oldest
-- held back by buffer_one (lease end :held). The CASE is domain/overlap.py's `decide`:
-- `skip` advances the job without a fire and records a ledger row (`skipped`); `hold` inserts
-- the run held back and marks the run it waits for (`marked`: that run's finish releases it);
-- `cancel` cancels every pending run of the job (`cancelled`, with an attempt row for those
-- that were leased) and inserts the new run.
{claim_plan},
{claim_lock},
{claim_decide},
{claim_advance},
{claim_overlap_effects},
{claim_refused}

-- fragment: claim_jobs_plain
-- claim_jobs for a batch whose every plan is plain (docs/adr/0021): on time, overlap allow, no
-- ledger range, no skip target. The same compare-and-set and advance, without the policy
-- columns, the overlap look-ups and their CTEs: a burst's batches are all plain, and each of
-- those pieces cost it time to plan and run even when it did nothing.
{claim_plan_plain},
{claim_lock},
decided AS (SELECT a.*, 'fire'::text AS verdict, NULL::bigint AS blocker FROM allowed a),
{claim_advance},
{claim_refused}

-- fragment: claim_plan
WITH plan AS (
    SELECT * FROM unnest(:ids::text[], :fences::bigint[], :expected_us::bigint[],
                         :new_next_us::bigint[], :new_states::text[], :fired_us::bigint[],
                         :coalesced::int[], :keys::text[], :epochs::bigint[],
                         :missed_first_us::bigint[], :missed_last_us::bigint[],
                         :overlaps::text[], :skip_next_us::bigint[], :missed_counts::bigint[],
                         :catchup_first_us::bigint[], :catchup_last_us::bigint[],
                         :catchup_totals::bigint[], :throttled_ms::bigint[])
        AS p(id, fence, expected_us, new_next_us, new_state, fired_us, coalesced, key, epoch,
             missed_first_us, missed_last_us, overlap, skip_next_us, missed_count,
             catchup_first_us, catchup_last_us, catchup_total, throttled_ms)
)

-- fragment: claim_plan_plain
-- A plain batch's plans: nine arrays; the policy columns are NULL for every plan (and so is
-- throttled_ms: a plan the fire ceiling held back is not plain, ADR 0025).
WITH plan AS (
    SELECT p.*, NULL::bigint AS missed_first_us, NULL::bigint AS missed_last_us,
           NULL::text AS overlap, NULL::bigint AS skip_next_us, NULL::bigint AS missed_count,
           NULL::bigint AS catchup_first_us, NULL::bigint AS catchup_last_us,
           NULL::bigint AS catchup_total, NULL::bigint AS throttled_ms
    FROM unnest(:ids::text[], :fences::bigint[], :expected_us::bigint[],
                :new_next_us::bigint[], :new_states::text[], :fired_us::bigint[],
                :coalesced::int[], :keys::text[], :epochs::bigint[])
        AS p(id, fence, expected_us, new_next_us, new_state, fired_us, coalesced, key, epoch)
)

-- fragment: claim_lock
locked AS (
    SELECT p.*, j.partition FROM tw_jobs j JOIN plan p ON j.id = p.id
    WHERE j.id = ANY(:ids::text[])
      AND j.state = 'scheduled' AND j.fence_token = p.fence AND j.next_run_us = p.expected_us
    FOR UPDATE OF j SKIP LOCKED
),
allowed AS (
    SELECT l.*, pl.epoch AS lease_epoch FROM locked l
    LEFT JOIN tw_partition_leases pl ON pl.partition = l.partition
    WHERE l.epoch IS NULL OR l.expected_us < :overdue_before
       OR (pl.owner = :owner AND pl.epoch = l.epoch AND pl.expires_us > {db_now})
)

-- fragment: claim_decide
-- The look-ups are CASE branches, evaluated only when taken; OFFSET 0 keeps the subquery
-- whole, so each runs once per plan however often the CASE below names its result.
decided AS (
    SELECT b.*, CASE
            WHEN b.active_id IS NULL AND b.held_id IS NULL THEN 'fire'
            WHEN b.overlap = 'cancel_previous' THEN 'cancel'
            WHEN b.overlap = 'buffer_one' AND b.held_id IS NULL THEN 'hold'
            ELSE 'skip'
        END AS verdict,
        CASE WHEN b.overlap = 'buffer_one' AND b.held_id IS NOT NULL THEN b.held_id
             ELSE coalesce(b.active_id, b.held_id) END AS blocker
    FROM (
        SELECT a.*,
            -- The job's guarded pending runs are found through tw_queue_guarded; the run
            -- still going is locked on tw_runs (a lock waits there, never on tw_queue first:
            -- ADR 0030's lock order).
            CASE WHEN a.overlap IS NOT NULL THEN (
                SELECT r.id FROM tw_runs r
                WHERE r.id = ANY(ARRAY(
                        SELECT q.run_id FROM tw_queue q
                        WHERE q.guarded_job = a.id AND q.lease_until_us <> :held))
                  AND r.status = 'pending'
                ORDER BY r.id LIMIT 1 FOR UPDATE) END AS active_id,
            -- An aggregate over the job's queue rows, so that it reads them through
            -- tw_queue_guarded, never the held runs of every job through tw_queue_lease.
            CASE WHEN a.overlap IS NOT NULL THEN (
                SELECT min(q.run_id) FILTER (WHERE q.lease_until_us = :held) FROM tw_queue q
                WHERE q.guarded_job = a.id) END AS held_id
        FROM allowed a OFFSET 0
    ) b
)

-- fragment: claim_advance
claimed AS (
    UPDATE tw_jobs j
    SET fence_token = j.fence_token + 1,
        -- A skipped max_runs-th fire is no fire: the job goes on (skip_next_us).
        next_run_us = CASE WHEN l.verdict = 'skip' AND l.skip_next_us IS NOT NULL
                           THEN l.skip_next_us ELSE l.new_next_us END,
        state = CASE WHEN l.verdict = 'skip' AND l.skip_next_us IS NOT NULL
                     THEN 'scheduled' ELSE l.new_state END,
        last_fired_us = coalesce(CASE WHEN l.verdict = 'skip' THEN NULL ELSE l.fired_us END,
                                 j.last_fired_us),
        claimed_by = :owner, claimed_us = :now,
        fired_count = j.fired_count
            + (CASE WHEN l.fired_us IS NULL OR l.verdict = 'skip' THEN 0 ELSE 1 END)
    FROM decided l
    WHERE j.id = l.id
    RETURNING j.id, j.fence_token, l.fired_us, l.coalesced, l.key, l.lease_epoch,
              l.missed_first_us, l.missed_last_us, l.missed_count, l.catchup_first_us,
              l.catchup_last_us, l.catchup_total, l.verdict, l.blocker,
              CASE WHEN l.overlap IS NULL THEN 0 ELSE 1 END AS guarded, l.throttled_ms,
              -- A jittered or windowed occurrence (ADR 0022) was planned after its nominal
              -- instant: the job's next_run_us it was due at. NULL: fire at the instant.
              CASE WHEN l.expected_us > l.fired_us THEN l.expected_us END AS planned_us
)

-- fragment: claim_overlap_effects
-- A skip right after a skip for the same blocking run extends that ledger row (the job's
-- latest, through tw_occurrences_job): the run was going all along, so no occurrence came
-- between them. Any other skip gets a row of its own.
skips AS (
    SELECT c.id, c.fired_us, c.blocker,
           (SELECT x.id FROM tw_occurrences x WHERE x.job_id = c.id
            ORDER BY x.first_us DESC LIMIT 1) AS latest
    FROM claimed c WHERE c.verdict = 'skip' AND c.fired_us IS NOT NULL
),
extended AS (
    UPDATE tw_occurrences o SET last_us = k.fired_us, count = o.count + 1, recorded_us = :now
    FROM skips k
    WHERE o.id = ANY(ARRAY(SELECT latest FROM skips)) AND o.id = k.latest
      AND o.reason = 'skipped_overlap' AND o.run_id = k.blocker
    RETURNING o.job_id
),
skipped AS (
    INSERT INTO tw_occurrences (job_id, first_us, last_us, count, reason, run_id, recorded_us)
    SELECT id, fired_us, fired_us, 1, 'skipped_overlap', blocker, :now FROM skips
    WHERE id NOT IN (SELECT job_id FROM extended)
),
marked AS (
    UPDATE tw_runs r SET releases_key = (
        SELECT c.key FROM claimed c WHERE c.verdict = 'hold' AND c.blocker = r.id LIMIT 1)
    WHERE r.id = ANY(ARRAY(SELECT blocker FROM claimed WHERE verdict = 'hold'))
),
cancelled AS (
    UPDATE tw_runs r SET status = 'cancelled', fence_token = r.fence_token + 1,
        finished_us = :now, error = :cancel_error, last_error = :cancel_error
    WHERE r.id = ANY(ARRAY(
            SELECT x.run_id FROM claimed c CROSS JOIN LATERAL (
                SELECT run_id FROM tw_queue WHERE guarded_job = c.id
            ) x
            WHERE c.verdict = 'cancel' ORDER BY x.run_id))
      AND r.status = 'pending'
    RETURNING r.id, r.job_id, r.attempt, r.fence_token - 1 AS fence, r.lease_owner
),
uncancelled AS (DELETE FROM tw_queue WHERE run_id = ANY(ARRAY(SELECT id FROM cancelled))),
cancelled_attempts AS (
    INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us,
                             finished_us, status, http_status, error)
    SELECT id, job_id, attempt, fence, lease_owner, :now, :now, 'cancelled', NULL, :cancel_error
    FROM cancelled WHERE lease_owner IS NOT NULL
)

-- fragment: claim_refused
refused AS (
    SELECT (SELECT count(*) FROM locked) - (SELECT count(*) FROM allowed) AS n
)

-- fragment: record_missed
-- The occurrence ledger's write of both claims: one row per claimed plan that folded or skipped
-- occurrences (missed_first_us set, only past the misfire grace), none otherwise. Coalesced
-- into the run this claim inserted, or, if the occurrence already had one (its key existed),
-- into that run (read from the statement's snapshot); skipped for misfire when nothing fired
-- (also when the overlap policy skipped the occurrence they were folded into). A fire_all
-- plan's range (missed_count set: older than its catchup_window) is skipped although it fires.
-- The same plan's catch-up backfill (`catchups`) is created here, in the claim's statement, so
-- a crash loses neither the advance nor the catch-up; its tenant is read by primary key, for
-- those plans only.
missed AS (
    INSERT INTO tw_occurrences (job_id, first_us, last_us, count, reason, run_id, recorded_us)
    SELECT c.id, c.missed_first_us, c.missed_last_us, coalesce(c.missed_count, c.coalesced),
           CASE WHEN c.fired_us IS NULL OR c.verdict = 'skip' OR c.missed_count IS NOT NULL
                THEN 'skipped_misfire' ELSE 'coalesced_into' END,
           CASE WHEN c.fired_us IS NOT NULL AND c.verdict <> 'skip' AND c.missed_count IS NULL
                THEN coalesce(
               (SELECT i.id FROM inserted i WHERE i.key = c.key),
               (SELECT r.id FROM tw_runs r WHERE r.key = c.key)) END,
           :now
    FROM claimed c
    WHERE c.missed_first_us IS NOT NULL AND coalesce(c.missed_count, c.coalesced) > 0
),
catchups AS (
    INSERT INTO tw_backfills (job_id, tenant, kind, from_us, to_us, cursor_us, total, done,
                              state, rate_per_s, created_us, updated_us, paced_us)
    SELECT c.id, (SELECT j.tenant FROM tw_jobs j WHERE j.id = c.id), 'catchup',
           c.catchup_first_us, c.catchup_last_us + 1, NULL, c.catchup_total, 0, 'running',
           :catchup_rate, :now, :now, :now
    FROM claimed c WHERE c.catchup_first_us IS NOT NULL
)

-- fragment: queue_inserted
-- The queue rows (ADR 0030) of the runs a CTE `inserted` inserted (queue_columns). A
-- hand-off at its instant, never leased, is in flight: its message may still be on its way
-- (lease_runs). A run leased at insert, held back by buffer_one or made outside the schedule
-- is not. Migration 0017 fills the queue of the runs pending before it by the same rule.
queued AS (
    INSERT INTO tw_queue (run_id, lease_until_us, in_flight, guarded_job)
    SELECT id, lease_until_us,
           attempt = 0 AND origin = 'schedule'
               AND lease_until_us = coalesce(planned_us, scheduled_us),
           CASE WHEN guarded = 1 THEN job_id END
    FROM inserted
)

-- fragment: queue_columns
-- What an insert of runs returns for queue_inserted.
id, job_id, lease_until_us, guarded, attempt, origin, planned_us, scheduled_us

-- fragment: claim_insert_leased
-- `claim`'s runs: each leased to the claimer until :lease_until at attempt 1.
inserted AS (
    INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                         coalesced, lease_owner, lease_until_us, created_us, claim_epoch,
                         guarded, planned_us, throttled_ms)
    SELECT id, key, 'schedule', fired_us, 'pending', 1, fence_token, coalesced, :owner,
           :lease_until, :now, lease_epoch, guarded, planned_us, throttled_ms
    FROM claimed WHERE fired_us IS NOT NULL AND verdict IN ('fire', 'cancel')
    ON CONFLICT (key) DO NOTHING
    RETURNING {queue_columns}, key, fence_token
),
{queue_inserted}

-- fragment: claim_fires
-- `claim`'s result: the fires. The join reads the job's columns from the statement's snapshot
-- of tw_jobs by primary key (the claim does not change them). Joining `inserted` to `claimed`
-- instead made the planner, which estimates both CTEs at one row, run a nested loop of batch x
-- batch comparisons (200 ms of 250 ms per 1,000-row claim).
SELECT i.id, i.job_id, i.key, i.scheduled_us, i.fence_token, i.attempt, j.target, j.retry_policy,
       j.webhook_secrets, j.on_failure, t.webhook_secrets AS tenant_secrets, j.tenant,
       i.planned_us, 0::bigint AS refused
FROM inserted i JOIN tw_jobs j ON j.id = i.job_id LEFT JOIN tw_tenants t ON t.tenant = j.tenant
-- One more row, with only `refused`, when the store refused plans for their epoch.
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, n
FROM refused
WHERE n > 0

-- name: claim
-- Claim, advance and record a batch of plans for an in-process executor: each new run is
-- leased to the claimer and comes back as a whole fire.
{claim_jobs},
{claim_insert_leased},
{record_missed},
-- overlap buffer_one: the run held back, unowned at attempt 0; it is no fire of this claim.
held AS (
    INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                         coalesced, lease_owner, lease_until_us, created_us, claim_epoch,
                         guarded, planned_us)
    SELECT id, key, 'schedule', fired_us, 'pending', 0, fence_token, coalesced, NULL, :held,
           :now, lease_epoch, 1, planned_us
    FROM claimed WHERE fired_us IS NOT NULL AND verdict = 'hold'
    ON CONFLICT (key) DO NOTHING
    RETURNING id, job_id
),
held_queued AS (
    INSERT INTO tw_queue (run_id, lease_until_us, in_flight, guarded_job)
    SELECT id, :held, false, job_id FROM held
)
{claim_fires}

-- name: claim_plain
-- `claim` for a batch of plain plans (claim_jobs_plain).
{claim_jobs_plain},
{claim_insert_leased}
{claim_fires}

-- fragment: claim_insert_unowned
-- `claim_hand_off`'s runs: unowned at attempt 0, leasable from their own instant (a run held
-- back by buffer_one: from :held, until its blocker's finish releases it).
inserted AS (
    INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                         coalesced, lease_owner, lease_until_us, created_us, claim_epoch,
                         guarded, planned_us, throttled_ms)
    SELECT id, key, 'schedule', fired_us, 'pending', 0, fence_token, coalesced, NULL,
           CASE WHEN verdict = 'hold' THEN :held ELSE coalesce(planned_us, fired_us) END,
           :now, lease_epoch, guarded, planned_us, throttled_ms
    FROM claimed WHERE fired_us IS NOT NULL AND verdict <> 'skip'
    ON CONFLICT (key) DO NOTHING
    RETURNING {queue_columns}, key, fence_token
),
{queue_inserted}

-- fragment: claim_envelopes
-- `claim_hand_off`'s result: only the envelope's columns, straight from the insert (no join,
-- no job text to send or decode). A run held back by buffer_one gets no envelope: nothing is
-- published for it.
SELECT id, job_id, key, scheduled_us, fence_token, attempt, 0::bigint AS refused FROM inserted
WHERE lease_until_us <> :held
-- One more row, with only `refused`, when the store refused plans for their epoch.
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, n FROM refused WHERE n > 0

-- name: claim_hand_off
-- Claim, advance and record a batch of plans for workers in other processes.
{claim_jobs},
{claim_insert_unowned},
{record_missed}
{claim_envelopes}

-- name: claim_hand_off_plain
-- `claim_hand_off` for a batch of plain plans (claim_jobs_plain).
{claim_jobs_plain},
{claim_insert_unowned}
{claim_envelopes}

-- fragment: fire_join_returning
-- A batch lease's RETURNING list: the run, and its job's and tenant's columns from one join
-- (FROM tw_jobs j LEFT JOIN tw_tenants t), not from fire_returning's five lookups by primary
-- key: every claim leaves a dead version of the job row until vacuum, and each lookup walked
-- them; with five per run the lease cost ~100 us per fire at 3,000/s.
r.id, r.job_id, r.key, r.scheduled_us, r.fence_token, r.attempt, j.target, j.retry_policy,
    j.webhook_secrets, j.on_failure, t.webhook_secrets AS tenant_secrets, j.tenant, r.planned_us

-- fragment: locked_queued
-- `locked` for the leases that search tw_queue: the runs of the queue rows a CTE `queued`
-- locked, each locked on tw_runs as well, skipping any another statement holds. ADR 0030's
-- lock order: a statement that waits for a lock takes a run's tw_runs row before its queue
-- row; the searching leases take the queue row first, and so never wait (SKIP LOCKED on
-- both). A run skipped here stays queued for the next lease.
locked AS (
    SELECT id, job_id, attempt, fence_token, lease_owner, started_us, created_us, lease_until_us,
           error
    FROM tw_runs
    WHERE id = ANY(ARRAY(SELECT run_id FROM queued)) AND status = 'pending'
    FOR UPDATE SKIP LOCKED
)

-- fragment: lease_locked
-- Both batch leases' end, after a CTE `locked` of the runs to lease as they were before it:
-- each gets fence + 1, attempt + 1, its owner, lease end and attempt start, and comes back
-- with its job's and tenant's columns; its queue row gets the same lease end; `lost` appends
-- the attempt of each one whose previous lease expired unfinished (its owner still set); on
-- the usual lease it inserts nothing.
leased AS (
    UPDATE tw_runs r SET fence_token = r.fence_token + 1, attempt = r.attempt + 1,
        lease_owner = :owner, lease_until_us = :lease_until, {attempt_start}
    FROM tw_jobs j LEFT JOIN tw_tenants t ON t.tenant = j.tenant
    WHERE r.id = ANY(ARRAY(SELECT id FROM locked)) AND j.id = r.job_id
    RETURNING {fire_join_returning}
),
requeued AS (
    UPDATE tw_queue SET lease_until_us = :lease_until, in_flight = false
    WHERE run_id = ANY(ARRAY(SELECT id FROM leased))
),
lost AS (
    {insert_lost_attempts}
    FROM locked WHERE lease_owner IS NOT NULL AND id IN (SELECT id FROM leased)
)
SELECT * FROM leased

-- name: lease_runs
-- The table queue's dequeue: lease up to :limit pending runs whose lease is free by :now,
-- soonest first (fence + 1, attempt + 1, the attempt starting at :now), skipping rows another
-- worker is leasing. A hand-off never leased (in flight: attempt 0, origin 'schedule', at its
-- instant) must also be free by :hand_offs_by: behind an external queue that is earlier, as
-- its message may still be on its way. Both bounds are one range of tw_queue_lease in
-- lease_until_us order; the second is a filter on the rows it reads. On the table queue the
-- two are equal and the filter passes every row; behind a queue it skips the hand-offs whose
-- messages are in flight (ADR 0016). A run that buffer_one held back was never published:
-- released, it is no longer in flight, and it is leased at once.
-- Every lease of this kind also takes only runs free after :after (the far past, unless a
-- worker with its room full leases beyond it the runs due after everything it holds: ADR 0029).
-- `locked` keeps the chosen rows as they were before the lease, for lease_locked.
WITH queued AS (
    SELECT run_id FROM tw_queue
    WHERE lease_until_us <= :now AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR NOT in_flight)
    ORDER BY lease_until_us LIMIT :limit FOR UPDATE SKIP LOCKED
),
{locked_queued},
{lease_locked}

-- name: lease_runs_fresh_first
-- lease_runs in three ranges of tw_queue_lease, each only as large as the ones before it left
-- room for (ADR 0026), so that a backlog (one tenant's herd claimed into the queue, a dead
-- worker's runs) does not hold back the runs coming due now:
-- 1. due: free since :fresh_from and by :due_by (the worker's now), the newest first. For the
--    first :fresh_from span after a herd's instant its runs are as fresh as anyone's; newest
--    first, a run that came due after that instant goes ahead of the herd.
-- 2. ahead: free after :due_by and by :now (the look-ahead), the soonest first. Up to
--    :ahead_first of them go before the due range (`early`): in the first rounds after a
--    herd's instant the due range is the herd, and the runs of other tenants coming due just
--    after it would otherwise wait for a round that has room left after the herd.
-- 3. backlog: free before :fresh_from, the soonest first.
WITH early AS (
    SELECT run_id FROM tw_queue
    WHERE lease_until_us <= :now AND lease_until_us > :due_by AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR NOT in_flight)
    ORDER BY lease_until_us LIMIT :ahead_first
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT run_id FROM tw_queue
    WHERE lease_until_us <= :due_by AND lease_until_us >= :fresh_from
      AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR NOT in_flight)
    ORDER BY lease_until_us DESC LIMIT (:limit - (SELECT count(*) FROM early))
    FOR UPDATE SKIP LOCKED
),
ahead AS (
    SELECT run_id FROM tw_queue
    WHERE lease_until_us <= :now AND lease_until_us > :due_by AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR NOT in_flight)
      AND run_id <> ALL(ARRAY(SELECT run_id FROM early))
    ORDER BY lease_until_us
    LIMIT (:limit - (SELECT count(*) FROM early) - (SELECT count(*) FROM due))
    FOR UPDATE SKIP LOCKED
),
backlog AS (
    SELECT run_id FROM tw_queue
    WHERE lease_until_us < :fresh_from AND lease_until_us > :after
      AND (lease_until_us <= :hand_offs_by OR NOT in_flight)
    ORDER BY lease_until_us
    LIMIT (:limit - (SELECT count(*) FROM early) - (SELECT count(*) FROM due)
           - (SELECT count(*) FROM ahead))
    FOR UPDATE SKIP LOCKED
),
queued AS (
    SELECT run_id FROM early UNION ALL SELECT run_id FROM due UNION ALL SELECT run_id FROM ahead
    UNION ALL SELECT run_id FROM backlog
),
{locked_queued},
{lease_locked}

-- max_concurrent_runs (ADR 0024). While some tenant has that limit the leases take the
-- capped forms below instead, each after lock_run_caps in the same transaction: capped leases
-- count and lease one at a time across the cluster, and each counts in a snapshot taken after
-- the previous one committed (READ COMMITTED: every statement gets a new snapshot). Without
-- any such tenant nothing here runs.

-- name: lock_run_caps
-- Become the one capped lease in progress, until this transaction ends (:key: RUN_CAPS_LOCK).
SELECT pg_advisory_xact_lock(:key)

-- fragment: room_by_tenant
-- The capped tenants (:capped, :caps) and the room each has at :now: its cap minus its runs
-- going (pending, leased to a worker, the lease live). They are counted from the queue side,
-- through the range of tw_queue_lease that is not free yet (live leases, and runs waiting
-- for their instant or their retry), each run and its job by primary key (LATERAL ... LIMIT
-- 1: not flattened, so the planner cannot start from the tenant's jobs and read their every
-- run, history included, through tw_runs_job).
caps AS (SELECT * FROM unnest(:capped::text[], :caps::bigint[]) AS c(tenant, cap)),
going AS (
    SELECT j.tenant, count(*) AS n
    FROM (SELECT run_id FROM tw_queue WHERE lease_until_us > :now) q
    CROSS JOIN LATERAL (
        SELECT job_id FROM tw_runs WHERE id = q.run_id AND lease_owner IS NOT NULL LIMIT 1) r
    CROSS JOIN LATERAL (SELECT tenant FROM tw_jobs WHERE id = r.job_id LIMIT 1) j
    WHERE j.tenant = ANY(:capped::text[])
    GROUP BY j.tenant
),
room AS (
    SELECT c.tenant, c.cap - coalesce(g.n, 0) AS room FROM caps c
    LEFT JOIN going g ON g.tenant = c.tenant
)

-- name: lease_runs_capped
-- lease_runs while some tenant has max_concurrent_runs: the same range and order, without
-- the runs of the tenants at their cap, and of each other capped tenant's at most its room.
-- A lease may return fewer than :limit while a capped tenant's runs fill the range it read;
-- that tenant is at its cap by the next lease, which reads past them.
WITH {room_by_tenant},
-- `free` reads lease_runs' range in its order, skipping the runs of the jobs of tenants at
-- their cap (a hashed set, read through tw_jobs_tenant_name: no job lookup per skipped run),
-- and reads the tenant of each run it keeps by its job's primary key (LATERAL ... LIMIT 1
-- keeps that join order: with the planner free to choose, it believed pending runs rare and
-- read every job, then each one's runs, 27 ms for a 500-run lease against 10 ms).
full_jobs AS (
    SELECT id FROM tw_jobs
    WHERE tenant = ANY(ARRAY(SELECT tenant FROM room WHERE room <= 0))
),
free AS (
    SELECT r.id, j.tenant, r.lease_until_us
    FROM (SELECT q.run_id AS id, x.job_id, q.lease_until_us FROM tw_queue q
          CROSS JOIN LATERAL (SELECT job_id FROM tw_runs WHERE id = q.run_id LIMIT 1) x
          WHERE q.lease_until_us <= :now AND q.lease_until_us > :after
            AND (q.lease_until_us <= :hand_offs_by OR NOT q.in_flight)
            AND x.job_id NOT IN (SELECT id FROM full_jobs)
          ORDER BY q.lease_until_us LIMIT :limit) r
    CROSS JOIN LATERAL (SELECT tenant FROM tw_jobs WHERE id = r.job_id LIMIT 1) j
),
chosen AS (
    SELECT k.id FROM (
        SELECT f.*, row_number() OVER (PARTITION BY f.tenant ORDER BY f.lease_until_us, f.id)
            AS nth
        FROM free f
    ) k LEFT JOIN room m ON m.tenant = k.tenant
    WHERE m.tenant IS NULL OR k.nth <= m.room
),
queued AS (
    SELECT run_id FROM tw_queue
    WHERE run_id = ANY(ARRAY(SELECT id FROM chosen)) AND lease_until_us <= :now
    ORDER BY lease_until_us, run_id FOR UPDATE SKIP LOCKED
),
{locked_queued},
{lease_locked}

-- name: lease_fenced_runs_capped
-- lease_fenced_runs while some tenant has max_concurrent_runs: of the pairs still pending at
-- their fence, a capped tenant's are leased up to its room, in the batch's order. The others
-- stay pending and unowned at their fence (their messages are acked: not lost); `refused`
-- moves a hand-off's lease end one microsecond past its instant, which tells lease_runs that
-- it is no longer in flight, so the store leaser takes it when the cap has room.
WITH given AS (
    SELECT * FROM unnest(:ids::bigint[], :fences::bigint[]) WITH ORDINALITY AS p(id, fence, n)
),
{room_by_tenant},
ranked AS (
    SELECT g.id, g.fence, j.tenant,
           row_number() OVER (PARTITION BY j.tenant ORDER BY g.n) AS nth
    FROM given g
    CROSS JOIN LATERAL (
        SELECT job_id FROM tw_runs WHERE id = g.id AND fence_token = g.fence
          AND status = 'pending' LIMIT 1) r
    CROSS JOIN LATERAL (SELECT tenant FROM tw_jobs WHERE id = r.job_id LIMIT 1) j
),
pairs AS (
    SELECT k.id, k.fence FROM ranked k LEFT JOIN room m ON m.tenant = k.tenant
    WHERE m.tenant IS NULL OR k.nth <= m.room
),
refused AS (
    UPDATE tw_runs r SET lease_until_us = r.lease_until_us + 1
    FROM ranked k JOIN room m ON m.tenant = k.tenant
    WHERE k.nth > m.room AND r.id = k.id AND r.fence_token = k.fence
      AND r.status = 'pending' AND r.lease_owner IS NULL AND r.attempt = 0
      AND r.origin = 'schedule' AND r.lease_until_us = coalesce(r.planned_us, r.scheduled_us)
    RETURNING r.id, r.lease_until_us
),
refused_queued AS (
    UPDATE tw_queue q SET lease_until_us = f.lease_until_us, in_flight = false
    FROM refused f WHERE q.run_id = f.id
),
{locked_by_fence},
{lease_locked}

-- fragment: locked_by_fence
-- `locked`: the runs named by the CTE `pairs` (id, fence) that are still pending at that
-- fence, locked. Each is reached through the primary key, one lookup per pair (LATERAL ...
-- LIMIT 1 cannot be flattened into a join), never through the queue: in a burst the
-- planner's statistics still say that pending runs are rare while 100,000 are pending, and
-- the join it planned on that belief read every pending run for each batch (ADR 0012). Pairs
-- are walked in id order, so two workers locking overlapping batches (a redelivered message)
-- queue behind each other instead of deadlocking; a waiter re-checks the fence on the row's
-- new version and finds it moved. Statements that use it update
-- `id = ANY(ARRAY(SELECT id FROM locked))` with no second check: the rows are locked. Each
-- row keeps the lease columns it had when locked (the lease records a lost attempt from them).
locked AS (
    SELECT r.* FROM (SELECT * FROM pairs ORDER BY id) w CROSS JOIN LATERAL (
        SELECT id, job_id, attempt, fence_token, lease_owner, started_us, created_us,
               lease_until_us, error
        FROM tw_runs
        WHERE id = w.id AND fence_token = w.fence AND status = 'pending'
        LIMIT 1 FOR UPDATE
    ) r
)

-- name: lease_fenced_runs
-- Lease the runs of a batch of envelopes fetched from an external queue (or one run, for
-- lease_run): each run of the (:ids, :fences) pairs still pending at that fence gets fence + 1,
-- attempt + 1 and its attempt starting at :now, in one statement; `lost` appends the attempt
-- of a previous lease that expired unfinished, as lease_runs does.
WITH pairs AS (SELECT * FROM unnest(:ids::bigint[], :fences::bigint[]) AS p(id, fence)),
{locked_by_fence},
{lease_locked}

-- name: take_back_own_leases
-- Take back the live leases of ours that a lost lease_runs reply left behind (those not in
-- :holding): the fence stays, the lease is renewed. `mine` finds them through the live range
-- of tw_queue_lease, each run by primary key; they are locked on tw_runs, waiting rather than
-- skipping, so a run is not missed for a lease TTL because a moment's lock hid it; a lock
-- that waits re-checks the row, so a run finished or leased elsewhere meanwhile drops out,
-- and the outer WHERE says so once more. The queue rows follow (ADR 0030's lock order).
WITH mine AS (
    SELECT q.run_id FROM tw_queue q
    CROSS JOIN LATERAL (
        SELECT 1 FROM tw_runs WHERE id = q.run_id AND lease_owner = :owner LIMIT 1) r
    WHERE q.lease_until_us > :now AND q.run_id <> ALL(:holding::bigint[])
    ORDER BY q.lease_until_us, q.run_id LIMIT :limit
),
taken AS (
    UPDATE tw_runs SET lease_until_us = :lease_until
    WHERE id = ANY(ARRAY(
            SELECT id FROM tw_runs
            WHERE id = ANY(ARRAY(SELECT run_id FROM mine))
              AND status = 'pending' AND lease_owner = :owner AND lease_until_us > :now
            ORDER BY id FOR UPDATE))
      AND status = 'pending' AND lease_owner = :owner AND lease_until_us > :now
    RETURNING {fire_returning}
),
requeued AS (
    UPDATE tw_queue SET lease_until_us = :lease_until, in_flight = false
    WHERE run_id = ANY(ARRAY(SELECT id FROM taken))
)
SELECT * FROM taken

-- name: release_leases
-- The live leases of :owners, processes judged gone (ADR 0035), end at :now: their runs are
-- leasable at once, as if the leases had run out (the next lease records each one's lost
-- attempt and takes a new fence, so a late outcome of the old holder is refused). `theirs`
-- finds them as take_back_own_leases finds its own, through the live range of
-- tw_queue_lease, each run by primary key; they are locked on tw_runs first (ADR 0030's lock
-- order), skipping any another statement holds: a run skipped here waits out its lease. Each
-- run carries domain/runs.py's RELEASED_ERROR until then, for its lost attempt's record.
WITH theirs AS (
    SELECT q.run_id FROM tw_queue q
    CROSS JOIN LATERAL (
        SELECT 1 FROM tw_runs
        WHERE id = q.run_id AND lease_owner = ANY(:owners::text[]) LIMIT 1) r
    WHERE q.lease_until_us > :now
),
released AS (
    UPDATE tw_runs
    SET lease_until_us = :now,
        error = 'lease released: its worker is gone (no database session left)'
    WHERE id = ANY(ARRAY(
            SELECT id FROM tw_runs
            WHERE id = ANY(ARRAY(SELECT run_id FROM theirs))
              AND status = 'pending' AND lease_owner = ANY(:owners::text[])
              AND lease_until_us > :now
            ORDER BY id FOR UPDATE SKIP LOCKED))
    RETURNING id
)
UPDATE tw_queue SET lease_until_us = :now, in_flight = false
WHERE run_id = ANY(ARRAY(SELECT id FROM released))

-- name: extend_leases
-- Heartbeat: move the lease of each pending (:ids, :fences) pair whose fence is still ours;
-- returns the pairs moved (the executor stops the fires of the others: a cancelled run).
-- The queue rows follow the runs (ADR 0030's lock order).
WITH moved AS (
    UPDATE tw_runs r SET lease_until_us = :lease_until
    FROM unnest(:ids::bigint[], :fences::bigint[]) AS l(id, fence)
    WHERE r.id = l.id AND r.fence_token = l.fence AND r.status = 'pending'
    RETURNING r.id, r.fence_token
),
requeued AS (
    UPDATE tw_queue SET lease_until_us = :lease_until, in_flight = false
    WHERE run_id = ANY(ARRAY(SELECT id FROM moved))
)
SELECT * FROM moved

-- name: finish_runs
-- Apply a batch of outcomes and append the applied ones to the attempt history, in one
-- statement: an outcome applies only if its run is still pending at its fence. A success is
-- recorded on its run alone (the start, the finish, the result and `finished_by`): its row in
-- tw_attempts would repeat the run's, at one row and three index entries per fire; the view
-- tw_attempt_history shows it from the run (ADR 0033).
WITH o AS (
    SELECT * FROM unnest(:ids::bigint[], :fences::bigint[], :statuses::text[],
                         :started_us::bigint[], :finished_us::bigint[], :http_statuses::int[],
                         :errors::text[], :dead_us::bigint[], :retry_us::bigint[],
                         :job_ids::text[], :attempts::int[], :workers::text[])
        AS o(id, fence, status, started_us, finished_us, http_status, error, dead_us,
             retry_us, job_id, attempt, worker)
),
pairs AS (SELECT id, fence FROM o),
{locked_by_fence},
applied AS (
    UPDATE tw_runs r SET status = o.status, started_us = o.started_us,
        finished_us = o.finished_us, http_status = o.http_status, error = o.error,
        last_error = o.error, dead_lettered_us = o.dead_us, lease_owner = NULL,
        lease_until_us = o.retry_us, finished_by = o.worker
    FROM o
    WHERE r.id = ANY(ARRAY(SELECT id FROM locked)) AND r.id = o.id AND r.fence_token = o.fence
    RETURNING r.id, r.fence_token, r.status, r.finished_us, r.releases_key, r.lease_until_us
),
-- The queue rows follow (ADR 0030): a run that ended leaves the queue, a retry waits in it
-- for its backoff.
dequeued AS (
    DELETE FROM tw_queue WHERE run_id = ANY(ARRAY(SELECT id FROM applied WHERE status <> 'pending'))
),
retried AS (
    UPDATE tw_queue q SET lease_until_us = a.lease_until_us, in_flight = false
    FROM applied a WHERE q.run_id = a.id AND a.status = 'pending'
),
-- overlap buffer_one: a run that ended releases the run held back behind it (releases_key is
-- NULL on every other run: nothing is looked up for them), leasable from that instant.
released AS (
    UPDATE tw_runs h SET lease_until_us = (
        SELECT a.finished_us FROM applied a WHERE a.releases_key = h.key LIMIT 1)
    WHERE h.key = ANY(ARRAY(SELECT releases_key FROM applied
                            WHERE releases_key IS NOT NULL AND status <> 'pending'))
      AND h.status = 'pending' AND h.lease_until_us = :held
    RETURNING h.id, h.lease_until_us
),
released_queued AS (
    UPDATE tw_queue q SET lease_until_us = x.lease_until_us, in_flight = false
    FROM released x WHERE q.run_id = x.id
),
recorded AS (
    INSERT INTO tw_attempts (run_id, job_id, attempt, fence_token, worker, started_us,
                             finished_us, status, http_status, error)
    SELECT o.id, o.job_id, o.attempt, o.fence, o.worker, o.started_us, o.finished_us, o.status,
           o.http_status, o.error
    -- Joined on the fence too: a stale outcome of the same run in this batch must not ride
    -- along on the current one's update (the chaos harness found two successes recorded that
    -- way).
    FROM o JOIN applied a ON a.id = o.id AND a.fence_token = o.fence
    WHERE o.status <> 'succeeded'
)
SELECT id AS run_id, 0::bigint AS released FROM applied
-- One more row, with only `released`, when runs held back were released (the store wakes
-- the workers that lease from it).
UNION ALL
SELECT NULL, count(*) FROM released HAVING count(*) > 0

-- name: redrive
-- Put dead letters (:ids; NULL: all) back to pending, leasable at :now.
-- Each gets its queue row back (ADR 0030); the count of those is the statement's.
WITH back AS (
    UPDATE tw_runs SET status = 'pending', dead_lettered_us = NULL, lease_owner = NULL,
        lease_until_us = :now
    WHERE dead_lettered_us IS NOT NULL AND (:ids::bigint[] IS NULL OR id = ANY(:ids::bigint[]))
    RETURNING id, job_id, guarded
)
INSERT INTO tw_queue (run_id, lease_until_us, in_flight, guarded_job)
SELECT id, :now, false, CASE WHEN guarded = 1 THEN job_id END FROM back

-- name: purge_dead_letters
-- Take dead letters (:ids; NULL: all) out of the queue; they stay failed in the history.
UPDATE tw_runs SET dead_lettered_us = NULL
WHERE dead_lettered_us IS NOT NULL AND (:ids::bigint[] IS NULL OR id = ANY(:ids::bigint[]))

-- History partitions of tw_attempts (ADR 0007; tickwork.store.postgres.history applies them).

-- fragment: history_columns
-- Every column of tw_attempts, as rows move between partitions.
id, run_id, job_id, attempt, fence_token, worker, started_us, finished_us, status,
http_status, error

-- name: prune_default_attempts
-- Delete a batch of attempts older than :cutoff from the DEFAULT partition only, except dead
-- letters' (daily partitions are never deleted row by row: they are dropped whole).
DELETE FROM tw_attempts_default WHERE id IN (
    SELECT a.id FROM tw_attempts_default a
    WHERE a.finished_us < :cutoff
      AND NOT EXISTS (SELECT 1 FROM tw_runs r
                      WHERE r.id = a.run_id AND r.dead_lettered_us IS NOT NULL)
    ORDER BY a.finished_us LIMIT :limit)

-- name: try_maintenance_lock
-- Become the one process maintaining partitions in this transaction, or learn that another is.
SELECT pg_try_advisory_xact_lock(:key)

-- name: set_local_lock_timeout
-- Bound how long this maintenance transaction waits for a table lock ({timeout}, e.g. '2s').
SET LOCAL lock_timeout = '{timeout}'

-- name: list_partitions
-- Every partition of tw_attempts, with its bound as PostgreSQL prints it.
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = 'tw_attempts'::regclass

-- name: lock_history_parent
-- Lock tw_attempts before its DEFAULT partition, the order an insert takes them ({mode}:
-- SHARE UPDATE EXCLUSIVE to attach, ACCESS EXCLUSIVE to detach and drop).
LOCK TABLE ONLY tw_attempts IN {mode} MODE

-- name: lock_history_default
-- Lock the DEFAULT partition, after its parent.
LOCK TABLE tw_attempts_default IN ACCESS EXCLUSIVE MODE

-- name: create_partition
-- A new day's table, shaped like tw_attempts (LIKE copies columns and NOT NULLs, not the
-- identity: ids keep coming from the parent's).
CREATE TABLE {partition} (LIKE tw_attempts)

-- name: move_into_partition
-- Move the day's rows [:from_us, :to_us) out of DEFAULT into the new partition.
WITH moved AS (
    DELETE FROM tw_attempts_default WHERE finished_us >= :from_us AND finished_us < :to_us
    RETURNING {history_columns})
INSERT INTO {partition} ({history_columns}) SELECT {history_columns} FROM moved

-- name: attach_partition
-- Attach the filled day; the bounds are tickwork's own integers ({from_us}, {to_us}), since
-- ATTACH cannot take parameters.
ALTER TABLE tw_attempts ATTACH PARTITION {partition} FOR VALUES FROM ({from_us}) TO ({to_us})

-- name: detach_partition
-- Detach an expired day before dropping it.
ALTER TABLE tw_attempts DETACH PARTITION {partition}

-- name: keep_dead_letter_attempts
-- Copy the attempts of dead-lettered runs out of a detached day back into tw_attempts (they
-- land in DEFAULT, where prune_default_attempts deletes them once redriven or purged).
INSERT INTO tw_attempts ({history_columns})
SELECT {history_columns} FROM {partition} a
WHERE EXISTS (SELECT 1 FROM tw_runs r WHERE r.id = a.run_id AND r.dead_lettered_us IS NOT NULL)

-- name: drop_partition
-- Drop a detached day: O(1), and no dead tuples left to vacuum.
DROP TABLE {partition}

-- Partition leases and nodes (ADR 0015). Expiry is by the database's clock.

-- fragment: lease_columns
-- Every column of tw_partition_leases, and the database's clock when read.
partition, owner, epoch, expires_us, renewed_us, {db_now} AS now_us

-- name: list_partition_leases
-- Every partition's lease, with the database's clock.
SELECT {lease_columns} FROM tw_partition_leases ORDER BY partition

-- name: renew_partition_leases
-- Renew the (partition, epoch) leases `:owner` holds; a lease that changed hands meanwhile
-- (its epoch moved on) is not renewed, and not returned.
UPDATE tw_partition_leases l SET expires_us = {db_now} + :ttl_us, renewed_us = {db_now}
FROM unnest(:partitions::int[], :epochs::bigint[]) AS k(partition, epoch)
WHERE l.partition = k.partition AND l.epoch = k.epoch AND l.owner = :owner
RETURNING l.partition, l.owner, l.epoch, l.expires_us, l.renewed_us, {db_now} AS now_us

-- name: acquire_partition_leases
-- Take the given partitions that nobody holds (released, or their lease expired by the
-- database's clock): each one's epoch goes up by one.
UPDATE tw_partition_leases
SET owner = :owner, epoch = epoch + 1, expires_us = {db_now} + :ttl_us, renewed_us = {db_now}
WHERE partition = ANY(:partitions::int[]) AND (owner IS NULL OR expires_us <= {db_now})
RETURNING {lease_columns}

-- name: release_partition_leases
-- Release the given partitions if `:owner` holds them (the epoch stays: the next owner bumps
-- it).
UPDATE tw_partition_leases SET owner = NULL, expires_us = 0
WHERE owner = :owner AND partition = ANY(:partitions::int[])

-- name: heartbeat_node
-- Announce a node: insert it, or renew its heartbeat and figures; `inserted` says which (xmax
-- is 0 only on a row this statement inserted).
INSERT INTO tw_nodes (id, role, host, pid, version, started_us, heartbeat_us, expires_us, info)
VALUES (:id, :role, :host, :pid, :version, :started_us, {db_now}, {db_now} + :ttl_us, :info)
ON CONFLICT (id, role) DO UPDATE SET heartbeat_us = excluded.heartbeat_us,
    expires_us = excluded.expires_us, info = excluded.info
RETURNING (xmax = 0) AS inserted

-- name: list_nodes
-- The nodes whose heartbeat is live (all of them with :all), with the database's clock.
SELECT {node_columns}, {db_now} AS now_us FROM tw_nodes
WHERE :all OR expires_us > {db_now} ORDER BY id, role

-- API keys and tenants (ADR 0018). Orders by name use COLLATE "C": code point order, as in
-- SQLite and in Python, whatever the database's collation.

-- name: list_keys
-- Every key, or the keys of :tenant, by id.
SELECT {key_columns} FROM tw_api_keys
WHERE CAST(:tenant AS TEXT) IS NULL OR tenant = :tenant
ORDER BY id COLLATE "C"

-- name: touch_keys
-- Record when keys were last used, for (:ids, :used_us) pairs: each named key's last_used_us
-- becomes the later of the stored and the given instant (greatest() skips a NULL). Unknown ids
-- match no row.
UPDATE tw_api_keys k SET last_used_us = greatest(k.last_used_us, u.used_us)
FROM unnest(:ids::text[], :used_us::bigint[]) AS u(id, used_us)
WHERE k.id = u.id

-- name: list_tenants
-- Every tenant, by name.
SELECT {tenant_columns} FROM tw_tenants ORDER BY tenant COLLATE "C"

-- name: lock_tenant_limits
-- A tenant's limits, its row locked until the transaction ends: create_job of a tenant with a
-- job quota takes it before counting, so concurrent creates (from any API process) count one
-- after the other and never pass the quota together. No row: no such tenant.
SELECT limits FROM tw_tenants WHERE tenant = :tenant FOR UPDATE

-- name: delete_tenant
-- Delete :tenant unless a job names it, and revoke at :now its keys not revoked already, in
-- one statement. The tenant's row is locked first (a concurrent delete makes this one find
-- nothing). Returns whether it existed, how many jobs name it (nothing changed unless 0) and
-- how many keys it revoked.
WITH target AS (SELECT tenant FROM tw_tenants WHERE tenant = :tenant FOR UPDATE),
jobs AS (SELECT count(*) AS n FROM tw_jobs WHERE tenant = :tenant),
gone AS (
    DELETE FROM tw_tenants t USING target, jobs
    WHERE t.tenant = target.tenant AND jobs.n = 0
    RETURNING t.tenant
),
revoked AS (
    UPDATE tw_api_keys SET revoked_us = :now
    WHERE tenant IN (SELECT tenant FROM gone) AND revoked_us IS NULL
    RETURNING id
)
SELECT (SELECT count(*) FROM target) AS found, (SELECT n FROM jobs) AS jobs,
       (SELECT count(*) FROM revoked) AS revoked

-- name: record_audit
-- Append a batch of audit entries, given as one array per column, in one statement: the rows
-- are inserted in the order given (ORDINALITY), so their identity ids ascend in that order.
INSERT INTO tw_audit (at_us, key_id, key_prefix, role, actor_tenant, action, resource, tenant,
                      status, client)
SELECT e.at_us, e.key_id, e.key_prefix, e.role, e.actor_tenant, e.action, e.resource, e.tenant,
       e.status, e.client
FROM unnest(:at_us::bigint[], :key_id::text[], :key_prefix::text[], :role::text[],
            :actor_tenant::text[], :action::text[], :resource::text[], :tenant::text[],
            :status::int[], :client::text[])
    WITH ORDINALITY AS e(at_us, key_id, key_prefix, role, actor_tenant, action, resource, tenant,
                         status, client, n)
ORDER BY e.n

-- name: advance_backfill
-- The lane's slice of one backfill in one statement: the compare-and-set on its cursor (it
-- moves only while running at the cursor the slice was planned from and, one at a time, while
-- its job has no pending run), then the slice's runs, unowned and leasable at once like a
-- manual run, under keys of their own origin (an occurrence that has its run already is
-- skipped: replaying a range never duplicates). Returns whether it moved and how many runs
-- it inserted.
WITH moved AS (
    UPDATE tw_backfills SET cursor_us = :cursor_us, done = done + :n, state = :state,
        paced_us = :paced_us, updated_us = :now
    WHERE id = :id AND state = 'running' AND cursor_us IS NOT DISTINCT FROM :expected_us
      AND (NOT :one_at_a_time OR NOT EXISTS (
            SELECT 1 FROM tw_queue q WHERE q.guarded_job = tw_backfills.job_id))
    RETURNING job_id
),
inserted AS (
    INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                         coalesced, lease_owner, lease_until_us, created_us, guarded)
    SELECT j.id, o.key, :origin, o.at_us, 'pending', 0, j.fence_token, 0, NULL, :now, :now,
           CASE WHEN :one_at_a_time THEN 1 ELSE 0 END
    FROM moved m JOIN tw_jobs j ON j.id = m.job_id,
         unnest(:keys::text[], :at_us::bigint[]) AS o(key, at_us)
    ON CONFLICT (key) DO NOTHING
    RETURNING {queue_columns}
),
{queue_inserted}
SELECT (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM inserted) AS inserted

-- The pending runs' queue (ADR 0030): what the reads below count or look for in tw_runs on
-- SQLite, they read from tw_queue here, one row per pending run.

-- name: insert_manual_run
-- Record an out-of-schedule occurrence at :now, unowned and leasable at once (guarded when its
-- job has an overlap policy: a manual run still going counts as the job's run still going),
-- and its queue row.
WITH inserted AS (
    INSERT INTO tw_runs (job_id, key, origin, scheduled_us, status, attempt, fence_token,
                         coalesced, lease_owner, lease_until_us, created_us, guarded)
    SELECT id, :key, 'manual', :now, 'pending', 0, fence_token, 0, NULL, :now, :now,
           CASE WHEN overlap = 'allow' THEN 0 ELSE 1 END
    FROM tw_jobs WHERE id = :job_id
    ON CONFLICT (key) DO NOTHING
    RETURNING {queue_columns}
)
INSERT INTO tw_queue (run_id, lease_until_us, in_flight, guarded_job)
SELECT id, lease_until_us, false, CASE WHEN guarded = 1 THEN job_id END FROM inserted

-- name: next_lease
-- The earliest instant at which some pending run's lease is, or becomes, free (of those
-- later than :after, unless it is NULL): the first entry of tw_queue_lease past :after. A run
-- held back by overlap buffer_one (lease end :held) has no such instant until it is released.
SELECT min(lease_until_us) AS next_us FROM tw_queue
WHERE (CAST(:after AS BIGINT) IS NULL OR lease_until_us > :after) AND lease_until_us < :held

-- name: prune_runs
-- Delete a batch of finished runs (not dead letters) that finished before :cutoff, found
-- through tw_runs_created (a run is created before it finishes; tw_runs keeps no index on the
-- finish time, so that an outcome's update is HOT: ADR 0030).
DELETE FROM tw_runs WHERE id IN (
    SELECT id FROM tw_runs
    WHERE dead_lettered_us IS NULL AND created_us < :cutoff
      AND status <> 'pending' AND finished_us < :cutoff
    LIMIT :limit)

-- name: pending_runs
-- How many runs are pending, leased or not (stats): the queue's rows.
SELECT count(*) AS n FROM tw_queue

-- name: oldest_leasable
-- When the longest-waiting leasable run became leasable (the queue's oldest waiting fire).
-- The first entry of tw_queue_lease.
SELECT min(lease_until_us) AS since_us FROM tw_queue WHERE lease_until_us <= :now

-- name: leasable_runs
-- The table queue's depth: pending runs a worker could lease at :now.
SELECT count(*) AS n FROM tw_queue WHERE lease_until_us <= :now

-- name: queue_mismatches
-- ADR 0030's invariant, for tests and the chaos harness: the runs whose queue row is missing,
-- extra or different from what tw_runs says (one row per pending run, the same lease end,
-- in flight by the rule of queue_inserted, the job's id when guarded). Empty when it holds.
SELECT coalesce(r.id, q.run_id) AS run_id, r.status, r.lease_until_us,
       q.lease_until_us AS queued_until, q.in_flight, q.guarded_job
FROM tw_runs r FULL JOIN tw_queue q ON q.run_id = r.id
WHERE (r.status = 'pending') IS DISTINCT FROM (q.run_id IS NOT NULL)
   OR (q.run_id IS NOT NULL AND (
        q.lease_until_us IS DISTINCT FROM r.lease_until_us
        OR q.in_flight IS DISTINCT FROM (
            r.attempt = 0 AND r.origin = 'schedule'
            AND r.lease_until_us = coalesce(r.planned_us, r.scheduled_us))
        OR q.guarded_job IS DISTINCT FROM CASE WHEN r.guarded = 1 THEN r.job_id END))
