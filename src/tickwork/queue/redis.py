"""`RedisQueue`: the `Queue` contract on Redis Streams (redis-py asyncio), `redis://host:6379/0`.

Keys (both on one Redis; in Redis Cluster give `stream` a hash tag, e.g. `{tickwork}:fires`):

    <stream>            the stream; one consumer group (`group`) shared by every worker
    <stream>:delayed    sorted set of messages waiting out a `retry_later` delay

How the contract maps onto Streams:

    publish       pipelined XADD, fields e = encoded envelope, id = msg_id.
    fetch         one Lua call: move due delayed messages back into the stream, XAUTOCLAIM
                  entries idle longer than `visibility_s` (a crashed or stalled consumer's),
                  then XREADGROUP ">" for new ones; if that found nothing, a blocking
                  XREADGROUP (in slices, so due retries and expired claims are noticed).
    extend        XCLAIM to ourselves, JUSTID: resets the idle time, not the delivery count.
                  Only entries we still own (a Lua check against XPENDING).
    ack           XACK + XDEL in one MULTI: work-queue semantics, an acked entry is gone.
    retry_later   one Lua call: ZADD to <stream>:delayed (score = server time + delay) and
                  XACK + XDEL of the entry, if we still own it.
    depth         XLEN + ZCARD <stream>:delayed.

`deliveries`: Redis counts deliveries per stream entry (XREADGROUP sets 1, every XAUTOCLAIM
adds 1). A `retry_later` moves the message to a new entry, so the count so far travels with
it (field d) and `deliveries` = d + the new entry's count: it counts every delivery of the
message, as JetStream's num_delivered does.

No dedupe: Redis 7 has no idempotent XADD, so publishing the same msg_id twice delivers it
twice (`dedupes = False`); the run ledger absorbs the duplicate.

Durability is whatever the server is configured for: without RDB/AOF a restart loses the
stream, the group and the delayed set (the queue recreates the group on its next call, and
the workers' backstop leases the lost runs straight from the store); with `appendfsync
everysec` up to a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.typing import EncodableT, FieldT

from tickwork.queue.base import Envelope, Received
from tickwork.queue.bundles import DEFAULT_BUNDLE, MAX_BUNDLE, messages_for, pack, unpack
from tickwork.queue.errors import QueueError, QueueUnavailable

__all__ = ["RedisQueue"]

log = logging.getLogger("tickwork.queue.redis")

T = TypeVar("T")

PROMOTE_LIMIT = 1000  # due delayed messages moved back per fetch call
MAX_BLOCK_SLICE_S = 1.0  # a blocking read wakes at least this often to look at claims/retries

# KEYS: stream, delayed. ARGV: group, consumer, min idle ms, count, autoclaim cursor, limit.
# Returns {next cursor, {{entry id, {field, value, ...}, delivery count}, ...}, ms until the
# next delayed message is due or -1}.
FETCH_LUA = """
local stream, delayed = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
local count = tonumber(ARGV[4])
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', delayed, '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[6]))
for _, member in ipairs(due) do
  local m = cjson.decode(member)
  redis.call('XADD', stream, '*', 'e', m['e'], 'id', m['id'], 'd', tostring(m['d']))
  redis.call('ZREM', delayed, member)
