"""Bundles (queue/bundles.py, ADR 0037): NATS and Redis carry up to `bundle` envelopes of one
publish in one message. What a worker sees is still one `Received` per envelope; the envelopes
of a bundle share its message, so they are acked, extended, given back and redelivered
together. On private throwaway servers, like the rest of the queue contract."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.contract.queue_fixtures import (  # noqa: F401  (fixtures are found by name)
    QueueKit,
    envelope,
    queue_backend_fixture,
    queues_fixture,
)
from tests.contract.test_queue_contract import (
    PATIENCE_S,
    VISIBILITY_S,
    depth_settles,
    fetch_until,
    ids,
    msg_ids,
)
from tickwork.queue.base import Queue

pytestmark = pytest.mark.parametrize("queue_backend", ["nats", "redis"])


async def bundled(queues: QueueKit, size: int = 4) -> Queue:
    return await queues.open(visibility_s=VISIBILITY_S, bundle=size)


async def test_a_publish_goes_out_in_bundles_and_every_envelope_arrives_intact(
    queues: QueueKit,
) -> None:
    queue = await bundled(queues)
    sent = [envelope(n) for n in range(10)]
    await queue.publish(sent)

    assert await depth_settles(queue, 3) == 3  # messages of 4, 4 and 2
    got = await fetch_until(queue, 10)
    assert sorted((m.envelope for m in got), key=lambda e: e.run_id) == sent
    assert len({id(m.handle) for m in got}) == 3  # one handle per message
    assert {m.deliveries for m in got} == {1}
    await queue.ack(got)
    assert await depth_settles(queue, 0) == 0
    assert await queue.fetch(20, timeout_s=VISIBILITY_S + 0.5) == []


async def test_acking_one_envelope_of_a_bundle_acks_the_bundle(queues: QueueKit) -> None:
    queue = await bundled(queues)
    await queue.publish([envelope(n) for n in range(3)])
    got = await fetch_until(queue, 3)

    await queue.ack(got[:1])

    assert await depth_settles(queue, 0) == 0
    assert await queue.fetch(20, timeout_s=VISIBILITY_S + 0.5) == []


async def test_an_unacked_bundle_comes_back_whole(queues: QueueKit) -> None:
    queue = await bundled(queues)
    sent = [envelope(n) for n in range(3)]
    await queue.publish(sent)
    first = await fetch_until(queue, 3)
    assert ids(first) == msg_ids(sent)

    again = await fetch_until(queue, 3, within_s=PATIENCE_S)  # past the visibility timeout

    assert ids(again) == msg_ids(sent)
    await queue.ack(again)


async def test_a_bundle_given_back_envelope_by_envelope_returns_once(queues: QueueKit) -> None:
    # The worker's consumer gives back what it fetched ahead one Received at a time.
    queue = await bundled(queues)
    sent = [envelope(n) for n in range(3)]
    await queue.publish(sent)
    got = await fetch_until(queue, 3)

    for message in got:
        await queue.retry_later(message, delay_s=0)

    back = await fetch_until(queue, 3)
    assert ids(back) == msg_ids(sent)
    await queue.ack(back)
    assert await depth_settles(queue, 0) == 0
    assert await queue.fetch(20, timeout_s=0.5) == []


async def test_fetch_takes_the_whole_bundles_that_fit_and_at_least_one(queues: QueueKit) -> None:
    queue = await bundled(queues)
    await queue.publish([envelope(n) for n in range(12)])  # three bundles of 4

    fitting = await queue.fetch(9, timeout_s=PATIENCE_S)  # room for two bundles, not three
    one = await queue.fetch(1, timeout_s=PATIENCE_S)  # room for one envelope: one bundle

    assert [len(fitting), len(one)] == [8, 4]
    await queue.ack([*fitting, *one])


async def test_an_envelope_whose_key_holds_a_newline_travels_alone(queues: QueueKit) -> None:
    queue = await bundled(queues)
    odd = replace(envelope(1), key="job-1:line one\nline two")
    sent = [envelope(0), odd, envelope(2)]
    await queue.publish(sent)

    assert await depth_settles(queue, 3) == 3
    got = await fetch_until(queue, 3)
    assert sorted((m.envelope for m in got), key=lambda e: e.run_id) == sent
    await queue.ack(got)
