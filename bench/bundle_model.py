"""The transport cost of a fire on NATS by bundle size (ADR 0037), without a store.

    uv run python -m bench.bundle_model [N] [ROUNDS] [SIZES]
    uv run python -m bench.bundle_model 50000 3 1,16,64

On a NATS JetStream path every message has a fixed cost: the scheduler publishes it and reads
its PubAck, the worker pulls it, reads its delivery count and acks it, nats-server stores and
deletes it. For each bundle size B (`NatsQueue(bundle=B)`, B = 1 being one message per fire),
on a private nats-server (a throwaway one, so its CPU is its own): N envelopes are published
in batches of 1,000 (a scheduler's claim batch), then fetched 1,000 at a time and acked, as the
worker's consumer does. Printed per fire: this process's CPU (the scheduler's and the worker's
queue work, both here) and nats-server's, and the fires per second through the queue. The
sizes alternate within each round, so the machine's noise spreads over all of them.

A model of the transport alone (no store, no executor, no lease), for a decision, not a figure
to compare across days.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

from bench.meter import process_cpu_s
from tickwork.domain.runs import Envelope
from tickwork.queue.nats import NatsQueue
from tickwork.testing import ThrowawayNats

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SIZES = [int(s) for s in sys.argv[3].split(",")] if len(sys.argv) > 3 else [1, 16, 64]
BATCH = 1000  # fires per scheduler publish and per worker fetch
JOB_ID = "0b6f3c1e-3a55-4d1e-9c1f-6f0e9a3a1b2c"  # as long as tickwork's job ids (UUIDs)
AT = datetime(2030, 1, 1, tzinfo=UTC)


def envelope(n: int) -> Envelope:
    at = AT + timedelta(milliseconds=n)
    key = f"{JOB_ID}:{round(at.timestamp() * 1000)}"
    return Envelope(run_id=n, job_id=JOB_ID, key=key, scheduled_for=at, fence_token=1, attempt=1)


async def one_size(url: str, size: int, server_pid: int, round_no: int) -> dict[str, float]:
    name = f"{size}_{round_no}"
    queue = NatsQueue(
        url, stream=f"MODEL_{name}", subject=f"model.{name}", durable=f"model-{name}",
        visibility_s=30, bundle=size,
    )  # fmt: skip
    await queue.open()
    sent = [envelope(n) for n in range(N)]
    try:
        cpu0, srv0, t0 = time.process_time(), process_cpu_s(server_pid), time.monotonic()
        for start in range(0, N, BATCH):
            await queue.publish(sent[start : start + BATCH])
        cpu1 = time.process_time()
        got = 0
        while got < N:
            received = await queue.fetch(BATCH, timeout_s=2.0)
            if not received:
                raise RuntimeError(f"only {got} of {N} envelopes came back")
            await queue.ack(received)
            got += len(received)
        cpu2, srv2, t2 = time.process_time(), process_cpu_s(server_pid), time.monotonic()
    finally:
        await queue.close()
    return {
        "publish_us": (cpu1 - cpu0) / N * 1e6,
        "consume_us": (cpu2 - cpu1) / N * 1e6,
        "server_us": (srv2 - srv0) / N * 1e6,
        "fires_per_s": N / (t2 - t0),
    }


async def main() -> None:
    server = ThrowawayNats()
    server.start()
    try:
        pid: int = server._process.pid  # type: ignore[union-attr]  # the bench reads its CPU
        results: dict[int, list[dict[str, float]]] = {size: [] for size in SIZES}
        for round_no in range(ROUNDS):
            for size in SIZES:  # alternating sizes within each round: the noise spreads evenly
                results[size].append(await one_size(server.url, size, pid, round_no))
        print(f"{N} fires, {ROUNDS} rounds, medians; CPU in µs per fire")
        print(
            "| fires per message | publish (scheduler) | pull, read, ack (worker) "
            "| nats-server | all | fires/s through the queue |"
        )
        print("|--:|--:|--:|--:|--:|--:|")
        for size, rows in results.items():
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            total = med["publish_us"] + med["consume_us"] + med["server_us"]
            print(
                f"| {size} | {med['publish_us']:.1f} | {med['consume_us']:.1f} "
                f"| {med['server_us']:.1f} | {total:.1f} | {med['fires_per_s']:,.0f} |"
            )
    finally:
        server.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
