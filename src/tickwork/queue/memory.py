"""`MemoryQueue`: the in-process reference implementation of the `Queue` contract.

It is what the worker's unit tests run against, so it implements the contract exactly and
nothing more: a message is invisible for `visibility_s` after each delivery, comes back with
`deliveries` incremented unless acked or extended, `retry_later` hides it for `delay_s`, and a
`msg_id` published again within `dedupe_window_s` is dropped (as JetStream does with
`Nats-Msg-Id`). Time is the event loop's monotonic clock. Nothing survives the process.

A "second consumer" is the same object used from another task: there is no other process to
share with.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from tickwork.queue.base import Envelope, Received

__all__ = ["MemoryQueue"]


@dataclass(slots=True)
class _Message:
    seq: int
    envelope: Envelope
    deliveries: int = 0
    visible_at: float = 0.0
    version: int = 0  # bumped on every change of visible_at; stale heap entries are skipped


@dataclass(frozen=True, slots=True)
class _Handle:
    seq: int
    delivery: int  # which delivery this handle belongs to (extend/retry only act on the latest)


class MemoryQueue:
    """In-process queue with the contract's visibility, retry and dedupe semantics."""

    dedupes = True  # a msg_id published again within dedupe_window_s is dropped
    survives_restart = False  # nothing survives the process

    def __init__(self, visibility_s: float = 30, *, dedupe_window_s: float = 120) -> None:
        if visibility_s <= 0:
            raise ValueError("visibility_s must be > 0")
        if dedupe_window_s < 0:
            raise ValueError("dedupe_window_s must be >= 0")
        self.visibility_s = float(visibility_s)
        self.dedupe_window_s = float(dedupe_window_s)
        self._messages: dict[int, _Message] = {}
        self._ready: list[tuple[float, int, int]] = []  # (visible_at, seq, version)
        self._seen: OrderedDict[str, float] = OrderedDict()  # msg_id -> forget at
        self._seq = itertools.count(1)
        self._changed = asyncio.Condition()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        now = self._now()
        self._forget_seen(now)
        for envelope in envelopes:
            msg_id = envelope.msg_id
            if msg_id in self._seen:
                continue
            if self.dedupe_window_s > 0:
                self._seen[msg_id] = now + self.dedupe_window_s
            message = _Message(seq=next(self._seq), envelope=envelope)
            self._messages[message.seq] = message
            self._schedule(message, now)
        await self._notify()

    async def fetch(self, max_messages: int, *, timeout_s: float) -> list[Received]:
        if max_messages < 1:
            raise ValueError("max_messages must be >= 1")
        deadline = self._now() + max(timeout_s, 0.0)
        while True:
            now = self._now()
            received = self._take(max_messages, now)
            if received or now >= deadline:
                return received
            wait_s = deadline - now
            if self._ready:
                wait_s = min(wait_s, max(self._ready[0][0] - now, 0.0))
            async with self._changed:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait_s)

    async def extend(self, messages: Sequence[Received]) -> None:
        now = self._now()
        for received in messages:
            message = self._current(received)
            if message is not None:
                self._schedule(message, now + self.visibility_s)

    async def ack(self, messages: Sequence[Received]) -> None:
        # Like XACK and a JetStream ack: removes the message even if it was redelivered since.
        for received in messages:
            self._messages.pop(_handle(received).seq, None)

    async def retry_later(self, message: Received, *, delay_s: float) -> None:
        current = self._current(message)
        if current is None:
            return  # acked, or redelivered elsewhere: that delivery decides now
        self._schedule(current, self._now() + max(delay_s, 0.0))
        await self._notify()

    async def depth(self) -> int:
        return len(self._messages)

    # -- internals ---------------------------------------------------------------------------

    def _take(self, max_messages: int, now: float) -> list[Received]:
        taken: list[Received] = []
        while self._ready and len(taken) < max_messages and self._ready[0][0] <= now:
            _, seq, version = heapq.heappop(self._ready)
            message = self._messages.get(seq)
            if message is None or message.version != version:
                continue  # acked, or rescheduled since this heap entry was pushed
            message.deliveries += 1
            self._schedule(message, now + self.visibility_s)
            handle = _Handle(seq=seq, delivery=message.deliveries)
            taken.append(
                Received(envelope=message.envelope, deliveries=message.deliveries, handle=handle)
            )
        return taken

    def _current(self, received: Received) -> _Message | None:
        """The message if `received` is still its latest delivery, else None."""
        handle = _handle(received)
        message = self._messages.get(handle.seq)
        if message is None or message.deliveries != handle.delivery:
            return None
        return message

    def _schedule(self, message: _Message, visible_at: float) -> None:
        message.version += 1
        message.visible_at = visible_at
        heapq.heappush(self._ready, (visible_at, message.seq, message.version))

    def _forget_seen(self, now: float) -> None:
        # Insertion order is expiry order: the window is the same for every msg_id.
        while self._seen:
            msg_id, forget_at = next(iter(self._seen.items()))
            if forget_at > now:
                break
            del self._seen[msg_id]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def __repr__(self) -> str:
        return f"MemoryQueue(visibility_s={self.visibility_s}, depth={len(self._messages)})"


def _handle(received: Received) -> _Handle:
    handle = received.handle
    if not isinstance(handle, _Handle):
        raise TypeError(f"not a MemoryQueue message: {received!r}")
    return handle
