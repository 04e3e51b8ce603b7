"""Overlap policies (issue 20): what the claim needs to see a job's run still going.

- tw_runs.guarded: 1 on the runs of a job whose overlap policy is not `allow` (set when the run
  is inserted), 0 on every other run.
- tw_runs_active: the pending guarded runs of each job. A claim for a job whose overlap policy
  is not `allow` probes it (skip, buffer_one and cancel_previous all ask "is a run of this job
  still going?"). Only guarded runs enter it, so the runs of `allow` jobs (nearly all of them,
  and every one-shot) cost it nothing: an index over every pending run measured a share of the
  burst's fires per second (docs/benchmarks.md).
- tw_runs.releases_key: on the run that was still going when overlap buffer_one held a newer
  occurrence back, the held run's occurrence key. finish_runs releases that run when this one
  ends, through the key's unique index; a NULL (every other run) costs nothing.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE tw_runs ADD COLUMN releases_key TEXT")
    op.execute("ALTER TABLE tw_runs ADD COLUMN guarded INTEGER NOT NULL DEFAULT 0")
    op.execute(
        "CREATE INDEX tw_runs_active ON tw_runs (job_id) WHERE status = 'pending' AND guarded = 1"
    )


def downgrade() -> None:
    op.execute("DROP INDEX tw_runs_active")
    op.execute("ALTER TABLE tw_runs DROP COLUMN guarded")
    op.execute("ALTER TABLE tw_runs DROP COLUMN releases_key")
