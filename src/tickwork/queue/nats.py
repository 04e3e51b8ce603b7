"""`NatsQueue`: the `Queue` contract on NATS JetStream (nats-py), `nats://host:4222`.

Layout on the server (created or brought up to date by `open`, idempotently):

* a stream (`stream`, default TICKWORK) on `subject`, retention WorkQueue (a message is
  deleted once acked), file storage, duplicate window `dedupe_window_s`;
* one durable PULL consumer (`durable`) shared by every worker process: explicit ack,
  AckWait = `visibility_s`, MaxDeliver = `max_deliver` (-1: unlimited, so the server never
  drops a message on its own; workers dead-letter by the store's attempt count).

How the contract maps onto JetStream:

    publish       a core publish per message of up to `bundle` envelopes (queue/bundles.py),
                  header Nats-Msg-Id = its msg_id (the server drops a repeat within the
                  duplicate window: a scheduler re-publishing after a crash), all sent before
                  any PubAck is awaited. The PubAcks come back
                  on this instance's own inbox and are counted per batch; every one is checked
                  (not stored, or stored by another stream: the publish fails).
    fetch         one pull request (no_wait + expires, see `_pull`): waits up to timeout_s
                  for the first message, returns what is there, one Received per envelope
                  (a bundle's share its message). deliveries = num_delivered.
    extend        +WPI (in_progress): restarts AckWait.
    ack           +ACK, then a flush so the server has it when we return.
    retry_later   -NAK with delay: redelivered no earlier than delay_s, num_delivered + 1.
    depth         the consumer's num_pending + num_ack_pending (published, not yet acked).

Durability: the stream is on disk (-sd), so unacked messages and the consumer survive a
server restart, even a SIGKILL. An ack that had not reached the disk when the server was
killed can be lost, so an acked message may be delivered once more after a crash. JetStream
acknowledges a publish before fsync (sync_interval, 2 min by default): a machine crash can
lose the newest messages. The workers' backstop runs what was lost (they lease such runs
straight from the store); the fenced lease drops repeats.

Connection: nats-py reconnects forever (`reconnect_time_wait_s` between attempts). While it
is disconnected, fetch and publish wait for the reconnect up to their timeout
(`timeout_s`, `publish_timeout_s`) and then raise `QueueUnavailable`; a publish that was on
the wire when the connection broke fails the same way (its PubAck never comes). nats-py
exceptions are translated into `tickwork.queue.errors` at this boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    Header,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from tickwork.queue.base import Envelope, Received
from tickwork.queue.bundles import DEFAULT_BUNDLE, MAX_BUNDLE, messages_for, pack, unpack
from tickwork.queue.errors import QueueError, QueueUnavailable

__all__ = ["NatsQueue"]

log = logging.getLogger("tickwork.queue.nats")

T = TypeVar("T")

MSG_ID_HEADER = "Nats-Msg-Id"
STATUS_HEADER = "Status"
MIN_EXPIRES_S = 0.01  # below this a pull request is plain no_wait: take what is there
PULL_GRACE_S = 0.5  # how long past `expires` we wait for the server's closing status
RECONNECT_POLL_S = 0.05


class NatsQueue:
    """The `Queue` contract on a JetStream work-queue stream with one durable pull consumer."""

    dedupes = True  # Nats-Msg-Id within the stream's duplicate window
    survives_restart = True  # file storage (a machine crash before fsync can still lose some)

    def __init__(
        self,
        url: str,
        *,
        stream: str = "TICKWORK",
        subject: str = "tickwork.fires",
        durable: str = "tickwork-workers",
        visibility_s: float = 30,
        max_deliver: int = -1,
        dedupe_window_s: float = 120,
        replicas: int = 1,
        max_ack_pending: int = 20_000,
        connect_timeout_s: float = 10,
        reconnect_time_wait_s: float = 2,
        api_timeout_s: float = 5,
        publish_timeout_s: float = 10,
        bundle: int = DEFAULT_BUNDLE,
    ) -> None:
        if visibility_s <= 0:
            raise ValueError("visibility_s must be > 0")
        if max_deliver == 0 or max_deliver < -1:
            raise ValueError("max_deliver must be -1 (unlimited) or >= 1")
        if dedupe_window_s < 0:
            raise ValueError("dedupe_window_s must be >= 0")
        if not 1 <= bundle <= MAX_BUNDLE:
            raise ValueError(f"bundle must be 1 to {MAX_BUNDLE} envelopes per message")
        self.bundle = bundle
        self.url = url
        self.stream = stream
        self.subject = subject
        self.durable_name = durable
        self.visibility_s = float(visibility_s)
        self.max_deliver = max_deliver
        self.dedupe_window_s = float(dedupe_window_s)
        self.replicas = replicas
        self.max_ack_pending = max_ack_pending
        self.connect_timeout_s = connect_timeout_s
        self.reconnect_time_wait_s = reconnect_time_wait_s
        self.api_timeout_s = api_timeout_s
        self.publish_timeout_s = publish_timeout_s
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._sub: Subscription | None = None
        self._inbox = ""  # pull requests' replies: {inbox}.{token}
        self._ack_inbox = ""  # PubAcks: {ack_inbox}.{token}
        self._tokens = itertools.count(1)
        self._pub_acks: dict[str, _PublishBatch] = {}  # token -> the publish awaiting it
        self._fetch_lock = asyncio.Lock()
        self._waiter: asyncio.Queue[Msg] | None = None  # the fetch in flight, if any
        self._waiter_reply = ""  # the reply subject of its pull request
        self._strays: list[tuple[float, Msg]] = []  # (arrived at, delivery nobody waited for)
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._nc is not None:
            return
        nc = NatsClient()
        try:
            await asyncio.wait_for(
                nc.connect(
                    servers=[self.url],
                    name=f"tickwork:{socket.gethostname()}:{os.getpid()}",
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,  # forever: the server may be restarting
                    reconnect_time_wait=self.reconnect_time_wait_s,  # type: ignore[arg-type]
                    connect_timeout=max(1, round(self.connect_timeout_s)),
                    error_cb=self._on_error,
                    disconnected_cb=self._on_disconnected,
                    reconnected_cb=self._on_reconnected,
                ),
                self.connect_timeout_s,
            )
        except (TimeoutError, OSError, nats.errors.Error) as exc:
            with contextlib.suppress(Exception):
                await nc.close()
            raise QueueUnavailable(
                f"nats: cannot connect to {self.url} within {self.connect_timeout_s:g} s: "
                f"{_describe(exc)}; is nats-server running with JetStream (-js)?"
            ) from exc
        self._nc = nc
        try:
            self._js = nc.jetstream(timeout=self.api_timeout_s)
            await self._call("create the stream", self._ensure_stream())
            await self._call("create the consumer", self._ensure_consumer())
            self._inbox = nc.new_inbox()
            self._sub = await self._call(
                "subscribe", nc.subscribe(f"{self._inbox}.*", cb=self._route)
            )
            self._ack_inbox = nc.new_inbox()
            await self._call("subscribe", nc.subscribe(f"{self._ack_inbox}.*", cb=self._on_pub_ack))
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        nc, self._nc, self._js, self._sub = self._nc, None, None, None
        self._closing = True
        strays, self._strays = self._strays, []
        if nc is not None and not nc.is_closed:
            # Deliveries nobody asked for any more: hand them back now instead of letting
            # them sit out AckWait.
            with contextlib.suppress(Exception):
                for _, msg in strays:
                    await msg.nak()
                await nc.flush(timeout=1)
            with contextlib.suppress(Exception):
                await nc.close()
        self._closing = False

    # -- the contract ------------------------------------------------------------------------

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        if not envelopes:
            return
        nc = self._connection()
        # nats-py buffers a publish made while reconnecting, but such a message can be lost
        # in the reconnect (its PubAck never comes): wait for the connection instead.
        await self._wait_connected("publish", self.publish_timeout_s)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.publish_timeout_s
        messages = pack(envelopes, self.bundle)
        batch = _PublishBatch(remaining=len(messages), done=loop.create_future())
        tokens: list[str] = []
        try:
            # Every message goes out before the first PubAck is awaited; the acks come back
            # on our own inbox (`_on_pub_ack`), a counter per batch instead of a future each.
            for body, msg_id in messages:
                token = str(next(self._tokens))
                self._pub_acks[token] = batch
                tokens.append(token)
                await nc.publish(
                    self.subject,
                    body,
                    reply=f"{self._ack_inbox}.{token}",
                    headers={MSG_ID_HEADER: msg_id},
                )
            await asyncio.wait_for(batch.done, max(deadline - loop.time(), 0.0))
        except (TimeoutError, nats.errors.Error) as exc:
            self._raise("publish", exc)
        finally:
            for token in tokens:  # a PubAck arriving after we gave up finds nobody waiting
                self._pub_acks.pop(token, None)
        if batch.failures:
            failed = len(batch.failures)
            self._raise(
                f"publish ({failed} of {len(messages)} messages not stored)", batch.failures[0]
            )
        strangers = batch.streams - {self.stream}
        if strangers:
            raise QueueError(
                f"nats: subject {self.subject!r} is stored by stream {min(strangers)!r}, "
                f"not {self.stream!r}: give tickwork a subject no other stream captures"
            )

    async def _on_pub_ack(self, msg: Msg) -> None:
        """Subscription callback: count a PubAck (or its error) against its publish batch."""
        batch = self._pub_acks.pop(msg.subject.rpartition(".")[2], None)
        if batch is not None:
            batch.settle(_pub_ack_outcome(msg))

    async def fetch(self, max_messages: int, *, timeout_s: float) -> list[Received]:
        if max_messages < 1:
            raise ValueError("max_messages must be >= 1")
        nc = self._connection()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        await self._wait_connected("fetch", timeout_s)
        # One pull request in flight per instance: deliveries carry the stream's subject, not
        # the request's inbox, so they can only be told apart by which fetch is waiting.
        try:
            await asyncio.wait_for(self._fetch_lock.acquire(), max(deadline - loop.time(), 0))
        except TimeoutError:
            return []
        try:
            wanted = messages_for(max_messages, self.bundle)
            msgs = self._take_strays(wanted, loop.time())
            need = wanted - len(msgs)
            if need > 0:
                wait_s = max(deadline - loop.time(), 0.0) if not msgs else 0.0
                msgs += await self._pull(nc, need, wait_s)
        finally:
            self._fetch_lock.release()
        received: list[Received] = []
        for msg in msgs:
            try:
                envelopes = unpack(msg.data)
            except (ValueError, KeyError, TypeError) as exc:
                # A poison message would come back forever: drop it for good, loudly.
                log.error(
                    "undecodable message dropped",
                    extra={"action": "queue.poison", "subject": msg.subject, "error": str(exc)},
                )
                with contextlib.suppress(nats.errors.Error):
                    await msg.term()
                continue
            # The envelopes of a bundle share its message: acking one acks them all.
            deliveries = _deliveries(msg)
            received += [Received(envelope=e, deliveries=deliveries, handle=msg) for e in envelopes]
        return received

    async def extend(self, messages: Sequence[Received]) -> None:
        if not messages:
            return
        for msg in _distinct(messages):
            await self._reply(msg.in_progress, "extend")
        await self._flush("extend")

    async def ack(self, messages: Sequence[Received]) -> None:
        if not messages:
            return
        for msg in _distinct(messages):
            await self._reply(msg.ack, "ack")
        await self._flush("ack")

    async def retry_later(self, message: Received, *, delay_s: float) -> None:
        msg = _msg(message)
        if delay_s > 0:
            await self._reply(lambda: msg.nak(delay=delay_s), "retry_later")
        else:
            await self._reply(msg.nak, "retry_later")
        await self._flush("retry_later")

    async def depth(self) -> int:
        # The consumer's view rather than the stream's message count: the stream may also hold
        # other subjects (open() only adds ours to an existing stream). Undelivered plus
        # delivered-but-unacked (in flight, or waiting out a NAK delay) is "published and not
        # yet acked" for our subject.
        js = self._context()
        info = await self._call(
            "read the consumer state", js.consumer_info(self.stream, self.durable_name)
        )
        return int(info.num_pending or 0) + int(info.num_ack_pending or 0)

    @property
    def server_version(self) -> tuple[int, int, int]:
        """(major, minor, patch) of the server this queue is connected to; (0, 0, 0) if none.

        Delivery counts depend on it: before nats-server 2.11 a redelivery can come back as a
        first delivery (docs/queues.md, "Delivery counts")."""
        nc = self._nc
        if nc is None:
            return (0, 0, 0)
        version = nc.connected_server_version
        return (version.major, version.minor, version.patch)

    # -- setup -------------------------------------------------------------------------------

    async def _ensure_stream(self) -> None:
        js = self._context()
        try:
            info = await js.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            wanted = StreamConfig(
                name=self.stream,
                subjects=[self.subject],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=StorageType.FILE,
                duplicate_window=self.dedupe_window_s,
                num_replicas=self.replicas,
            )
            try:
                await js.add_stream(wanted)
                return
            except nats.js.errors.BadRequestError:
                # Another process created it between our two calls: check what it made.
                info = await js.stream_info(self.stream)
        config = info.config
        if config.retention != RetentionPolicy.WORK_QUEUE:
            raise QueueError(
                f"nats: stream {self.stream!r} exists with retention {config.retention}; "
                "tickwork needs a work-queue stream: pass another `stream` name or delete it"
            )
        subjects = list(config.subjects or [])
        changes: dict[str, Any] = {}
        if self.subject not in subjects:
            changes["subjects"] = [*subjects, self.subject]
        if abs((config.duplicate_window or 0) - self.dedupe_window_s) > 1e-3:
            changes["duplicate_window"] = self.dedupe_window_s
        if changes:
            # Keep whatever else an operator configured (limits, replicas, placement).
            await js.update_stream(dataclasses.replace(config, **changes))

    async def _ensure_consumer(self) -> None:
        js = self._context()
        wanted = ConsumerConfig(
            name=self.durable_name,
            durable_name=self.durable_name,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.visibility_s,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
            filter_subject=self.subject,
        )
        try:
            info = await js.consumer_info(self.stream, self.durable_name)
        except nats.js.errors.NotFoundError:
            info = None
        if info is not None and _consumer_matches(info.config, wanted):
            return
        # Creating an existing durable with an editable difference (AckWait, MaxDeliver,
        # MaxAckPending) updates it; an identical concurrent create succeeds as well.
        try:
            await js.add_consumer(self.stream, wanted)
        except nats.js.errors.BadRequestError:
            info = await js.consumer_info(self.stream, self.durable_name)
            if not _consumer_matches(info.config, wanted):
                raise
            # Another process created the same consumer between our two calls.

    # -- internals ---------------------------------------------------------------------------

    def _context(self) -> JetStreamContext:
        if self._js is None:
            raise QueueError("nats: the queue is not open; call open() first")
        return self._js

    def _connection(self) -> NatsClient:
        if self._nc is None or self._sub is None:
            raise QueueError("nats: the queue is not open; call open() first")
        return self._nc

    async def _pull(self, nc: NatsClient, batch: int, timeout_s: float) -> list[Msg]:
        """One pull request: wait up to `timeout_s` for the first message, take what is there.

        Not nats-py's `PullSubscription.fetch`: in nats-py 2.16 its second phase can leave a
        lingering pull request on the server after fetch returned (consumer num_waiting stays
        1), and messages published meanwhile are delivered into a buffer nobody reads while
        their AckWait runs. Here every request is `no_wait` + `expires`: the server (2.9+)
        waits for the first message, sends what is available up to `batch`, and ends the
        request with a 404/408 status, so nothing is left open when we return.
        """
        waiter: asyncio.Queue[Msg] = asyncio.Queue()
        reply = f"{self._inbox}.{next(self._tokens)}"
        self._waiter, self._waiter_reply = waiter, reply
        request: dict[str, Any] = {"batch": batch, "no_wait": True}
        if timeout_s >= MIN_EXPIRES_S:
            request["expires"] = int(timeout_s * 1e9)
        msgs: list[Msg] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0) + PULL_GRACE_S
        try:
            await nc.publish(
                f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.durable_name}",
                json.dumps(request).encode(),
                reply=reply,
            )
            while len(msgs) < batch:
                if waiter.empty():
                    try:
                        msg = await asyncio.wait_for(waiter.get(), deadline - loop.time())
                    except TimeoutError:
                        break
                else:  # no timer and no task per message for what has already arrived
                    msg = waiter.get_nowait()
                status = _status(msg)
                if status is None:
                    msgs.append(msg)
                elif status in ("404", "408"):
                    break  # no (more) messages: the request is over
                elif status == "100":
                    continue  # idle heartbeat
                elif status == "409" and msgs:
                    break  # e.g. leadership change: keep what we have
                elif status == "503":
                    raise QueueUnavailable(
                        f"nats: fetch failed on {self.url}: no JetStream responders "
                        f"for consumer {self.durable_name!r} on stream {self.stream!r}"
                    )
                else:
                    raise QueueError(
                        f"nats: fetch failed on {self.url}: status {status} "
                        f"{_status_description(msg)}"
                    )
        except nats.errors.Error as exc:
            self._raise("fetch", exc)
        finally:
            self._waiter = None
            now = loop.time()
            while not waiter.empty():
                leftover = waiter.get_nowait()
                if _status(leftover) is None:
                    self._strays.append((now, leftover))
        return msgs

    async def _route(self, msg: Msg) -> None:
        """Subscription callback: hand a delivery to the fetch in flight."""
        waiter = self._waiter
        if _status(msg) is not None:
            # Statuses do arrive on the request's own reply subject: drop those that end an
            # older, abandoned request.
            if waiter is not None and msg.subject == self._waiter_reply:
                waiter.put_nowait(msg)
        elif waiter is not None:
            waiter.put_nowait(msg)
        elif not self._closing:
            # Answers a request whose fetch gave up (client deadline before the server's):
            # the next fetch takes it while it is fresh.
            self._strays.append((asyncio.get_running_loop().time(), msg))

    def _take_strays(self, max_messages: int, now: float) -> list[Msg]:
        fresh_after = now - self.visibility_s / 2
        taken: list[Msg] = []
        kept: list[tuple[float, Msg]] = []
        for arrived, msg in self._strays:
            if arrived < fresh_after:
                continue  # too close to its AckWait: let the server redeliver it
            if len(taken) < max_messages:
                taken.append(msg)
            else:
                kept.append((arrived, msg))
        self._strays = kept
        return taken

    async def _wait_connected(self, action: str, timeout_s: float) -> None:
        """Wait out a reconnect for up to `timeout_s`, so a caller's fetch loop backs off."""
        nc = self._nc
        if nc is None:
            raise QueueError("nats: the queue is not open; call open() first")
        await _revive_if_zombie(nc)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not nc.is_connected:
            if nc.is_closed:
                raise QueueUnavailable(f"nats: cannot {action}: the connection is closed")
            if asyncio.get_running_loop().time() >= deadline:
                raise QueueUnavailable(f"nats: cannot {action}: reconnecting to {self.url}")
            await asyncio.sleep(RECONNECT_POLL_S)

    async def _call(self, action: str, aw: Awaitable[T]) -> T:
        try:
            return await aw
        except (TimeoutError, nats.errors.Error, OSError) as exc:
            self._raise(action, exc)

    async def _reply(self, send: Callable[[], Awaitable[None]], action: str) -> None:
        try:
            await send()
        except nats.errors.MsgAlreadyAckdError:
            pass  # acked (or nacked) through this handle already: nothing left to do
        except nats.errors.Error as exc:
            self._raise(action, exc)

    async def _flush(self, action: str) -> None:
        nc = self._nc
        if nc is None:
            raise QueueError("nats: the queue is not open; call open() first")
        try:
            await _flush_keeping_pongs(nc, max(1.0, self.api_timeout_s))
        except (TimeoutError, nats.errors.Error) as exc:
            self._raise(action, exc)

    def _raise(self, action: str, exc: BaseException) -> NoReturn:
        unavailable = isinstance(
            exc,
            TimeoutError
            | OSError
            | nats.errors.ConnectionClosedError
            | nats.errors.NoRespondersError
            | nats.errors.StaleConnectionError
            | nats.js.errors.NoStreamResponseError
            | nats.js.errors.ServiceUnavailableError,
        )
        kind = QueueUnavailable if unavailable else QueueError
        raise kind(f"nats: {action} failed on {self.url}: {_describe(exc)}") from exc

    async def _on_error(self, exc: Exception) -> None:
        log.warning(
            "nats connection error", extra={"action": "queue.nats.error", "error": str(exc)}
        )

    async def _on_disconnected(self) -> None:
        if self._closing:
            return
        log.warning("nats disconnected", extra={"action": "queue.nats.disconnected"})

    async def _on_reconnected(self) -> None:
        log.info("nats reconnected", extra={"action": "queue.nats.reconnected"})

    def __repr__(self) -> str:
        return (
            f"NatsQueue(url={self.url!r}, stream={self.stream!r}, subject={self.subject!r}, "
            f"durable={self.durable_name!r}, visibility_s={self.visibility_s})"
        )


