"""Queue URL -> queue backend (built, not opened).

    nats://HOST:PORT            NatsQueue   (JetStream work-queue stream, durable pull consumer)
    redis://HOST:PORT/DB        RedisQueue  (Redis Streams consumer group; rediss:// for TLS)
    memory://                   MemoryQueue (in-process; tests and single-process experiments)
    table, or empty             the default table queue, which lives with the schedule store

Options (`visibility_s`, `stream`, ...) are passed through as keyword arguments to the
backend's constructor; one it does not take is an `InvalidInput` naming the accepted ones.
Driver modules are imported only for the backend asked for.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from tickwork.errors import InvalidInput
from tickwork.queue.base import Queue

__all__ = ["ACCEPTED", "queue_for_url"]

ACCEPTED = (
    "nats://HOST:PORT (NATS JetStream), redis://HOST:PORT/DB or rediss://... (Redis Streams), "
    "memory:// (in-process), or table / empty (the store's table queue)"
)


def queue_for_url(url: str, **options: Any) -> Queue:
    """Build (not open) the queue a URL names, with backend `options` as keyword arguments."""
    url = url.strip()
    scheme = url.partition("://")[0].lower() if "://" in url else url.lower()
    if scheme in ("", "table"):
        raise NotImplementedError("table queue lives with the store")
    factory: Callable[..., Queue]
    if scheme == "nats":
        from tickwork.queue.nats import NatsQueue

        factory = NatsQueue
        args: tuple[Any, ...] = (url,)
    elif scheme in ("redis", "rediss"):
        from tickwork.queue.redis import RedisQueue

        factory = RedisQueue
        args = (url,)
    elif scheme == "memory":
        from tickwork.queue.memory import MemoryQueue

        factory = MemoryQueue
        args = ()
    else:
        raise InvalidInput("queue_url", f"unsupported queue URL {url!r}; use {ACCEPTED}")
    _check_options(factory, options, skip=len(args))
    try:
        return factory(*args, **options)
    except ValueError as exc:
        raise InvalidInput("queue_options", f"{exc} (queue URL {url!r})") from exc


def _check_options(factory: Callable[..., Queue], options: dict[str, Any], *, skip: int) -> None:
    params = list(inspect.signature(factory).parameters)[skip:]
    unknown = sorted(set(options) - set(params))
    if unknown:
        name = getattr(factory, "__name__", "the queue")
        raise InvalidInput(
            f"queue_options.{unknown[0]}",
            f"{name} takes no option {', '.join(unknown)}; it accepts {', '.join(params)}",
        )
