"""Errors of the queue backends; driver errors are translated here, at the boundary.

TickworkError                 (tickwork.errors)
 +-- QueueError               the queue failed: unreachable, timed out, refused a command
      +-- QueueUnavailable    cannot reach the server right now (connect, reconnecting, timeout)

A caller (worker, scheduler) treats both the same way: back off and try again. Nothing is lost
meanwhile, because every fire is in the store before it is published: a run whose message never
arrives is leased straight from the store by the workers' backstop (see queue/base.py).
`QueueUnavailable` exists so a supervisor can tell "the server is down" from "the server said
no" in its logs and health.
"""

from __future__ import annotations

from tickwork.errors import TickworkError

__all__ = ["QueueError", "QueueUnavailable"]


class QueueError(TickworkError):
    """The queue backend failed; the message names the backend and what it was doing."""

    code = "queue_error"


class QueueUnavailable(QueueError):
    """The queue server cannot be reached (refused, timed out, reconnecting)."""

    code = "queue_unavailable"