end
local out = {}
local claimed = redis.call('XAUTOCLAIM', stream, group, consumer, ARGV[3], ARGV[5], 'COUNT', count)
for _, entry in ipairs(claimed[2]) do
  if entry and entry[2] then
    local p = redis.call('XPENDING', stream, group, entry[1], entry[1], 1)
    local n = 1
    if p[1] then n = p[1][4] end
    out[#out + 1] = {entry[1], entry[2], n}
  end
end
if #out < count then
  local fresh = redis.call(
    'XREADGROUP', 'GROUP', group, consumer, 'COUNT', count - #out, 'STREAMS', stream, '>')
  if fresh then
    for _, entry in ipairs(fresh[1][2]) do out[#out + 1] = {entry[1], entry[2], 1} end
  end
end
local wait = -1
local nxt = redis.call('ZRANGE', delayed, 0, 0, 'WITHSCORES')
if nxt[2] then wait = math.max(tonumber(nxt[2]) - now_ms, 0) end
return {claimed[1], out, wait}
"""

# KEYS: stream. ARGV: group, consumer, entry ids... Returns how many were extended.
EXTEND_LUA = """
local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1, ARGV[2])
  if p[1] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    n = n + 1
  end
end
return n
"""

# KEYS: stream, delayed. ARGV: group, consumer, entry id, delay ms, member. 1 if moved.
RETRY_LUA = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1, ARGV[2])
if not p[1] then return 0 end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[2], now_ms + tonumber(ARGV[4]), ARGV[5])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('XDEL', KEYS[1], ARGV[3])
return 1
"""

# KEYS: stream. ARGV: group, consumer. Drops the consumer from the group if it owns nothing
# (deleting a consumer with pending entries would orphan them for good).
FORGET_CONSUMER_LUA = """
local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2])
if p[1] then return 0 end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
"""


class RedisQueue:
    """The `Queue` contract on a Redis stream with one consumer group."""

    dedupes = False  # no idempotent XADD before Redis 8.2: a repeated msg_id is delivered twice
    survives_restart = False  # only with RDB/AOF configured on the server

    def __init__(
        self,
        url: str,
        *,
        stream: str = "tickwork:fires",
        group: str = "tickwork-workers",
        consumer: str | None = None,
        visibility_s: float = 30,
        maxlen: int | None = None,
        connect_timeout_s: float = 5,
        retries: int = 3,
        bundle: int = DEFAULT_BUNDLE,
    ) -> None:
        if visibility_s <= 0:
            raise ValueError("visibility_s must be > 0")
        if not 1 <= bundle <= MAX_BUNDLE:
            raise ValueError(f"bundle must be 1 to {MAX_BUNDLE} envelopes per message")
        if maxlen is not None and maxlen < 1:
            raise ValueError("maxlen must be >= 1 or None")
        self.url = url
        self.stream = stream
        self.delayed_key = f"{stream}:delayed"
        self.group = group
        self.consumer = consumer or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.visibility_s = float(visibility_s)
        self.maxlen = maxlen
        self.connect_timeout_s = connect_timeout_s
        self.retries = retries
        self.bundle = bundle
        self._redis: aioredis.Redis | None = None
        self._claim_cursor = "0-0"
        self._fetch_script: Any = None
        self._extend_script: Any = None
        self._retry_script: Any = None
        self._forget_script: Any = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        if self._redis is not None:
            return
        client = aioredis.Redis.from_url(
            self.url,
            protocol=2,
            socket_connect_timeout=self.connect_timeout_s,
            retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), self.retries),
            client_name=f"tickwork:{self.consumer}",
        )
        try:
            await client.ping()
        except (redis.exceptions.RedisError, OSError) as exc:
            await client.aclose()
            raise QueueUnavailable(
                f"redis: cannot connect to {_safe_url(self.url)}: {_describe(exc)}; "
                "is redis-server running there?"
            ) from exc
        self._redis = client
        self._fetch_script = client.register_script(FETCH_LUA)
        self._extend_script = client.register_script(EXTEND_LUA)
        self._retry_script = client.register_script(RETRY_LUA)
        self._forget_script = client.register_script(FORGET_CONSUMER_LUA)
        try:
            await self._call("create the consumer group", self._ensure_group)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        client, self._redis = self._redis, None
        if client is None:
            return
        with contextlib.suppress(redis.exceptions.RedisError, OSError):
            await self._forget_script(keys=[self.stream], args=[self.group, self.consumer])
        with contextlib.suppress(redis.exceptions.RedisError, OSError):
            await client.aclose()

    # -- the contract ------------------------------------------------------------------------

    async def publish(self, envelopes: Sequence[Envelope]) -> None:
        if not envelopes:
            return
        client = self._client()

        async def run() -> None:
            async with client.pipeline(transaction=False) as pipe:
                for body, msg_id in pack(envelopes, self.bundle):
                    fields: dict[FieldT, EncodableT] = {"e": body, "id": msg_id}
                    pipe.xadd(self.stream, fields, maxlen=self.maxlen, approximate=True)
                await pipe.execute()

        await self._call("publish", run)

    async def fetch(self, max_messages: int, *, timeout_s: float) -> list[Received]:
        if max_messages < 1:
            raise ValueError("max_messages must be >= 1")
        wanted = messages_for(max_messages, self.bundle)  # entries, each up to a bundle
        client = self._client()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        while True:
            cursor, entries, wait_ms = await self._call(
                "fetch", lambda: self._claim_and_read(wanted)
            )
            self._claim_cursor = cursor
            if entries:
                return await self._received(entries)
            remaining_s = deadline - loop.time()
            if remaining_s <= 0:
                return []
            slice_s = min(remaining_s, MAX_BLOCK_SLICE_S, self.visibility_s / 2)
            if wait_ms >= 0:
                slice_s = min(slice_s, wait_ms / 1000)
            block_ms = max(1, int(slice_s * 1000))

            async def read_blocking(block_ms: int = block_ms) -> Any:
                return await client.xreadgroup(
                    self.group,
                    self.consumer,
                    {self.stream: ">"},
                    count=wanted,
                    block=block_ms,
                )

            fresh = await self._call("fetch", read_blocking)
            entries = [(entry_id, fields, 1) for entry_id, fields in _stream_entries(fresh)]
            if entries:
                return await self._received(entries)

    async def extend(self, messages: Sequence[Received]) -> None:
        if not messages:
            return
        ids = _distinct_ids(messages)
        await self._call(
            "extend",
            lambda: self._extend_script(keys=[self.stream], args=[self.group, self.consumer, *ids]),
        )

    async def ack(self, messages: Sequence[Received]) -> None:
        if not messages:
            return
        await self._ack_ids(_distinct_ids(messages))

    async def retry_later(self, message: Received, *, delay_s: float) -> None:
        # The whole entry goes back, with every envelope of its bundle: for each of them the
        # member is the same, so giving back a bundle envelope by envelope adds it once.
        entry = _entry(message)
        member = json.dumps(
            {"d": message.deliveries, "id": entry.msg_id, "e": entry.body.decode()},
            separators=(",", ":"),
        )
        delay_ms = max(0, round(delay_s * 1000))
        entry_id = entry.entry_id
        await self._call(
            "retry_later",
            lambda: self._retry_script(
                keys=[self.stream, self.delayed_key],
                args=[self.group, self.consumer, entry_id, delay_ms, member],
            ),
        )

    async def depth(self) -> int:
        # XLEN, not XINFO GROUPS pending + lag: every ack deletes its entry (XACK + XDEL), so
        # the stream holds exactly the unacked entries, delivered or not, and XLEN is O(1) and
        # never unknown (a group's lag can be reported as nil). Delayed retries sit in the zset.
        client = self._client()

        async def run() -> int:
            async with client.pipeline(transaction=False) as pipe:
                pipe.xlen(self.stream)
                pipe.zcard(self.delayed_key)
                stream_len, delayed = await pipe.execute()
            return int(stream_len) + int(delayed)

        return await self._call("depth", run, heal=False)

    # -- internals ---------------------------------------------------------------------------

    async def _ensure_group(self) -> None:
        try:
            # Id 0, not $: entries published before the group existed (or while a restarted
            # server had no group yet) are delivered too.
            await self._client().xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.exceptions.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _claim_and_read(self, max_messages: int) -> tuple[str, list[Any], int]:
        raw = await self._fetch_script(
            keys=[self.stream, self.delayed_key],
            args=[
                self.group,
                self.consumer,
                max(1, round(self.visibility_s * 1000)),
                max_messages,
                self._claim_cursor,
                PROMOTE_LIMIT,
            ],
        )
        cursor, entries, wait_ms = raw
        return _text(cursor), list(entries), int(wait_ms)

    async def _received(self, entries: Sequence[tuple[Any, Any, Any]]) -> list[Received]:
        received: list[Received] = []
        poison: list[str] = []
        for raw_id, raw_fields, count in entries:
            entry_id = _text(raw_id)
            fields = _fields(raw_fields)
            try:
                body = fields[b"e"]
                envelopes = unpack(body)
                earlier = int(fields.get(b"d", b"0"))
            except (ValueError, KeyError, TypeError) as exc:
                log.error(
                    "undecodable message dropped",
                    extra={"action": "queue.poison", "entry_id": entry_id, "error": str(exc)},
                )
                poison.append(entry_id)
                continue
            deliveries = earlier + int(count)
            # The envelopes of a bundle share its entry: acking one acks them all.
            handle = _Entry(entry_id, body, _text(fields.get(b"id", b"")))
            received += [
                Received(envelope=e, deliveries=deliveries, handle=handle) for e in envelopes
            ]
        if poison:
            # A poison entry would come back forever: drop it for good, loudly (logged above).
            await self._ack_ids(poison)
        return received

    async def _ack_ids(self, ids: Sequence[str]) -> None:
        client = self._client()

        async def run() -> None:
            async with client.pipeline(transaction=True) as pipe:
                pipe.xack(self.stream, self.group, *ids)
                pipe.xdel(self.stream, *ids)
                await pipe.execute()

        try:
            await self._call("ack", run, heal=False)
        except QueueError as exc:
            if not _is_nogroup(exc.__cause__):
                raise
            # The group is gone (server restarted without persistence): nothing left to ack.

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            raise QueueError("redis: the queue is not open; call open() first")
        return self._redis

    async def _call(self, action: str, run: Callable[[], Awaitable[T]], *, heal: bool = True) -> T:
        """Run `run`, translating redis errors; recreate a vanished group once (restart)."""
        try:
            try:
                return await run()
            except redis.exceptions.ResponseError as exc:
                if not (heal and _is_nogroup(exc)):
                    raise
                log.warning(
                    "consumer group missing; recreating it",
                    extra={"action": "queue.redis.regroup", "stream": self.stream},
                )
                await self._ensure_group()
                return await run()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
            self._raise(action, exc, QueueUnavailable)
        except redis.exceptions.RedisError as exc:
            self._raise(action, exc, QueueError)

    def _raise(self, action: str, exc: BaseException, kind: type[QueueError]) -> NoReturn:
        raise kind(f"redis: {action} failed on {_safe_url(self.url)}: {_describe(exc)}") from exc

    def __repr__(self) -> str:
        return (
            f"RedisQueue(url={_safe_url(self.url)!r}, stream={self.stream!r}, "
            f"group={self.group!r}, consumer={self.consumer!r}, visibility_s={self.visibility_s})"
        )


