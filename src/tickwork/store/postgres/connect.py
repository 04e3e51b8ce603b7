"""How the PostgreSQL store connects: the DSN asyncpg takes, and each session's settings.

Apart from the store so that the migration runner (`store/migrate.py`) can connect the same way
without importing the store, which itself runs migrations on open.
"""

from __future__ import annotations

import asyncpg

__all__ = ["SERVER_SETTINGS", "asyncpg_dsn", "keep_session"]

# Set per connection at startup: asyncpg's pool runs RESET ALL when a connection is released,
# which would silently undo a plain SET (measured by bench/: claims fell back to generic plans).
# Custom plans for every statement: a generic plan cached while a table was small or empty can
# stay slow after it fills.
SERVER_SETTINGS = {"plan_cache_mode": "force_custom_plan"}


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
