"""Secrets at rest: authenticated encryption (AES-256-GCM) of the columns that hold secrets.

A `Keyring` holds one or more 32-byte keys, each with a short id. The first key seals; every
key opens, so a rotation is: put the new key first and keep the old one after it, run
`tickwork secrets reencrypt` (which re-seals every stored secret with the first key), then
drop the old key.

A sealed value is text: `tw1:<key id>:<urlsafe base64 of nonce + ciphertext + tag>`. The
prefix cannot begin a JSON text, so a column can hold either (rows written before encryption
are read as plain JSON and sealed by the next write or by `reencrypt`). The `purpose` (the
column's name) is authenticated data: a value copied into another column does not open.

Key text (TICKWORK_SECRET_KEYS, or the `secrets.key` file of the data directory, one per
line): `<id>:<urlsafe base64 of 32 bytes>`; `tickwork secrets keygen` prints a new one.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tickwork.errors import TickworkError

__all__ = ["Keyring", "SealedSecretError", "generate_key_line", "is_sealed", "parse_key_lines"]

PREFIX = "tw1"
KEY_BYTES = 32
NONCE_BYTES = 12  # GCM's standard nonce; random per seal (2^32 seals per key stay safe)
KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


class SealedSecretError(TickworkError):
    """A sealed value cannot be opened: its key is not in this process's keyring, or the value
    was altered. Never includes the value."""

    code = "secret_unreadable"


def is_sealed(text: str) -> bool:
    return text.startswith(PREFIX + ":")


@dataclass(frozen=True, slots=True)
class _Key:
    id: str
    aead: AESGCM = field(repr=False)


class Keyring:
    """The keys of this process. `seal` uses the first; `open` finds the key by its id."""

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        if not keys:
            raise ValueError("secret_keys: give at least one key")
        self._keys: list[_Key] = []
        for key_id, material in keys:
            if not KEY_ID.match(key_id):
                raise ValueError(
                    f"secret_keys: key id {key_id!r} must be 1-32 letters, digits, '-' or '_'"
                )
            if len(material) != KEY_BYTES:
                raise ValueError(
                    f"secret_keys: key {key_id!r} has {len(material)} bytes; it needs"
                    f" {KEY_BYTES} (make one with `tickwork secrets keygen`)"
                )
            if any(k.id == key_id for k in self._keys):
                raise ValueError(f"secret_keys: key id {key_id!r} appears twice")
            self._keys.append(_Key(key_id, AESGCM(material)))
        self._by_id = {k.id: k for k in self._keys}

    @property
    def current_id(self) -> str:
        return self._keys[0].id

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(k.id for k in self._keys)

    def __repr__(self) -> str:
        return f"Keyring(ids={self.ids!r})"

    def seal(self, plaintext: str, *, purpose: str) -> str:
        key = self._keys[0]
        nonce = os.urandom(NONCE_BYTES)
        sealed = key.aead.encrypt(nonce, plaintext.encode(), purpose.encode())
        encoded = base64.urlsafe_b64encode(nonce + sealed).decode("ascii")
        return f"{PREFIX}:{key.id}:{encoded}"

    def open(self, text: str, *, purpose: str) -> str:
        prefix, key_id, encoded = _parts(text)
        if prefix != PREFIX:
            raise SealedSecretError(f"{purpose}: not a sealed value (unknown format)")
        key = self._by_id.get(key_id)
        if key is None:
            raise SealedSecretError(
                f"{purpose}: sealed with secret key {key_id!r}, which this process does not"
                f" have (it has {', '.join(self.ids)}); add that key to TICKWORK_SECRET_KEYS"
            )
        try:
            raw = base64.urlsafe_b64decode(encoded)
            return key.aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], purpose.encode()).decode()
        except (binascii.Error, ValueError, InvalidTag):
            raise SealedSecretError(
                f"{purpose}: a sealed value did not authenticate with key {key_id!r} (altered,"
                " or written for another column)"
            ) from None

    def sealed_with_current(self, text: str) -> bool:
        return text.startswith(f"{PREFIX}:{self.current_id}:")


def _parts(text: str) -> tuple[str, str, str]:
    prefix, _, rest = text.partition(":")
    key_id, _, encoded = rest.partition(":")
    return prefix, key_id, encoded


def generate_key_line(key_id: str | None = None) -> str:
    """A new key as one line of key text: `<id>:<base64>`; the id defaults to a random one."""
    chosen = key_id or "k" + os.urandom(4).hex()
    material = base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")
    return f"{chosen}:{material}"


def parse_key_lines(lines: Iterable[str], *, source: str) -> list[tuple[str, bytes]]:
    """Keys from lines (or comma-separated items) of `<id>:<base64>`; blanks and `#` comments
    are skipped. Errors name `source` and the line, never the key material."""
    keys: list[tuple[str, bytes]] = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        key_id, sep, encoded = text.partition(":")
        if not sep:
            raise ValueError(
                f"{source}: item {number} is not '<id>:<base64 of 32 bytes>' (make one with"
                " `tickwork secrets keygen`)"
            )
        try:
            material = base64.urlsafe_b64decode(encoded.strip())
        except (binascii.Error, ValueError):
            raise ValueError(f"{source}: key {key_id.strip()!r} is not valid base64") from None
        keys.append((key_id.strip(), material))
    return keys
