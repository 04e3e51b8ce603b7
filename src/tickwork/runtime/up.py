"""`tickwork up`: API + scheduler + executor in one process (stage 1)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from datetime import timedelta

import uvicorn
import uvloop

from tickwork.clock import Clock, SystemClock
from tickwork.errors import InvalidInput
from tickwork.maintenance.pruner import Pruner, PrunerConfig
from tickwork.scheduler.service import SchedulerConfig, SchedulerService
from tickwork.settings import Settings
from tickwork.store.base import ScheduleStore
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.webhook import WebhookRunner

from .factory import store_for_url

log = logging.getLogger("tickwork.up")


def default_node_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def run_up(settings: Settings) -> None:
    """Run until SIGINT/SIGTERM (the CLI entry point)."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # Migration chatter is not news at `info`; failures still surface as errors.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # uvloop (installed with uvicorn[standard]) roughly halves the event loop's cost per fire.
    uvloop.run(serve(settings))


async def serve(settings: Settings, *, clock: Clock | None = None) -> None:
    clock = clock or SystemClock()
    store = store_for_url(settings.database_url)
    sock = bind_socket(settings.host, settings.port)  # fail fast, before touching the store
    try:
        await store.open()
        try:
            await _serve_with(store, clock, settings, sock)
        finally:
            await store.close()
    finally:
        sock.close()


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and listen, so the address printed is the real one (port 0 picks a free port) and
    connections queue in the backlog from the moment it is printed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise InvalidInput(
                "port", f"{host}:{port} is already in use; pick another port with --port"
            ) from None
        raise InvalidInput("host", f"cannot listen on {host}:{port} ({exc.strerror})") from None
    return sock


async def _serve_with(
    store: ScheduleStore, clock: Clock, settings: Settings, sock: socket.socket
) -> None:
    from tickwork.api.app import create_app

    node_id = settings.node_id or default_node_id()
    stop = asyncio.Event()
    runner = WebhookRunner(
        policy=AddressPolicy(allow=settings.webhook_allow),
        secrets=settings.webhook_secrets,
        clock=clock,
        max_connections=settings.executor_concurrency,
    )
    async with runner:
        executor = Executor(
            store,
            clock,
            runner,
            ExecutorConfig(
                node_id=node_id,
                concurrency=settings.executor_concurrency,
                lease_ttl_ms=settings.lease_ttl_ms,
            ),
        )
        scheduler = SchedulerService(
            store,
            clock,
            SchedulerConfig(
                node_id=node_id,
                batch_size=settings.claim_batch,
                lookahead_ms=settings.lookahead_ms,
                max_idle_ms=settings.max_idle_ms,
                lease_ttl_ms=settings.lease_ttl_ms,
            ),
            dispatch=executor.submit,
        )
        app = create_app(store=store, clock=clock, settings=settings)
        server = _QuietServer(
            uvicorn.Config(
                app,
                host=settings.host,
                port=settings.port,
                log_level="warning",
                lifespan="off",
            )
        )
        pruner = Pruner(
            store,
            clock,
            PrunerConfig(retention=timedelta(days=settings.history_retention_days)),
        )
        workers = [
            asyncio.create_task(scheduler.run(stop), name="scheduler"),
            asyncio.create_task(executor.run(stop), name="executor"),
            asyncio.create_task(pruner.run(stop), name="pruner"),
        ]
        try:
            _announce(settings, sock)
            await server.serve(sockets=[sock])
        finally:
            stop.set()
            await asyncio.gather(*workers, return_exceptions=True)


class _QuietServer(uvicorn.Server):
    """A uvicorn server that leaves signals to us.

    uvicorn re-raises a captured SIGTERM once it has stopped serving, which would kill the
    process before the scheduler and executor drain; we stop it through `should_exit` instead.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._request_exit)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _request_exit(self) -> None:
        if self.should_exit:
            self.force_exit = True  # a second Ctrl-C stops without waiting for connections
        self.should_exit = True


def _announce(settings: Settings, sock: socket.socket) -> None:
    port = sock.getsockname()[1]
    print(
        f"tickwork listening on http://{settings.host}:{port} "
        f"(store: {_describe(settings.database_url)}; API docs at /docs)",
        flush=True,
    )


def _describe(url: str) -> str:
    return url.split("@")[-1] if url.startswith("postgres") else url
