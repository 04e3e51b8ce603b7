"""The global fire ceiling's record on each run (issue 21, ADR 0025).

- tw_runs.throttled_ms: how much later than its instant the occurrence was claimed because
  the fire ceiling held it back (ms); NULL, as for every existing run, means not throttled.
  Written by the claim, only for throttled plans (they are not plain: ADR 0021), and read
  with the run.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE tw_runs ADD COLUMN throttled_ms BIGINT")


def downgrade() -> None:
    op.execute("ALTER TABLE tw_runs DROP COLUMN throttled_ms")
