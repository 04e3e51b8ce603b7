"""How the PostgreSQL store connects: the DSN asyncpg takes, and each session's settings.

Apart from the store so that the migration runner (`store/migrate.py`) can connect the same way
without importing the store, which itself runs migrations on open.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import asyncpg

__all__ = ["SERVER_SETTINGS", "asyncpg_dsn", "keep_session", "names_itself", "session_name"]

# Set per connection at startup: asyncpg's pool runs RESET ALL when a connection is released,
# which would silently undo a plain SET (measured by bench/: claims fell back to generic plans).
# Custom plans for every statement: a generic plan cached while a table was small or empty can
# stay slow after it fills.
SERVER_SETTINGS = {"plan_cache_mode": "force_custom_plan"}


# PostgreSQL keeps the first NAMEDATALEN - 1 bytes of an application_name.
_NAME_BYTES = 63


def session_name(node_id: str) -> str:
    """The application_name of a tickwork process's sessions: `tickwork <node id>`, cut to what
    PostgreSQL keeps. Another scheduler reads it in pg_stat_activity to learn that the process
    is gone (ADR 0032); two node ids cut to the same name only make a dead one look alive."""
    return ("tickwork " + node_id).encode()[:_NAME_BYTES].decode(errors="ignore")


def names_itself(url: str) -> bool:
    """Does the URL set its sessions' application_name (`?application_name=`)? Then it is the
    user's (a monitoring label, the chaos harness's handle on one process), not replaced."""
    return "application_name" in parse_qs(urlsplit(url).query)


def asyncpg_dsn(url: str) -> str:
    """The user's URL (`postgresql://`, `postgres://`, `postgresql+asyncpg://`) as asyncpg's."""
    for prefix in ("postgresql+asyncpg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


async def keep_session(_conn: asyncpg.Connection) -> None:
    """Pool reset that sends nothing. The default (RESET ALL, UNLISTEN *, ...) costs a round
    trip per statement; pooled connections here never change session state, LISTEN (the
    listener has its own connection) or take session-level advisory locks."""
