"""CPU per webhook request: tickwork's HTTP/1.1 client against aiohttp's, in the same run.

    uv run python -m bench.http_client [--requests 20000] [--in-flight 64] [--reps 2]

Starts the no-op receiver (`bench/receiver.py`) in its own process and sends POSTs with
tickwork's webhook headers and a small JSON body from this process, on uvloop, alternating the
two clients rep by rep. Reported: this process's CPU time per request (user + system, so the
socket syscalls count) and requests per second. The evidence behind ADR 0010; prints only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import uvloop

from tickwork.worker.executors.http1 import Http1Client
from tickwork.worker.executors.ssrf import AddressPolicy

HEADERS = {
    "user-agent": "tickwork/0.1",
    "idempotency-key": "0192f3c1:1772366400000",
    "webhook-id": "0192f3c1:1772366400000@f41",
    "tickwork-job-id": "0192f3c1",
    "tickwork-scheduled-for": "2026-03-01T12:00:00.000Z",
    "tickwork-attempt": "1",
    "tickwork-fence": "41",
    "content-type": "application/json",
}
BODY = b'{"report": "daily", "n": 1}'
WARMUP = 500

Send = Callable[[], Awaitable[int]]


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(send: Send, requests: int, in_flight: int) -> tuple[float, float]:
    """(CPU µs per request, requests per second) over `requests` after a warm-up."""
    slots = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with slots:
            status = await send()
            if status != 200:
                raise RuntimeError(f"receiver answered {status}")

    await asyncio.gather(*(one() for _ in range(WARMUP)))
    cpu, wall = _cpu_s(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(requests)))
    cpu, wall = _cpu_s() - cpu, time.perf_counter() - wall
    return 1e6 * cpu / requests, requests / wall


async def _tickwork(url: str, requests: int, in_flight: int) -> tuple[float, float]:
    client = Http1Client(AddressPolicy(allow=["127.0.0.1/32"]))

    async def send() -> int:
        response = await client.request("POST", url, headers=HEADERS, body=BODY, timeout_s=10)
        return response.status

    try:
        return await _measure(send, requests, in_flight)
    finally:
        await client.close()


async def _aiohttp(url: str, requests: int, in_flight: int) -> tuple[float, float]:
    # As the worker used it before ADR 0010: one pooled session, no decompression, a total
    # timeout per request, no redirects.
    connector = aiohttp.TCPConnector(limit=256)
    async with aiohttp.ClientSession(
        connector=connector, auto_decompress=False, trust_env=False
    ) as session:

        async def send() -> int:
            async with session.request(
                "POST", url, headers=HEADERS, data=BODY, allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=10),
            ) as response:  # fmt: skip
                await response.read()
                return response.status

        return await _measure(send, requests, in_flight)


async def _run(args: argparse.Namespace, url: str) -> None:
    clients = {"tickwork Http1Client": _tickwork, "aiohttp ClientSession": _aiohttp}
    for rep in range(1, args.reps + 1):
        for name, run in clients.items():
            cpu_us, rate = await run(url, args.requests, args.in_flight)
            print(f"rep {rep} {name:>22}: {cpu_us:6.1f} µs CPU/request, {rate:8,.0f} requests/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tw-http-") as tmp:
        receiver = subprocess.Popen(
            [sys.executable, "-m", "bench.receiver", "--out", str(Path(tmp) / "arrivals.json")],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert receiver.stdout is not None
            port = int(receiver.stdout.readline().split()[1])  # "ready <port>"
            uvloop.run(_run(args, f"http://127.0.0.1:{port}/hook"))
        finally:
            receiver.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                receiver.wait(timeout=10)


if __name__ == "__main__":
    main()
