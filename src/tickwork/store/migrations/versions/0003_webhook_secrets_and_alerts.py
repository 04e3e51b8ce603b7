"""Per-job and per-tenant webhook signing secrets; per-job dead-letter alert webhooks.

- tw_jobs.webhook_secrets: the job's own signing secrets as a JSON list (NULL: none). Kept out
  of `target` so that the target, which the API echoes, never holds a secret.
- tw_jobs.on_failure: the job's alert webhook as JSON {"url", "headers"} (NULL: none).
- tw_tenants: one row per tenant that has settings. Today only webhook_secrets; per-tenant
  limits (stage 3) become more nullable columns here, so a row carries no meaning beyond
  "this tenant has settings" and clearing one setting never deletes the others.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TENANTS = """
CREATE TABLE tw_tenants (
    tenant          TEXT PRIMARY KEY,
    webhook_secrets TEXT,
    created_us      BIGINT NOT NULL,
    updated_us      BIGINT NOT NULL
)
"""


def upgrade() -> None:
    op.execute("ALTER TABLE tw_jobs ADD COLUMN webhook_secrets TEXT")
    op.execute("ALTER TABLE tw_jobs ADD COLUMN on_failure TEXT")
    op.execute(TENANTS)


def downgrade() -> None:
    op.execute("DROP TABLE tw_tenants")
    op.execute("ALTER TABLE tw_jobs DROP COLUMN on_failure")
    op.execute("ALTER TABLE tw_jobs DROP COLUMN webhook_secrets")