@dataclasses.dataclass(slots=True, kw_only=True)
class _PublishBatch:
    """The PubAcks one `publish` call is waiting for."""

    remaining: int
    done: asyncio.Future[None]
    failures: list[BaseException] = dataclasses.field(default_factory=list)
    streams: set[str] = dataclasses.field(default_factory=set)  # the streams that stored them

    def settle(self, outcome: BaseException | str) -> None:
        if isinstance(outcome, BaseException):
            self.failures.append(outcome)
        else:
            self.streams.add(outcome)
        self.remaining -= 1
        if self.remaining <= 0 and not self.done.done():
            self.done.set_result(None)


def _pub_ack_outcome(msg: Msg) -> BaseException | str:
    """What a PubAck says: the stream that stored the message, or why it was not stored."""
    if _status(msg) == "503":  # no stream listens on the subject (any more)
        return nats.js.errors.NoStreamResponseError()
    try:
        reply = json.loads(msg.data)
        if "error" in reply:
            nats.js.errors.APIError.from_error(reply["error"])  # raises the code's error class
        return str(reply["stream"])
    except nats.js.errors.APIError as exc:
        return exc
    except (ValueError, KeyError, TypeError) as exc:
        return QueueError(f"nats: unreadable PubAck {msg.data[:200]!r}: {exc}")


