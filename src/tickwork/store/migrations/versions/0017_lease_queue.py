"""A narrow lease queue beside tw_runs, on PostgreSQL (issue 22, ADR 0030).

PostgreSQL only; on SQLite this revision changes nothing (ADR 0030 says why).

- tw_queue: one row per pending run, holding what the leases search by: the run's lease end
  (`lease_until_us`, the same value as on its tw_runs row), whether it is a hand-off at its
  instant that no worker leased yet (`in_flight`: its message may still be on its way), and
  its job's id when the run is guarded by an overlap policy (`guarded_job`). The statements
  that insert, lease, retry, release, finish or cancel a pending run write its queue row in
  the same statement; a run that is no longer pending has none.
- tw_runs loses the indexes that named the columns a lease or an outcome changes:
  tw_runs_pending (lease_until_us, partial on status), tw_runs_active (partial on status) and
  tw_runs_finished (finished_us, partial on status). With them gone, and pages half empty
  (fillfactor 50), the lease's and the outcome's updates of tw_runs are HOT: no new index
  entries. tw_queue_lease and tw_queue_guarded take the first two's place.
- tw_runs_created: retention's index, by creation time (which never changes), instead of
  tw_runs_finished.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

QUEUE = """
CREATE TABLE tw_queue (
    run_id         BIGINT PRIMARY KEY,
    lease_until_us BIGINT NOT NULL,
    in_flight      BOOLEAN NOT NULL,
    guarded_job    TEXT
)
"""
FILL_QUEUE = """
INSERT INTO tw_queue (run_id, lease_until_us, in_flight, guarded_job)
SELECT id, lease_until_us,
       attempt = 0 AND origin = 'schedule'
           AND lease_until_us = coalesce(planned_us, scheduled_us),
       CASE WHEN guarded = 1 THEN job_id END
FROM tw_runs WHERE status = 'pending'
"""


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(QUEUE)
    op.execute(FILL_QUEUE)
    op.execute("CREATE INDEX tw_queue_lease ON tw_queue (lease_until_us)")
    op.execute(
        "CREATE INDEX tw_queue_guarded ON tw_queue (guarded_job) WHERE guarded_job IS NOT NULL"
    )
    op.execute("DROP INDEX tw_runs_pending")
    op.execute("DROP INDEX tw_runs_active")
    op.execute("DROP INDEX tw_runs_finished")
    op.execute(
        "CREATE INDEX tw_runs_created ON tw_runs (created_us) WHERE dead_lettered_us IS NULL"
    )
    op.execute("ALTER TABLE tw_runs SET (fillfactor = 50)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE tw_runs RESET (fillfactor)")
    op.execute("DROP INDEX tw_runs_created")
    op.execute(
        "CREATE INDEX tw_runs_finished ON tw_runs (finished_us) "
        "WHERE status <> 'pending' AND dead_lettered_us IS NULL"
    )
    op.execute(
        "CREATE INDEX tw_runs_active ON tw_runs (job_id) WHERE status = 'pending' AND guarded = 1"
    )
    op.execute("CREATE INDEX tw_runs_pending ON tw_runs (lease_until_us) WHERE status = 'pending'")
    op.execute("DROP TABLE tw_queue")