def _stream_entries(reply: Any) -> list[tuple[Any, Any]]:
    """[(id, fields)] from an XREADGROUP reply for one stream (RESP2: [[name, entries]])."""
    if not reply:
        return []
    return [(entry_id, fields) for entry_id, fields in reply[0][1] if fields is not None]


def _fields(raw: Any) -> dict[bytes, bytes]:
    if isinstance(raw, dict):
        return {_bytes(k): _bytes(v) for k, v in raw.items()}
    items = list(raw)
    return {_bytes(items[i]): _bytes(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class _Entry:
    """A fetched stream entry: what `Received.handle` holds (shared by a bundle's envelopes)."""

    entry_id: str
    body: bytes  # the `e` field: one envelope's encoding, or a bundle's
    msg_id: str


def _entry(received: Received) -> _Entry:
    handle = received.handle
    if not isinstance(handle, _Entry):
        raise TypeError(f"not a RedisQueue message: {received!r}")
    return handle


def _distinct_ids(messages: Sequence[Received]) -> list[str]:
    """The stream entries behind `messages`, each once: the envelopes of a bundle share one."""
    return list(dict.fromkeys(_entry(received).entry_id for received in messages))


def _is_nogroup(exc: BaseException | None) -> bool:
    return isinstance(exc, redis.exceptions.ResponseError) and "NOGROUP" in str(exc)


def _safe_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}" if user else f"{scheme}{sep}***@{host}"


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
