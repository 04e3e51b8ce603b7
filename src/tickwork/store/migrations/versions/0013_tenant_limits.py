"""Per-tenant limits (issue 21).

- tw_tenants.limits: the tenant's quotas and rates as JSON, only the limits that are set
  (`{"max_jobs": 1000, "max_api_rps": 50}`; domain/tenant_limits.py); NULL, as for every
  existing tenant, means no limits. Read by the API when a job is created (the quota, under a
  lock of the tenant's row on PostgreSQL) and, through a short cache, on every request of a
  tenant's key (its request rate).

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE tw_tenants ADD COLUMN limits TEXT")


def downgrade() -> None:
    op.execute("ALTER TABLE tw_tenants DROP COLUMN limits")
