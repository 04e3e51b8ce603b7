"""The PostgreSQL store: many schedulers, workers and API processes on one database.

    store.py     PostgresStore, the ScheduleStore on asyncpg
    statements.py  its named SQL (sql/common.sql + sql/postgres.sql), loaded once
    connect.py   DSN and per-session settings (shared with the migration runner)
    errors.py    the one table from asyncpg's errors to tickwork's store errors
    history.py   daily partitions of the attempt history (ADR 0007)
    listen.py    the LISTEN connection that wakes this process's loops

Its statements are named in `tickwork/store/sql/postgres.sql` (plus `common.sql`).
"""

from tickwork.store.postgres.connect import SERVER_SETTINGS, asyncpg_dsn
from tickwork.store.postgres.statements import SQL
from tickwork.store.postgres.store import CHANNEL, PostgresStore

__all__ = ["CHANNEL", "SERVER_SETTINGS", "SQL", "PostgresStore", "asyncpg_dsn"]
