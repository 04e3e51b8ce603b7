"""Fair claims under overload: each job's priority, and a due index per tenant.

- tw_jobs.priority: 1..9, higher first when more is due than a tick can claim (5, the middle,
  for every existing row).
- tw_jobs_fair (tenant, priority, next_run_us) WHERE state = 'scheduled': what a scheduler
  reads when it is behind, per tenant and priority level, to share a batch fairly among the
  tenants (scheduler/fairness.py). The due index (partition, next_run_us) still serves every
  tick that keeps up.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE tw_jobs ADD COLUMN priority SMALLINT NOT NULL DEFAULT 5")
    op.execute(
        "CREATE INDEX tw_jobs_fair ON tw_jobs (tenant, priority, next_run_us)"
        " WHERE state = 'scheduled'"
    )


def downgrade() -> None:
    op.execute("DROP INDEX tw_jobs_fair")
    op.execute("ALTER TABLE tw_jobs DROP COLUMN priority")
