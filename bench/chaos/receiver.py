"""The chaos run's webhook receiver: an independent witness of what tickwork delivered.

    python -m bench.chaos.receiver --out FILE --secret whsec_... [--port N]

Prints `ready <port>` once it accepts connections. Every POST is checked against the Standard
Webhooks signature (written here from the specification, not with tickwork's helper, so a bug
there cannot hide itself) and appended to FILE as one JSON line:

    {"k": idempotency-key (the occurrence; webhook-id when absent), "t": arrival epoch µs,
     "f": tickwork-fence, "a": tickwork-attempt, "s": tickwork-scheduled-for,
     "ok": signature valid}

The answer (200) is sent only after the line is on disk: lines are group-committed, one
fsync per batch, so a 200 that tickwork records as a success is never missing from the file.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import hmac
import json
import os
import signal
import time

from aiohttp import web


def check_signature(secret: str, headers: dict[str, str], body: bytes) -> bool:
    """True when one of the `v1,<base64>` signatures is HMAC-SHA256 over `id.timestamp.body`."""
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        msg_id = headers["webhook-id"]
        stamp = headers["webhook-timestamp"]
        offered = headers["webhook-signature"].split()
    except (KeyError, ValueError):
        return False
    content = f"{msg_id}.{stamp}.".encode() + body
    digest = base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()
    return any(
        version == "v1" and hmac.compare_digest(sig, digest)
        for version, _, sig in (item.partition(",") for item in offered)
    )


class GroupCommitLog:
    """Append lines to a file; `append` returns once its line has been fsync'ed."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._flush_forever())

    async def append(self, line: bytes) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((line, done))
        self._wake.set()
        await done

    async def _flush_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._pending = self._pending, []
            if not batch:
                continue
            data = b"".join(line for line, _ in batch)
            try:
                await asyncio.to_thread(self._write, data)
            except OSError as exc:
                for _, done in batch:
                    done.set_exception(exc)
            else:
                for _, done in batch:
                    done.set_result(None)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        os.fsync(self._fd)


def make_app(log: GroupCommitLog, secret: str) -> web.Application:
    async def hook(request: web.Request) -> web.Response:
        arrival_us = time.time_ns() // 1000
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        record = {
            # Not webhook-id: that one also carries the lease's fence (`<key>@f<fence>`).
            "k": headers.get("idempotency-key") or headers.get("webhook-id", ""),
            "t": arrival_us,
            "f": int(headers.get("tickwork-fence", "0") or 0),
            "a": int(headers.get("tickwork-attempt", "0") or 0),
            "s": headers.get("tickwork-scheduled-for", ""),
            "ok": check_signature(secret, headers, body),
        }
        try:
            await log.append(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        except OSError:
            return web.Response(status=503)  # not recorded: let tickwork retry
        return web.Response(status=200)

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", hook)
    return app


async def serve(out: str, secret: str, port: int) -> None:
    log = GroupCommitLog(out)
    runner = web.AppRunner(make_app(log, secret), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"ready {bound}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    asyncio.run(serve(args.out, args.secret, args.port))


if __name__ == "__main__":
    main()
