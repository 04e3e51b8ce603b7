"""Per-tenant destination lists (issue 19).

- tw_tenants.egress: the hosts a tenant's webhooks and alerts may (allow) or may not (deny)
  reach, as JSON `{"allow": [...], "deny": [...]}` (patterns: domain/egress.py); NULL, as for
  every existing tenant, means no lists. Read by the API when a job is created or changed and
  by workers at fire time (a short cache, not the claim's join).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE tw_tenants ADD COLUMN egress TEXT")


def downgrade() -> None:
    op.execute("ALTER TABLE tw_tenants DROP COLUMN egress")
