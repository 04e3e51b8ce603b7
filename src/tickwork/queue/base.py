"""The `Queue` seam: transport of fires from schedulers to workers.

The store is the source of truth; a queue is transport (GUIDE.md invariant 5). A backend may
lose a message (JetStream and Redis acknowledge before fsync) or deliver one twice: the store's
leases, the reaper that re-publishes claimed-but-unstarted runs, and the run ledger repair both.
So the contract asks only for what the worker path relies on:

* `publish` is at-least-once. Where the backend can deduplicate (JetStream's `Nats-Msg-Id`
  window), a second publish of the same `Envelope.msg_id` is dropped; elsewhere it may be
  delivered twice.
* `fetch` returns up to `max_messages` messages, waiting at most `timeout_s` for the first.
  Each returned message is invisible to other consumers for the queue's `visibility_s` (set
  when the backend is built: JetStream AckWait, Redis idle time before XAUTOCLAIM, the table
  queue's lease); if it is neither acked nor extended by then, it is delivered again, to any
  consumer, with `deliveries` incremented.
* `extend` restarts the visibility timeout of messages still being worked on (heartbeat).
* `ack` removes messages for good. Acking a message twice, or one whose visibility timeout
  passed and that was redelivered elsewhere, is not an error.
* `retry_later` makes one message deliverable again no earlier than `delay_s` from now (backoff).
* `depth` is the number of messages published and not yet acked (for metrics; may lag).

Every backend passes `tests/contract/test_queue_contract.py` on a real server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# The envelope is a domain record (the stores' hand-off claim returns it); it is re-exported
# here because it is also this seam's message, and queue code has always imported it from here.
from tickwork.domain.runs import Envelope

__all__ = ["Envelope", "Queue", "Received"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Received:
    """A fetched message: the envelope, how often it was delivered, the backend's handle."""

    envelope: Envelope
    deliveries: int  # 1 on first delivery
    handle: Any  # backend-specific (stream sequence, entry id, message object)


class Queue(Protocol):
    async def open(self) -> None:
        """Connect and create what the backend needs (stream, consumer group) if missing."""
        ...

    async def close(self) -> None: ...

    async def publish(self, envelopes: Sequence[Envelope]) -> None: ...

    async def fetch(self, max_messages: int, *, timeout_s: float) -> list[Received]: ...

    async def extend(self, messages: Sequence[Received]) -> None: ...

    async def ack(self, messages: Sequence[Received]) -> None: ...

    async def retry_later(self, message: Received, *, delay_s: float) -> None: ...

    async def depth(self) -> int: ...
