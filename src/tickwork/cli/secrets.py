"""`tickwork secrets keygen|reencrypt`: the keys that encrypt stored secrets (tickwork.sealing).

`keygen` prints a new key line to put in TICKWORK_SECRET_KEYS or DATA_DIR/secrets.key.
`reencrypt` needs database access (`--db` or TICKWORK_DATABASE_URL) and this deployment's keys:
it rewrites every stored secret with the first key, so that an older key can then be removed.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict
from typing import Annotated

import typer

from tickwork.cli.app import CliFailure, secrets_app, stdout_console
from tickwork.cli.options import DbOpt, JsonOpt
from tickwork.cli.render import print_json
from tickwork.sealing import KEY_ID, generate_key_line
from tickwork.settings import Settings
from tickwork.store.base import ResealReport

__all__ = ["secrets_keygen", "secrets_reencrypt"]


@secrets_app.command("keygen")
def secrets_keygen(
    key_id: Annotated[
        str | None, typer.Option("--id", help="the key's id (default: a random one)")
    ] = None,
) -> None:
    """Print a new key, `<id>:<base64>`: put it FIRST in TICKWORK_SECRET_KEYS (or secrets.key),
    keep the old key after it, then run `tickwork secrets reencrypt`."""
    if key_id is not None and not KEY_ID.match(key_id):
        raise CliFailure("--id: use 1-32 letters, digits, '-' or '_'")
    print(generate_key_line(key_id))


@secrets_app.command("reencrypt")
def secrets_reencrypt(db: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Re-encrypt every stored secret with the first key (after a rotation)."""
    from tickwork.runtime.factory import store_for_url
    from tickwork.runtime.secret_keys import keyring_for

    settings = Settings(database_url=db) if db else Settings()
    keyring = keyring_for(settings, create=False)

    async def go() -> ResealReport:
        store = store_for_url(settings.database_url, keyring=keyring)
        await store.open()
        try:
            return await store.reseal_secrets()
        finally:
            await store.close()

    report = asyncio.run(go())
    if as_json:
        print_json({**asdict(report), "key": keyring.current_id})
        return
    stdout_console().print(
        f"re-encrypted with key {keyring.current_id}: {report.jobs_resealed} of"
        f" {report.jobs_checked} jobs, {report.tenants_resealed} of {report.tenants_checked}"
        f" tenants; {report.skipped} changed meanwhile (already current: run again to check)",
        markup=False,
    )
