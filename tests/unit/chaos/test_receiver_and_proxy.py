"""The chaos receiver's own signature check, and the partitionable TCP proxy."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
from aiohttp import web
from bench.chaos.proxy import PartitionableProxy
from bench.chaos.receiver import GroupCommitLog, check_signature, make_app

from tickwork.webhooks import fenced_id, generate_secret, signature_headers


def test_receiver_accepts_what_tickwork_signs_and_nothing_else() -> None:
    secret, other = generate_secret(), generate_secret()
    body = b'{"n": 1}'
    headers = signature_headers(msg_id="job:1000", timestamp=1_700_000_000, body=body,
                                secrets=[secret])  # fmt: skip
    assert check_signature(secret, headers, body)
    assert not check_signature(other, headers, body)
    assert not check_signature(secret, headers, body + b" ")
    assert not check_signature(secret, {**headers, "webhook-id": "job:1001"}, body)
    assert not check_signature(secret, {}, body)
    rotated = signature_headers(msg_id="job:1000", timestamp=1_700_000_000, body=body,
                                secrets=[other, secret])  # fmt: skip
    assert check_signature(secret, rotated, body)


async def test_receiver_records_the_occurrence_not_the_fenced_id(tmp_path: Path) -> None:
    # Two leases of one occurrence must count as one occurrence delivered twice.
    secret, body, out = generate_secret(), b'{"n": 1}', tmp_path / "deliveries.jsonl"
    runner = web.AppRunner(make_app(GroupCommitLog(str(out)), secret), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        async with aiohttp.ClientSession() as http:
            for fence in (4, 5):
                msg_id = fenced_id("job:1000", fence)
                headers = {
                    **signature_headers(msg_id=msg_id, timestamp=1_700_000_000, body=body,
                                        secrets=[secret]),
                    "idempotency-key": "job:1000",
                    "tickwork-fence": str(fence),
                }  # fmt: skip
                url = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
                async with http.post(url, data=body, headers=headers) as response:
                    assert response.status == 200
    finally:
        await runner.cleanup()
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["k"], r["f"], r["ok"]) for r in records] == [
        ("job:1000", 4, True),
        ("job:1000", 5, True),
    ]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(1024):
        writer.write(data)
        await writer.drain()
    writer.close()


async def test_proxy_holds_bytes_during_a_cut_and_delivers_them_after() -> None:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    proxy = PartitionableProxy("127.0.0.1", server.sockets[0].getsockname()[1])
    port = await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"before")
        assert await reader.readexactly(6) == b"before"
        proxy.cut()
        writer.write(b"during")
        read = asyncio.ensure_future(reader.readexactly(6))
        done, _ = await asyncio.wait([read], timeout=0.3)
        assert not done, "bytes crossed a cut link"
        proxy.heal()
        assert await asyncio.wait_for(read, 5) == b"during"
        writer.close()
    finally:
        await proxy.close()
        server.close()
