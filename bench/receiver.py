"""A no-op webhook receiver, run as its own process so the bench driver does not compete.

    python -m bench.receiver --out FILE

Listens on 127.0.0.1 (a free port), prints `ready <port>` when it accepts connections, answers
every request 200 at once, and remembers (arrival time, `tickwork-scheduled-for` header, key)
per request; the key is the `webhook-id` header (the occurrence's key; `idempotency-key` carries
the same). `GET /__count` answers the number of requests remembered so far (and is not one of
them). On SIGTERM or SIGINT it writes them to FILE as JSON and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from pathlib import Path

from aiohttp import web

COUNT_PATH = "/__count"
Arrival = tuple[float, str, str]  # (epoch seconds, scheduled-for header, idempotency key)


def make_app(arrivals: list[Arrival]) -> web.Application:
    async def hook(request: web.Request) -> web.Response:
        if request.path == COUNT_PATH:
            return web.Response(text=str(len(arrivals)))
        arrivals.append(
            (
                time.time(),
                request.headers.get("tickwork-scheduled-for", ""),
                request.headers.get("webhook-id") or request.headers.get("idempotency-key", ""),
            )
        )
        await request.read()
        return web.Response(status=200)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hook)
    return app


async def serve(out: Path) -> None:
    arrivals: list[Arrival] = []
    runner = web.AppRunner(make_app(arrivals), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=2048)
    await site.start()
    port = runner.addresses[0][1]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"ready {port}", flush=True)
    await stop.wait()
    await runner.cleanup()
    _save(out, arrivals)


def _save(out: Path, arrivals: list[Arrival]) -> None:
    out.write_text(json.dumps(arrivals), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.out))
    else:
        uvloop.run(serve(args.out))


if __name__ == "__main__":
    main()
