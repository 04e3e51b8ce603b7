"""The benchmark's no-op webhook receiver: what it records is what the benchmarks report."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import pytest
import uvloop
from bench.receiver import COUNT_PATH, Arrival, listen


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
def test_records_each_request_on_a_kept_alive_connection_and_counts_them(
    run: Callable[[Coroutine[Any, Any, None]], None],
) -> None:
    run(_records_each_request())


async def _records_each_request() -> None:
    arrivals: list[Arrival] = []
    server, port = await listen(arrivals)
    base = f"http://127.0.0.1:{port}"
    before = time.time()
    try:
        connector = aiohttp.TCPConnector(limit=1)  # one connection: requests must reuse it
        async with aiohttp.ClientSession(connector=connector) as http:
            for n in range(3):
                headers = {"webhook-id": f"job:{n}", "tickwork-scheduled-for": f"t{n}"}
                async with http.post(f"{base}/hook", data=b'{"x": 1}' * 100,
                                     headers=headers) as response:  # fmt: skip
                    assert response.status == 200
                    assert await response.read() == b""
            async with http.get(f"{base}/other", headers={"idempotency-key": "k"}) as response:
                assert response.status == 200
            async with http.get(f"{base}{COUNT_PATH}") as response:
                assert await response.text() == "4"
        assert [(a[1], a[2]) for a in arrivals] == [
            ("t0", "job:0"), ("t1", "job:1"), ("t2", "job:2"), ("", "k"),
        ]  # fmt: skip
        assert all(before <= a[0] <= time.time() for a in arrivals)
    finally:
        server.close()


async def test_answers_garbage_with_400_and_closes() -> None:
    server, port = await listen([])
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        reply = await asyncio.wait_for(reader.read(), 5)  # read() returns at EOF: it closed
        assert reply.startswith(b"HTTP/1.1 400")
        writer.close()
    finally:
        server.close()
