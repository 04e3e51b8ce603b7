"""asyncpg's errors -> tickwork's store errors: the PostgreSQL store's one translation point.

Every call the store makes to the driver runs inside `translated(doing)`, so no driver
exception leaves the store: a caller (the API, a service loop) sees `StoreUnavailable` when
trying again later can help, and `StoreError` otherwise. The table is read top down, first
match wins:

    driver error                                   store error        why
    PostgresConnectionError (class 08),            StoreUnavailable   the connection is gone or
      ConnectionDoesNotExistError                                     never came up
    OperatorInterventionError (class 57):          StoreUnavailable   the server is shutting
      AdminShutdown, CrashShutdown,                                   down, starting, or killed
      CannotConnectNow, QueryCanceled                                 our backend or statement
    InsufficientResourcesError (class 53):         StoreUnavailable   out of connections, disk
      TooManyConnections, DiskFull, OutOfMemory                       or memory for now
    TransactionRollbackError (class 40):           StoreUnavailable   lost a race (deadlock,
      Deadlock, Serialization                                         serialization): retry
    InterfaceError (not a server error:            StoreUnavailable   the client side of a dead
      "connection is closed", "pool is closed")                       or closing connection
    OSError, TimeoutError                          StoreUnavailable   the socket: refused, reset,
                                                                      timed out
    PostgresError (any other SQLSTATE)             StoreError         the server refused the
                                                                      statement (missing schema,
                                                                      constraint, bug)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import asyncpg
import asyncpg.exceptions as pg

from tickwork.errors import StoreError, StoreUnavailable

__all__ = ["DRIVER_ERRORS", "store_error", "translated"]

_TABLE: tuple[tuple[type[BaseException], type[StoreError], str], ...] = (
    (pg.PostgresConnectionError, StoreUnavailable, "lost its connection to PostgreSQL"),
    (pg.OperatorInterventionError, StoreUnavailable, "PostgreSQL stopped the statement"),
    (pg.InsufficientResourcesError, StoreUnavailable, "PostgreSQL is out of resources"),
    (pg.TransactionRollbackError, StoreUnavailable, "PostgreSQL rolled the statement back"),
    (asyncpg.InterfaceError, StoreUnavailable, "lost its connection to PostgreSQL"),
    (OSError, StoreUnavailable, "cannot reach PostgreSQL"),
    (TimeoutError, StoreUnavailable, "timed out talking to PostgreSQL"),
    (asyncpg.PostgresError, StoreError, "PostgreSQL refused the statement"),
)
# Everything the table knows: what a caller that talks to the driver itself may catch.
DRIVER_ERRORS: tuple[type[BaseException], ...] = tuple(driver for driver, _, _ in _TABLE)


def store_error(exc: BaseException, doing: str) -> StoreError:
    """The store error for a driver error met while `doing` (e.g. "claiming")."""
    for driver, error, what in _TABLE:
        if isinstance(exc, driver):
            return error(f"{what} while {doing}: {type(exc).__name__}: {exc}")
    return StoreError(f"unexpected driver error while {doing}: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def translated(doing: str) -> Iterator[None]:
    """Raise the store error for any driver error inside the block (works around awaits)."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise store_error(exc, doing) from exc
