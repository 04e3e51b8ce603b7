"""The `Queue` seam: transport of fires from schedulers to workers in other processes.

The schedule store is the source of truth; a queue is transport. A fire exists once the
scheduler's claim has committed its run to the store, before anything is published, and it is
done when the store records its outcome, whatever the queue did meanwhile. A queue only makes
delivery fast. So a backend may lose a message (JetStream and Redis acknowledge a publish
before it reaches the disk; a Redis without persistence forgets everything on restart) or
deliver one twice, and the store repairs both:

* a lost message (never published, or dropped by the queue) leaves its run pending and free in
  the store. Nobody re-publishes it: the worker's store leaser (worker/leaser.py) leases such
  runs straight from the store, the backstop, once their lease has been free for
  `queue_backstop_ms` (`LeaserConfig.backstop_delay_ms`), with the same occurrence key;
* a duplicate (a redelivery, a second publish) leases nothing: a worker leases the run a
  message names only while the run's fence is still the message's (`lease_fenced_runs`), and
  the first delivery moves it. Every later write of the attempt is fenced too.

So the contract is small: at-least-once delivery under a visibility timeout, with a delivery
count, and no order; the methods below state it one by one. The worker uses less still: it
fetches, leases the runs the messages name by their fences, and acks at once
(worker/consumer.py); from then on the store's lease, not the queue, keeps the fire alive.

Each backend declares what it adds (`dedupes`, `survives_restart`), and every backend passes
`tests/contract/test_queue_contract.py` on a real server. Backend failures are
`tickwork.queue.errors.QueueError`, or `QueueUnavailable` when the server cannot be reached;
callers back off and try again, since the fire is in the store meanwhile.

The table queue is not a `Queue`
--------------------------------
Without a queue URL there is no transport: the schedule store is the queue. The scheduler's
hand-off claim (`claim_hand_off`) inserts the pending run, which is the publish; a worker's
`lease_runs` is the fetch, with the run's lease as the visibility timeout (a lease that runs
out without an outcome makes the run leasable again, at a new fence) and `extend_leases` as the
extend; `finish_runs` is the ack, and an outcome with a `retry_at` is a `retry_later`;
`leasable_runs` is the depth. It stays a seam of its own, the store's, because it is not
transport: the message is the run's row itself, written in the claim's transaction, so there is
no second copy that could be lost or outlive the run, and nothing for a backstop to repair. Its
operations take the store's arguments (instants, owners, fences) and run in the store's
transactions: a fetch there is already the fenced lease that a `Queue` consumer has to make in
a second step, and dressing it as `fetch`/`ack` would hide that and add nothing. The store's
contract suite (`tests/contract/test_store_claims.py` for the publish, `test_store_leases.py`
for the rest) covers it on every store backend; `queue_for_url` refuses to build it
(`factory.py`).
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
    """A fetched envelope: the envelope, how often its message was delivered, the backend's
    handle of that message. The envelopes of a bundle (NATS, Redis: up to `bundle` envelopes
    of one publish per message, queue/bundles.py) share one handle and one delivery count."""

    envelope: Envelope
    deliveries: int  # 1 on first delivery
    handle: Any  # backend-specific (stream sequence, entry id, message object)


class Queue(Protocol):
    """A work queue shared by every worker process: each message goes to one consumer at a
    time, and comes back if that consumer neither acks nor extends it in time.

    A message is an `Envelope` (it names a run; the worker reads the rest with its lease) and
    its identity is `Envelope.msg_id`, one per attempt of an occurrence. A backend with a
    `bundle` option (NATS, Redis) may carry several envelopes of one publish in one message
    (ADR 0037): each still comes out of `fetch` as its own `Received`, but what happens to one
    of them (ack, extend, retry_later, a redelivery) happens to its whole bundle. tickwork's
    consumer always treats a fetched batch as a whole, so that is all the same to it.
    Messages handed to `extend`, `ack` and `retry_later` must come from `fetch` on the same
    backend (another's is a TypeError). Every instance is one consumer; several processes
    share a queue by opening instances with the same names (stream, consumer group, durable
    consumer).

    Capabilities, declared as class attributes by each backend, which the contract suite
    checks instead of assuming:

    * `dedupes`: a second publish of the same `msg_id` within the backend's duplicate window
      is dropped (NATS `Nats-Msg-Id`, memory). Where False (Redis), it is delivered twice.
    * `survives_restart`: published, unacked messages survive a restart of the server as the
      backend runs by default (NATS file storage). Where False, a restart may lose them all
      (Redis without RDB/AOF; memory, which has no server).

    Neither is needed for correctness: the fenced lease drops duplicates, and the backstop
    runs what a restart lost.
    """

    dedupes: bool
    survives_restart: bool

    async def open(self) -> None:
        """Connect, and create what the backend needs (stream, consumer, group) if missing.

        Idempotent: calling it on an open instance does nothing, and several processes may
        open the same queue at once. Raises `QueueUnavailable` when the server cannot be
        reached (within the backend's connect timeout) and `QueueError` when it refuses the
        setup (a NATS stream of the same name with another retention). Use the other methods
        only on an open queue."""
        ...

    async def close(self) -> None:
        """Release the connection. Never raises, also for a server that is gone or a queue
        that was never opened. Messages this instance fetched and did not ack stay in the
        queue: they come back to other consumers after their visibility timeout, or sooner
        where the backend can hand them back (NATS naks deliveries nobody asked for any more)."""
        ...

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        """Send the envelopes (one message each, or in bundles where the backend has them);
        returns once the backend has accepted all of them.

        At-least-once: a returned publish is delivered at least once unless the server loses
        it (see `survives_restart`), and may be delivered more than once. Where `dedupes`, a
        second publish of a `msg_id` within the duplicate window is dropped. No order is
        promised between messages, within a batch or across batches. An empty batch does
        nothing.

        Raises `QueueError` when the publish fails (`QueueUnavailable` when the server cannot
        be reached in time). Part or all of the batch may have been stored even so: the caller
        treats the publish as not done and the backstop runs what was not sent (the scheduler
        logs the failure and moves on)."""
        ...

    async def fetch(self, max_messages: int, *, timeout_s: float) -> list[Received]:
        """Up to `max_messages` (>= 1, else ValueError) deliverable envelopes; waits at most
        about `timeout_s` for the first, then takes what else is there, and returns [] if
        nothing came (not an error). With bundles, whole bundles only: as many as fit in
        `max_messages` if they were full, and at least one, which may exceed a `max_messages`
        smaller than a bundle.

        Each returned message is invisible to every consumer for the queue's `visibility_s`
        (set when the backend is built: JetStream AckWait, Redis idle time before XAUTOCLAIM,
        a timer in memory). If it is neither acked nor extended by then, it is delivered
        again, to any consumer, with `deliveries` one higher. No order is promised: a
        redelivery or a due retry may come before older messages. A message that cannot be
        decoded is dropped for good and logged, never returned. Raises `QueueUnavailable`
        when the server cannot be reached (NATS first waits up to `timeout_s` for its
        reconnect), `QueueError` on other failures."""
        ...

    async def extend(self, messages: Sequence[Received]) -> None:
        """Restart the visibility timeout of messages still being worked on (a heartbeat), so
        no other consumer gets them meanwhile. Does not count as a delivery.

        Extending a message that was acked, or that timed out and was redelivered since, is
        not an error and gives this consumer no claim on it: the newer delivery is the one
        that counts. An empty batch does nothing. Raises `QueueError` / `QueueUnavailable` on
        failure."""
        ...

    async def ack(self, messages: Sequence[Received]) -> None:
        """Remove messages for good; once this returns the server has the acks.

        Acking a message twice, or acking a delivery whose visibility timeout passed and that
        was redelivered since, is not an error. Such a late ack may remove the message from
        under its new holder (memory and Redis do): harmless, since a worker acks only once the
        run's lease in the store holds the fire. An empty batch does nothing. Raises
        `QueueError` / `QueueUnavailable` on failure; unacked messages then come back after
        their visibility timeout, and the fenced lease drops the repeat."""
        ...

    async def retry_later(self, message: Received, *, delay_s: float) -> None:
        """Give `message` back: deliverable again no earlier than `delay_s` from now (at once
        for 0 or less), to any consumer, with `deliveries` counting on.

        Giving back a message that was acked, or redelivered to another consumer since, is
        not an error (memory and Redis then leave it to that delivery). Workers use it to hand
        back, at shutdown, a batch they fetched ahead; a run's retries go through the store,
        not the queue. Raises `QueueError` / `QueueUnavailable` on failure (the message then
        comes back after its visibility timeout)."""
        ...

    async def depth(self) -> int:
        """How many messages were published and not yet acked: waiting, in flight and delayed
        alike. For metrics (`tickwork_queue_depth`): it may lag a little and is never used to
        decide anything. Raises `QueueError` / `QueueUnavailable` on failure."""
        ...
