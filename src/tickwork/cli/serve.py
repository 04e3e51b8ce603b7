"""The commands that run tickwork itself: `up`, one role each (`api`, `scheduler`, `worker`),
and `db upgrade` / `db repartition`.

They talk to the store, not to the API. Flags override the TICKWORK_* settings. The runtime
and the migrations are imported inside the commands that use them, so that the other commands
do not pay for importing a server.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from tickwork.cli.app import app, db_app, stdout_console
from tickwork.cli.options import DbOpt, HostOpt, ImportOpt, PortOpt, QueueOpt
from tickwork.settings import Settings

__all__ = ["api", "db_repartition", "db_upgrade", "scheduler", "up", "worker"]


def _serve(
    roles: frozenset[str],
    db: str | None,
    host: str | None,
    port: int | None,
    queue: str | None = None,
    imports: list[str] | None = None,
) -> None:
    from tickwork.runtime.up import Role, run_up

    overrides = {
        "database_url": db,
        "host": host,
        "port": port,
        "queue_url": queue,
        "imports": imports or None,
    }
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
    run_up(settings, frozenset(Role(r) for r in roles))


@app.command()
def up(
    db: DbOpt = None, host: HostOpt = None, port: PortOpt = None, imports: ImportOpt = None
) -> None:
    """Run the API, the scheduler and the executor in one process."""
    _serve(frozenset({"api", "scheduler", "worker"}), db, host, port, imports=imports)


@app.command()
def api(db: DbOpt = None, host: HostOpt = None, port: PortOpt = None) -> None:
    """Run only the HTTP API (any number of API processes may share a store)."""
    _serve(frozenset({"api"}), db, host, port)


@app.command()
def scheduler(
    db: DbOpt = None, host: HostOpt = None, port: PortOpt = 0, queue: QueueOpt = None
) -> None:
    """Run only a scheduler, handing fires to workers through the store.

    /healthz and /metrics are served on --port (default: a free port, printed).
    """
    _serve(frozenset({"scheduler"}), db, host, port, queue)


@app.command()
def worker(
    db: DbOpt = None,
    host: HostOpt = None,
    port: PortOpt = 0,
    queue: QueueOpt = None,
    imports: ImportOpt = None,
) -> None:
    """Run only a worker, leasing fires from the store and executing them.

    /healthz and /metrics are served on --port (default: a free port, printed).
    """
    _serve(frozenset({"worker"}), db, host, port, queue, imports)


PartitionsOpt = Annotated[
    int | None,
    typer.Option(
        "--partitions",
        help="P, the partitions of the job space, for a database created by this upgrade "
        "(default 64); an existing database keeps its P (see `tickwork db repartition`)",
    ),
]


@db_app.command("upgrade")
def db_upgrade(db: DbOpt = None, partitions: PartitionsOpt = None) -> None:
    """Migrate the database to the newest schema (safe to run while tickwork runs)."""
    from tickwork.store.migrate import upgrade

    url = db or Settings().database_url
    revision = asyncio.run(upgrade(url, partitions=partitions))
    stdout_console().print(f"database schema at revision {revision}", markup=False)


@db_app.command("repartition")
def db_repartition(
    partitions: Annotated[
        int, typer.Option("--partitions", help="the new P, from 1 to 1024", show_default=False)
    ],
    db: DbOpt = None,
) -> None:
    """Change the number of partitions (stop every tickwork process first)."""
    from tickwork.store.repartition import repartition

    url = db or Settings().database_url
    done = asyncio.run(repartition(url, partitions))
    stdout_console().print(
        f"{done.jobs} jobs repartitioned from {done.before} to {done.after} partitions; "
        f"leases start at epoch {done.epoch}",
        markup=False,
    )
