"""Alembic environment for tickwork: runs the scripts on the connection `migrate.py` hands over.

There is no alembic.ini and no URL here. `tickwork.store.migrate.upgrade()` opens the
connection, begins the transaction and takes the migration lock (pg_advisory_xact_lock on
PostgreSQL, BEGIN EXCLUSIVE on SQLite) before Alembic runs, so Alembic sees an external
transaction and neither begins nor commits one: every script and the version-table update commit
together, under that lock, or not at all.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from tickwork.store.migrate import VERSION_TABLE


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if context.is_offline_mode() or not isinstance(connection, Connection):
        raise RuntimeError(
            "tickwork migrations run online only, through tickwork.store.migrate.upgrade(url) "
            "or `tickwork db upgrade`; the alembic command line has no connection to use"
        )
    if not connection.in_transaction():
        # Without the caller's transaction there is no lock: refuse rather than race.
        raise RuntimeError("env.py needs a connection inside migrate.py's locked transaction")
    context.configure(
        connection=connection,
        version_table=VERSION_TABLE,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        transactional_ddl=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
