"""Keys at start-up: the embedded default's first admin key, and no open API on a network.

`tickwork up` (or `tickwork api` on loopback) on a database without any usable key mints an
admin key and writes it to `admin.key` in the data directory (mode 0600, the directory 0700),
where the CLI finds it: the two-command start keeps working, and nothing is open. An API that
listens on anything but loopback refuses to start while no usable key exists: it would answer
401 to everyone, and the likely cause is a deployment that forgot `tickwork keys create`.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from tickwork.domain.keys import Role
from tickwork.errors import InvalidInput
from tickwork.runtime.secret_keys import write_private_file
from tickwork.services.keys import KeyService

ADMIN_KEY_FILE = "admin.key"


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def bootstrap_admin_key(keys: KeyService, folder: Path) -> Path | None:
    """Mint an admin key into `folder`/admin.key if the store has no usable key; returns the
    file written (None: keys exist, nothing done)."""
    if await keys.any_usable():
        return None
    created = await keys.create(name="admin (created by tickwork up)", role=Role.ADMIN)
    return write_key_file(folder / ADMIN_KEY_FILE, created.plaintext)


def write_key_file(path: Path, key: str) -> Path:
    """Write a key readable by its owner only (never world-readable, not even for a moment)."""
    return write_private_file(path, key + "\n")


async def refuse_open_network_api(keys: KeyService, host: str) -> None:
    """InvalidInput naming `host` if the API would listen beyond loopback with no usable key."""
    if is_loopback_host(host) or await keys.any_usable():
        return
    raise InvalidInput(
        "host",
        f"the API would listen on {host} with no API key in the database: create one first "
        "(tickwork keys create --name NAME --role admin), or listen on 127.0.0.1",
    )
