"""Database URL -> store backend."""

from __future__ import annotations

from tickwork.errors import InvalidInput
from tickwork.sealing import Keyring
from tickwork.settings import sqlite_path
from tickwork.store.base import ScheduleStore

ACCEPTED = "sqlite:///PATH (embedded default), postgresql://USER@HOST:PORT/DB, or memory://"


def store_for_url(
    url: str, *, keyring: Keyring | None = None, node_id: str | None = None
) -> ScheduleStore:
    """Build (not open) the store a database URL names; `keyring` seals its secrets (every
    process that reads or writes jobs passes one: runtime/secret_keys.py); `node_id` names a
    tickwork process's PostgreSQL sessions, so that other schedulers see whether it lives."""
    path = sqlite_path(url)
    if path is not None:
        from tickwork.store.sqlite import SqliteStore

        return SqliteStore(path, keyring=keyring)
    if url.startswith(("postgresql://", "postgres://", "postgresql+asyncpg://")):
        from tickwork.store.postgres import PostgresStore

        return PostgresStore(url, keyring=keyring, node_id=node_id)
    if url == "memory://":
        from tickwork.store.memory import MemoryStore

        return MemoryStore()
    raise InvalidInput("database_url", f"unsupported database URL {url!r}; use {ACCEPTED}")