def _consumer_matches(have: ConsumerConfig, want: ConsumerConfig) -> bool:
    return (
        abs((have.ack_wait or 0) - (want.ack_wait or 0)) < 1e-3
        and have.max_deliver == want.max_deliver
        and have.max_ack_pending == want.max_ack_pending
        and have.filter_subject == want.filter_subject
        and have.ack_policy == want.ack_policy
    )


def _msg(received: Received) -> Msg:
    handle = received.handle
    if not isinstance(handle, Msg):
        raise TypeError(f"not a NatsQueue message: {received!r}")
    return handle


def _status(msg: Msg) -> str | None:
    """The status code of a JetStream status message (404, 408, ...), None for a delivery."""
    if msg.headers and not msg.data:
        status = msg.headers.get(STATUS_HEADER)
        if status:
            return str(status)
    return None


def _status_description(msg: Msg) -> str:
    headers: dict[Any, Any] = msg.headers or {}
    # nats-py keys the description by its Header enum member, the status by plain "Status".
    description = headers.get(Header.DESCRIPTION) or headers.get("Description")
    return str(description) if description else "(no description)"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- two nats-py traps (nats-py 2.16; see docs/queues.md, "Partitions") -------------------------


async def _flush_keeping_pongs(nc: NatsClient, timeout_s: float) -> None:
    """`nc.flush(timeout)` without its trap. On a timeout nats-py cancels the flush's PONG
    future but leaves it queued; when the PONG finally arrives (a partition heals), setting
    the cancelled future raises InvalidStateError inside the client's read loop, which then
    ends without a reconnect. Here the future is shielded: a late PONG completes it harmlessly.
    Falls back to `nc.flush` if the client's internals are not what this expects."""
    send_ping = getattr(nc, "_send_ping", None)
    reading = getattr(nc, "_reading_task", None)
    if send_ping is None or reading is None or reading.done() or nc.is_closed:
        await nc.flush(timeout=max(1, round(timeout_s)))
        return
    pong: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
    await send_ping(pong)
    try:
        await asyncio.wait_for(asyncio.shield(pong), timeout_s)
    except TimeoutError:
        raise nats.errors.FlushTimeoutError from None


