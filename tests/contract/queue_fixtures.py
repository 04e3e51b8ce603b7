"""Fixtures that build every `Queue` backend, so one suite runs against all of them.

nats and redis run on the session's THROWAWAY servers (tests/conftest.py), never on the
machine's shared 4222/6379. Every test gets its own stream/subject/consumer (NATS) or
stream/group (Redis) names, so tests do not see each other's messages.

`queues` (a `QueueKit`) builds queue instances that share the test's stream: each is like a
separate worker process (its own connection; its own consumer name on Redis). The memory
backend has no other process to share with: every instance is the same object.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickwork.queue.base import Envelope, Queue
from tickwork.queue.memory import MemoryQueue
from tickwork.queue.nats import NatsQueue
from tickwork.queue.redis import RedisQueue

QUEUE_BACKENDS = ["memory", "nats", "redis"]

BASE_TIME = datetime(2030, 1, 1, tzinfo=UTC)


def envelope(n: int, *, attempt: int = 1, fence_token: int = 1) -> Envelope:
    """A distinct occurrence per `n`; the same `n` and attempt give the same msg_id."""
    when = BASE_TIME + timedelta(minutes=n)
    return Envelope(
        run_id=n,
        job_id=f"job-{n % 7}",
        key=f"job-{n % 7}:{when.isoformat()}",
        scheduled_for=when,
        fence_token=fence_token,
        attempt=attempt,
    )


@dataclass
class QueueKit:
    """Builds and opens queue instances on one test's stream; closes them at teardown."""

    backend: str
    url: str
    names: dict[str, Any]
    opened: list[Queue] = field(default_factory=list)
    _memory: MemoryQueue | None = None

    def build(self, *, visibility_s: float = 1.0, **options: Any) -> Queue:
        if self.backend == "memory":
            options.pop("bundle", None)  # memory carries envelopes, not messages: no bundles
            if self._memory is None:
                self._memory = MemoryQueue(visibility_s, **options)
            return self._memory
        # One envelope per message unless a test asks for bundles: the contract's tests
        # count messages (test_queue_bundles.py covers bundles).
        options.setdefault("bundle", 1)
        if self.backend == "nats":
            options.setdefault("reconnect_time_wait_s", 0.2)
            return NatsQueue(self.url, visibility_s=visibility_s, **self.names, **options)
        return RedisQueue(self.url, visibility_s=visibility_s, **self.names, **options)

    async def open(self, *, visibility_s: float = 1.0, **options: Any) -> Queue:
        queue = self.build(visibility_s=visibility_s, **options)
        if queue not in self.opened:
            await queue.open()
            self.opened.append(queue)
        return queue

    async def close_all(self) -> None:
        for queue in reversed(self.opened):
            await queue.close()
        self.opened.clear()


def unique_names(backend: str) -> dict[str, Any]:
    token = secrets.token_hex(4)
    if backend == "nats":
        return {
            "stream": f"TW_{token}",
            "subject": f"tw.{token}.fires",
            "durable": f"workers-{token}",
        }
    if backend == "redis":
        return {"stream": f"tw:{token}:fires", "group": f"workers-{token}"}
    return {}


def server_url(backend: str, request: pytest.FixtureRequest) -> str:
    if backend == "nats":
        return str(request.getfixturevalue("throwaway_nats").url)
    if backend == "redis":
        return str(request.getfixturevalue("throwaway_redis").url)
    return "memory://"


@pytest.fixture(params=QUEUE_BACKENDS, name="queue_backend")
def queue_backend_fixture(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(name="queues")
async def queues_fixture(
    queue_backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[QueueKit]:
    kit = QueueKit(
        backend=queue_backend,
        url=server_url(queue_backend, request),
        names=unique_names(queue_backend),
    )
    try:
        yield kit
    finally:
        await kit.close_all()
