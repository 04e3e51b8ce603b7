"""`tickwork keys create|list|revoke`: API keys, straight in the database.

These commands need database access (`--db` or TICKWORK_DATABASE_URL, as `tickwork db upgrade`
does), not a key: that is how a PostgreSQL deployment gets its first admin key. The API offers
the same under /v1/keys to admin keys. `create` prints the whole key once; `--json` prints the
same fields as the API's answer, `key` included.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

import typer
from rich.table import Table

from tickwork.cli.app import CliFailure, keys_app, stdout_console
from tickwork.cli.options import DbOpt, JsonOpt
from tickwork.cli.render import print_json
from tickwork.clock import SystemClock
from tickwork.domain.keys import Role
from tickwork.settings import Settings

__all__ = ["keys_create", "keys_list", "keys_revoke"]

T = TypeVar("T")

RoleOpt = Annotated[
    Role, typer.Option("--role", help="admin, tenant-write or tenant-read", show_default=False)
]


def _with_keys(db: str | None, act: Callable[[Any], Awaitable[T]]) -> T:
    from tickwork.runtime.factory import store_for_url
    from tickwork.services.keys import KeyService

    async def go() -> T:
        store = store_for_url(db or Settings().database_url)
        await store.open()
        try:
            return await act(KeyService(store, SystemClock()))
        finally:
            await store.close()

    return asyncio.run(go())


@keys_app.command("create")
def keys_create(
    name: Annotated[str, typer.Option("--name", help="what the key is for", show_default=False)],
    role: RoleOpt,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="the tenant of a tenant role")
    ] = None,
    expires_at: Annotated[
        datetime | None,
        typer.Option("--expires-at", help="ISO-8601 instant with an offset; default: never"),
    ] = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a key and print it (this is the only time the whole key is shown)."""
    from tickwork.api.access import KeyCreated

    if expires_at is not None and expires_at.tzinfo is None:
        raise CliFailure("--expires-at: add Z or an offset, e.g. 2027-01-01T00:00:00Z")
    created = _with_keys(
        db, lambda keys: keys.create(name=name, role=role, tenant=tenant, expires_at=expires_at)
    )
    answer = KeyCreated.of(created).model_dump(mode="json")
    if as_json:
        print_json(answer)
        return
    console = stdout_console()
    console.print(answer["key"], markup=False, soft_wrap=True)
    scope = f" for tenant {tenant}" if tenant else ""
    console.print(
        f"created {role.value} key {answer['id']} ({answer['prefix']}...){scope}; "
        "store it now: it is not shown again",
        markup=False,
    )


@keys_app.command("list")
def keys_list(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Every key (never the keys themselves): id, prefix, name, role, tenant, dates."""
    from tickwork.api.access import KeyOut

    found = _with_keys(db, lambda keys: keys.list())
    rows = [KeyOut.of(k).model_dump(mode="json") for k in found]
    if as_json:
        print_json({"keys": rows})
        return
    table = Table("id", "prefix", "name", "role", "tenant", "created", "expires", "state")
    for k in rows:
        state = "revoked" if k["revoked_at"] else "active"
        table.add_row(
            k["id"], k["prefix"], k["name"], k["role"], k["tenant"] or "-",
            k["created_at"], k["expires_at"] or "never", state,
        )  # fmt: skip
    stdout_console().print(table)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="the key's id (see keys list)", show_default=False)],
    db: DbOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Revoke a key: every API process refuses it within a second."""
    from tickwork.api.access import KeyOut

    revoked = _with_keys(db, lambda keys: keys.revoke(key_id))
    if as_json:
        print_json(KeyOut.of(revoked).model_dump(mode="json"))
        return
    stdout_console().print(f"revoked key {revoked.id} ({revoked.prefix}...)", markup=False)
