"""The SQLite store: the embedded single-process default.

    store.py        SqliteStore, the ScheduleStore on the standard library's sqlite3
    connection.py   one connection per thread, BEGIN IMMEDIATE, and the sqlite3 error map

Its statements are named in `tickwork/store/sql/sqlite.sql` (plus `common.sql`).
"""

from tickwork.store.sqlite.store import SQL, SqliteStore

__all__ = ["SQL", "SqliteStore"]
