"""API keys, and a row for every tenant in use (ADR 0018).

- tw_api_keys: one row per API key: its id, name, role, tenant (NULL for admin keys), the
  visible prefix and the hex SHA-256 of the whole key (unique: a presented key is found by it;
  the key itself is never stored), and its instants as epoch microseconds like every other
  table (ADR 0003): created, expires (NULL: never), revoked (NULL: not), last used (NULL:
  never). Indexed by tenant, for a tenant's keys.
- tw_tenants: tenants become a resource that jobs must name, so every database gets a row for
  `default` and for each tenant a job already names (created and updated now, no settings);
  rows that exist are kept as they are.

The downgrade drops tw_api_keys and leaves the tenants' rows (0003's table, which they fit).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import time

from alembic import op
from sqlalchemy import text

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

KEYS = """
CREATE TABLE tw_api_keys (
    id            TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    role          TEXT NOT NULL,
    tenant        TEXT,
    prefix        TEXT NOT NULL,
    secret_hash   TEXT NOT NULL UNIQUE,
    created_us    BIGINT NOT NULL,
    expires_us    BIGINT,
    revoked_us    BIGINT,
    last_used_us  BIGINT
)
"""
KEYS_BY_TENANT = "CREATE INDEX tw_api_keys_tenant ON tw_api_keys (tenant)"
# `default` and every tenant a job names, once each (UNION), unless the tenant has a row.
TENANTS_IN_USE = """
INSERT INTO tw_tenants (tenant, webhook_secrets, created_us, updated_us)
SELECT used.tenant, NULL, :now, :now
FROM (SELECT 'default' AS tenant UNION SELECT tenant FROM tw_jobs) used
WHERE NOT EXISTS (SELECT 1 FROM tw_tenants t WHERE t.tenant = used.tenant)
"""


def upgrade() -> None:
    op.execute(KEYS)
    op.execute(KEYS_BY_TENANT)
    now_us = time.time_ns() // 1000
    op.get_bind().execute(text(TENANTS_IN_USE), {"now": now_us})


def downgrade() -> None:
    op.execute("DROP INDEX tw_api_keys_tenant")
    op.execute("DROP TABLE tw_api_keys")
