"""This process's keys for secrets at rest (tickwork.sealing), from configuration or the data
directory.

TICKWORK_SECRET_KEYS (comma-separated `<id>:<base64>` items, the first one seals) wins. Without
it, the data directory's `secrets.key` (one item per line) is used, and created on first use
with one new key, readable by its owner only, like `admin.key`: the embedded default keeps its
two-command start and still never writes a secret in clear. Every process of one deployment
must have the same keys: on several machines, configure TICKWORK_SECRET_KEYS on each.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from tickwork.errors import InvalidInput
from tickwork.sealing import Keyring, SealedSecretError, generate_key_line, parse_key_lines
from tickwork.settings import Settings, data_dir, sqlite_path
from tickwork.store.base import ScheduleStore

SECRET_KEY_FILE = "secrets.key"

log = logging.getLogger("tickwork.secrets")


def keyring_for(settings: Settings, *, create: bool = True) -> Keyring:
    """The configured keys, else those of DATA_DIR/secrets.key (created if `create`)."""
    if settings.secret_keys:
        return _keyring(settings.secret_keys.split(","), "TICKWORK_SECRET_KEYS")
    path = data_dir(settings) / SECRET_KEY_FILE
    if not path.exists():
        if not create:
            raise InvalidInput(
                "secret_keys",
                f"no TICKWORK_SECRET_KEYS and no {path}: set the keys this deployment uses",
            )
        if (
            create_once(path, generate_key_line() + "\n")
            and sqlite_path(settings.database_url) is None
        ):
            log.warning(
                "created a secret key in %s; every process of this deployment needs the same"
                " key: copy the file or set TICKWORK_SECRET_KEYS on every machine",
                path,
            )
    return _keyring(path.read_text().splitlines(), str(path))


def create_once(path: Path, text: str) -> bool:
    """Create `path` holding `text` unless it exists; True if this call created it. Processes
    started together on one data directory all find the same key: the file appears whole
    (written aside, then linked into place) and only the first link succeeds."""
    aside = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    write_private_file(aside, text)
    try:
        os.link(aside, path)
    except FileExistsError:
        return False
    finally:
        aside.unlink(missing_ok=True)
    return True


def write_private_file(path: Path, text: str) -> Path:
    """Write key text readable by its owner only (never world-readable, not for a moment)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.chmod(path, 0o600)  # an older file keeps its mode through O_CREAT: set it
    return path


async def check_keys_open(store: ScheduleStore) -> None:
    """Fail the start, naming the key, if this process cannot decrypt the tenants' signing
    secrets: a worker with other keys than the API would dead-letter every signed fire."""
    try:
        await store.list_tenants()
    except SealedSecretError as exc:
        raise InvalidInput(
            "secret_keys",
            f"{exc}; every process of a deployment needs the same keys (one data directory's"
            " secrets.key, or TICKWORK_SECRET_KEYS set alike everywhere)",
        ) from None


def _keyring(items: list[str], source: str) -> Keyring:
    try:
        return Keyring(parse_key_lines(items, source=source))
    except ValueError as exc:
        raise InvalidInput("secret_keys", str(exc)) from None
