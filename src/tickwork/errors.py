"""tickwork's exceptions, one tree; driver errors are translated at the store boundary.

TickworkError
 +-- InvalidInput      bad user input: names the field and how to fix it (HTTP 4xx, CLI exit 2)
 +-- NotFound          no such job or run (HTTP 404)
 +-- Conflict          the request clashes with the object's state (HTTP 409)
 |    +-- StaleJob     the job was claimed since it was read: re-read and retry
 +-- StoreError        the schedule store failed (connection, migration, driver error)
"""

from __future__ import annotations


class TickworkError(Exception):
    code = "error"


class InvalidInput(TickworkError):
    """Bad input; `field` is a dotted path such as `schedule.cron`."""

    def __init__(self, field: str, message: str, *, code: str = "invalid") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code


class NotFound(TickworkError):
    code = "not_found"

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"{kind} {ident!r} does not exist")
        self.kind = kind
        self.ident = ident


class Conflict(TickworkError):
    code = "conflict"


class StaleJob(Conflict):
    """An update's expected fence token is no longer the job's: a claim came in between."""


class StoreError(TickworkError):
    code = "store_error"
