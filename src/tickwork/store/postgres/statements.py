"""The PostgreSQL store's named statements: `sql/common.sql` and then `sql/postgres.sql`,
loaded once at import, with :name parameters numbered for asyncpg ($1, $2, ...)."""

from tickwork.store.sql.named import load_statements

SQL = load_statements("common", "backfills", "postgres", numbered=True)
