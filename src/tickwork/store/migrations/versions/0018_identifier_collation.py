"""Identifiers compared byte by byte on PostgreSQL (issue 22, ADR 0031).

PostgreSQL only; SQLite already compares text byte by byte (its BINARY collation).

Job ids, run keys, job names and tenant names get the "C" collation: every index on them orders
by bytes, and every comparison is a memcmp instead of the database's linguistic collation
(C.UTF-8, en_US.UTF-8 or an ICU locale: a strcoll or ICU call, with copies, per comparison). A
fire compares such strings in every B-tree it descends or inserts into: the job's primary key in
the claim and the lease, the run's key and job index, the tenant's row. Job ids are lowercase hex
and run keys are ids with digits, so no order the API shows changes; tenant and job names now
sort as SQLite sorts them.

The columns keep their type; PostgreSQL rewrites no table for a change of collation, only the
indexes on those columns, under the tables' exclusive locks: on a database with millions of
runs, run this revision (`tickwork db upgrade`) with the services stopped or at a quiet hour
(docs/operations.md).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# table -> the columns that hold job ids, run keys or names
COLUMNS: dict[str, tuple[str, ...]] = {
    "tw_jobs": ("id", "tenant", "name"),
    "tw_runs": ("job_id", "key", "releases_key"),
    "tw_queue": ("guarded_job",),
    "tw_attempts": ("job_id",),
    "tw_occurrences": ("job_id",),
    "tw_backfills": ("job_id", "tenant"),
    "tw_tenants": ("tenant",),
    "tw_api_keys": ("tenant",),
    "tw_audit": ("tenant", "actor_tenant"),
}


def _collate(collation: str) -> None:
    for table, columns in COLUMNS.items():
        changes = ", ".join(
            f"ALTER COLUMN {column} TYPE text COLLATE {collation}" for column in columns
        )
        op.execute(f"ALTER TABLE {table} {changes}")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _collate('"C"')


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _collate('"default"')
