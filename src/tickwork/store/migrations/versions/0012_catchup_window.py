"""Misfire fire_all catches up through the paced lane, at most `catchup_window` back.

- tw_jobs.catchup_window_ms: how far back a fire_all job found late replays its missed
  occurrences (a catch-up backfill, tw_backfills kind 'catchup'); older ones are skipped.
  Every existing row gets the default, a day.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE tw_jobs ADD COLUMN catchup_window_ms BIGINT NOT NULL DEFAULT 86400000")


def downgrade() -> None:
    op.execute("ALTER TABLE tw_jobs DROP COLUMN catchup_window_ms")
