"""A NATS worker cut off by a network partition must come back when the partition heals.

Found by the chaos harness (docs/reliability.md): during a cut, an ack's flush timed out. nats-py
cancels the flush's PONG future but keeps it queued, and the late PONG after the heal raised
InvalidStateError in the client's read loop. The loop ended without a reconnect, leaving a
zombie: "connected", sending pull requests, reading nothing. The server kept handing it
messages that only the store's backstop recovered. The partition here is a real TCP proxy
that holds bytes (bench/chaos/proxy.py), in front of a real nats-server.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from bench.chaos.proxy import PartitionableProxy

from tickwork.queue.base import Envelope
from tickwork.queue.errors import QueueError
from tickwork.queue.nats import NatsQueue
from tickwork.testing import ThrowawayNats


def envelope(n: int) -> Envelope:
    at = datetime(2026, 12, 2, 12, n, tzinfo=UTC)
    return Envelope(
        run_id=n, job_id="job", key=f"job:{n}", scheduled_for=at, fence_token=1, attempt=1
    )


async def fetch_one(queue: NatsQueue, timeout_s: float) -> list[int]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        got = await queue.fetch(10, timeout_s=1.0)
        if got:
            await queue.ack(got)
            return [m.envelope.run_id for m in got]
    return []


async def test_a_worker_reads_again_after_a_partition_heals(
    restartable_nats: ThrowawayNats,
) -> None:
    proxy = PartitionableProxy("127.0.0.1", restartable_nats.port)
    port = await proxy.start()
    name = f"p{uuid.uuid4().hex[:8]}"
    queue = NatsQueue(
        f"nats://127.0.0.1:{port}", stream=name, subject=f"{name}.runs", durable=name,
        api_timeout_s=1, visibility_s=30,
    )  # fmt: skip
    await queue.open()
    try:
        await queue.publish([envelope(1)])
        [first] = await queue.fetch(1, timeout_s=5)

        proxy.cut()
        with pytest.raises(QueueError):
            await queue.ack([first])  # its flush cannot be answered during the cut
        proxy.heal()  # the held PING's PONG now arrives, late

        await queue.publish([envelope(2)])
        assert 2 in await fetch_one(queue, timeout_s=10), (
            "the connection reads nothing after the heal"
        )
    finally:
        await queue.close()
        await proxy.close()


async def test_a_client_whose_read_loop_died_is_revived(restartable_nats: ThrowawayNats) -> None:
    # Any unexpected exception ends nats-py's read loop the same way (nats.py PR #914, open):
    # simulate one by ending the loop; the next call must reconnect rather than wait forever.
    name = f"z{uuid.uuid4().hex[:8]}"
    queue = NatsQueue(
        restartable_nats.url, stream=name, subject=f"{name}.runs", durable=name, api_timeout_s=2
    )
    await queue.open()
    try:
        nc = queue._nc
        assert nc is not None
        nc._reading_task.cancel()  # type: ignore[union-attr]
        await asyncio.sleep(0)
        await queue.publish([envelope(3)])
        assert 3 in await fetch_one(queue, timeout_s=10)
    finally:
        await queue.close()
