"""Partitions of the job space, their leases, the cluster's nodes, and the epoch of each claim.

- tw_meta: settings of the database itself; `partitions` = P, the number of partitions, set
  here when the schema is created (default 64, or `tickwork db upgrade --partitions N` on a new
  database) and changed later only by `tickwork db repartition` (ADR 0015).
- tw_jobs.partition: the job's partition, `domain.partitions.partition_of(id, P)`. Existing
  rows are filled in here.
- PostgreSQL: the due index becomes (partition, next_run_us) WHERE state = 'scheduled', so a
  scheduler scans only the partitions it holds (one index range each). SQLite keeps
  (next_run_us): one process holds every partition there.
- tw_partition_leases: one row per partition: its owner, epoch and expiry (by the database's
  clock).
- tw_nodes: every scheduler and worker process announces itself here with a heartbeat (the
  members among which partitions are shared, and the cluster view); one row per (process, role),
  so `tickwork up` is listed as both.
- tw_runs.claim_epoch: the partition epoch a scheduled run was claimed under.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import re
import zlib

from alembic import context, op
from sqlalchemy import text

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

DEFAULT_PARTITIONS = 64  # a copy, not an import: a migration must not change when code does

META = "CREATE TABLE tw_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
LEASES = """
CREATE TABLE tw_partition_leases (
    partition   INTEGER PRIMARY KEY,
    owner       TEXT,
    epoch       BIGINT NOT NULL DEFAULT 0,
    expires_us  BIGINT NOT NULL DEFAULT 0,
    renewed_us  BIGINT
)
"""
NODES = """
CREATE TABLE tw_nodes (
    id            TEXT NOT NULL,
    role          TEXT NOT NULL,
    host          TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    version       TEXT NOT NULL,
    started_us    BIGINT NOT NULL,
    heartbeat_us  BIGINT NOT NULL,
    expires_us    BIGINT NOT NULL,
    info          TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (id, role)
)
"""
# The last 8 hex digits of the id as an unsigned 32-bit number, modulo P: partition_of in SQL.
# Ids that do not end in hex digits are left for the Python pass below.
PG_FILL = """
UPDATE tw_jobs SET partition = (('x' || right(id, 8))::bit(32)::bigint & 4294967295) % :p
WHERE right(id, 8) ~ '^[0-9a-fA-F]{8}$'
"""


_HEX_TAIL = re.compile(r"[0-9a-fA-F]{8}\Z")


def _partition_of(job_id: str, partitions: int) -> int:
    tail = job_id[-8:]
    bits = int(tail, 16) if _HEX_TAIL.match(tail) else zlib.crc32(job_id.encode())
    return bits % partitions


def upgrade() -> None:
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    partitions = int(context.config.attributes.get("partitions", DEFAULT_PARTITIONS))
    op.execute(META)
    bind.execute(
        text("INSERT INTO tw_meta (key, value) VALUES ('partitions', :p)"), {"p": str(partitions)}
    )
    op.execute("ALTER TABLE tw_jobs ADD COLUMN partition INTEGER NOT NULL DEFAULT 0")
    if postgres:
        bind.execute(text(PG_FILL), {"p": partitions})
        rest = "SELECT id FROM tw_jobs WHERE right(id, 8) !~ '^[0-9a-fA-F]{8}$'"
    else:
        rest = "SELECT id FROM tw_jobs"
    for (job_id,) in bind.execute(text(rest)).fetchall():
        bind.execute(
            text("UPDATE tw_jobs SET partition = :p WHERE id = :id"),
            {"p": _partition_of(job_id, partitions), "id": job_id},
        )
    if postgres:
        op.execute("DROP INDEX tw_jobs_due")
        op.execute(
            "CREATE INDEX tw_jobs_due ON tw_jobs (partition, next_run_us) WHERE state = 'scheduled'"
        )
    op.execute(LEASES)
    if postgres:
        bind.execute(
            text("INSERT INTO tw_partition_leases (partition) SELECT generate_series(0, :last)"),
            {"last": partitions - 1},
        )
    else:
        op.execute("INSERT INTO tw_partition_leases (partition) " + _sqlite_series(partitions))
    op.execute(NODES)
    op.execute("ALTER TABLE tw_runs ADD COLUMN claim_epoch BIGINT")


def _sqlite_series(partitions: int) -> str:
    """A VALUES list of 0..P-1 (SQLite has no generate_series without an extension)."""
    return "VALUES " + ", ".join(f"({p})" for p in range(partitions))


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.execute("ALTER TABLE tw_runs DROP COLUMN claim_epoch")
    op.execute("DROP TABLE tw_nodes")
    op.execute("DROP TABLE tw_partition_leases")
    if postgres:
        op.execute("DROP INDEX tw_jobs_due")
        op.execute("CREATE INDEX tw_jobs_due ON tw_jobs (next_run_us) WHERE state = 'scheduled'")
    op.execute("ALTER TABLE tw_jobs DROP COLUMN partition")
    op.execute("DROP TABLE tw_meta")