async def _revive_if_zombie(nc: NatsClient) -> None:
    """A client whose read loop died while it believes it is connected reads nothing ever
    again (nats-py ends the loop on an unexpected exception without reconnecting). Hand it to
    its own error path, which reconnects and starts a new read loop."""
    reading = getattr(nc, "_reading_task", None)
    process_op_err = getattr(nc, "_process_op_err", None)
    if reading is None or process_op_err is None or not reading.done():
        return
    if nc.is_connected:
        log.warning("nats read loop died; reconnecting", extra={"action": "queue.nats.revive"})
        await process_op_err(nats.errors.StaleConnectionError())


def _deliveries(msg: Msg) -> int:
    """How often JetStream has delivered `msg`, read from its reply subject's fifth token
    (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>`):
    nats-py's `metadata` parses every token into a dataclass and a datetime, about 5 % of a
    worker's CPU in a NATS burst for the one number tickwork reads. Any other layout (the
    longer one with a domain and an account hash) goes through `metadata`."""
    tokens = (msg.reply or "").split(".")
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return int(tokens[4])
    return int(msg.metadata.num_delivered)


def _distinct(messages: Sequence[Received]) -> list[Msg]:
    """The NATS messages behind `messages`, each once: the envelopes of a bundle share one."""
    return list({id(msg): msg for msg in map(_msg, messages)}.values())
