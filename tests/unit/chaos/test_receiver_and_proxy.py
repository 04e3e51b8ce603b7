"""The chaos receiver's own signature check, and the partitionable TCP proxy."""

from __future__ import annotations

import asyncio

from bench.chaos.proxy import PartitionableProxy
from bench.chaos.receiver import check_signature

from tickwork.webhooks import generate_secret, signature_headers


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
