"""Herd shaping: a schedule's jitter or flexible window, and each run's planned instant.

- tw_jobs.jitter_ms, tw_jobs.window_ms: ADR 0022; 0 (every existing row) shifts nothing.
  A shifted job's next_run_us is the planned instant of its next occurrence; the nominal one
  is recomputed from it (timing/shift.py), not stored.
- tw_runs.planned_us: the instant a run's occurrence was planned to fire at, when that is not
  its scheduled (nominal) instant; NULL otherwise (every existing row, every unshifted run).

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE tw_jobs ADD COLUMN jitter_ms BIGINT NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE tw_jobs ADD COLUMN window_ms BIGINT NOT NULL DEFAULT 0")
    op.execute("ALTER TABLE tw_runs ADD COLUMN planned_us BIGINT")


def downgrade() -> None:
    op.execute("ALTER TABLE tw_runs DROP COLUMN planned_us")
    op.execute("ALTER TABLE tw_jobs DROP COLUMN window_ms")
    op.execute("ALTER TABLE tw_jobs DROP COLUMN jitter_ms")
