"""The floor under the aligned webhook case: a bare client sends a herd of POSTs at one instant.

    uv run python -m bench.http_floor [--requests 1000] [--connections 32] [--rounds 5]

The lateness benchmark's aligned case has 1,000 webhooks due at the top of each second, all
sent by one tickwork process. How late the last one can start depends on how fast one Python
process on this machine can send 1,000 requests at all. This measures that floor.

The client is a bare asyncio protocol on uvloop. It keeps `--connections` keep-alive
connections open to the benchmark's receiver (`bench.receiver`, its own process, as in the
lateness case); 32 is tickwork's default cap per origin. It writes one prepared request per
fire and reads each answer only up to the end of its headers. Each round's requests are all
due at one instant, and a request's lateness is the moment it is written minus that instant.
There is no signing, no headers beyond one key, no timeout and no bookkeeping: everything
tickwork does per webhook costs against this (ADR 0027).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from bench import procs
from bench.stats import summary

REQUEST = (
    b"POST /hook HTTP/1.1\r\nhost: 127.0.0.1\r\nidempotency-key: floor\r\ncontent-length: 0\r\n\r\n"
)
LEAD_S = 0.2  # the instant comes this long after the round starts, like the look-ahead


class _Lane(asyncio.Protocol):
    """One keep-alive connection with one request in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.answered: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        # The receiver answers with a bodiless 200: the end of its headers ends the answer.
        if b"\r\n\r\n" in data and self.answered is not None and not self.answered.done():
            self.answered.set_result(None)

    async def send(self) -> None:
        assert self.transport is not None
        self.answered = asyncio.get_running_loop().create_future()
        self.transport.write(REQUEST)
        await self.answered


async def _round(lanes: list[_Lane], requests: int) -> list[float]:
    """Send `requests` POSTs due at one instant over `lanes`; each one's lateness in ms."""
    instant = time.time() + LEAD_S
    await asyncio.sleep(instant - time.time())
    left = requests
    late_ms: list[float] = []

    async def drive(lane: _Lane) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            late_ms.append((time.time() - instant) * 1000)
            await lane.send()

    await asyncio.gather(*(drive(lane) for lane in lanes))
    return late_ms


async def measure(requests: int, connections: int, rounds: int) -> list[dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="tw-floor-") as tmp:
        receiver, line = await procs.start(
            "receiver",
            [sys.executable, "-m", "bench.receiver", "--out", str(Path(tmp) / "arrivals.json")],
            ready="ready",
            log_path=Path(tmp) / "receiver.log",
        )
        try:
            port = int(line.split()[-1])
            loop = asyncio.get_running_loop()
            lanes: list[_Lane] = []
            for _ in range(connections):
                _transport, lane = await loop.create_connection(_Lane, "127.0.0.1", port)
                lanes.append(lane)
            results = [summary(await _round(lanes, requests)) for _ in range(rounds)]
            for lane in lanes:
                assert lane.transport is not None
                lane.transport.close()
            return results
        finally:
            await receiver.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results = uvloop.run(measure(args.requests, args.connections, args.rounds))
    for n, result in enumerate(results):
        print(
            f"round {n}: {args.requests} requests over {args.connections} connections,"
            f" lateness p50 {result['p50']} p99 {result['p99']} max {result['max']} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
