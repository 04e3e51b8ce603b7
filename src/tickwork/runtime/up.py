"""Process runtime: `tickwork up` runs every role in one process; `tickwork api`, `tickwork
scheduler` and `tickwork worker` run one role each, sharing one store."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import importlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from datetime import timedelta
from enum import StrEnum
from typing import Any

import uvicorn
import uvloop
from starlette.types import ASGIApp

from tickwork.clock import Clock, SystemClock
from tickwork.domain.partitions import NodeIdentity
from tickwork.domain.runs import Envelope
from tickwork.errors import InvalidInput
from tickwork.maintenance.heartbeat import HeartbeatConfig, NodeHeartbeat
from tickwork.maintenance.pruner import Pruner, PrunerConfig
from tickwork.maintenance.queue_depth import DepthGauge, DepthGaugeConfig, depth_source
from tickwork.queue.base import Queue
from tickwork.scheduler.backfill_lane import BackfillLane, LaneConfig
from tickwork.scheduler.partitions import KeeperConfig, PartitionKeeper
from tickwork.scheduler.service import Dispatch, Publish, SchedulerConfig, SchedulerService
from tickwork.services.keys import KeyService
from tickwork.services.tenants import TenantService
from tickwork.settings import Settings, data_dir, webhook_proxies
from tickwork.store.base import ScheduleStore
from tickwork.tasks import DEFAULT_REGISTRY, import_task_modules
from tickwork.timing.rate_limit import Limit
from tickwork.version import tickwork_version
from tickwork.worker.alerts import AlertSender
from tickwork.worker.base import Alerter, Runner
from tickwork.worker.consumer import QueueConsumer
from tickwork.worker.executor import Executor, ExecutorConfig
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.target import TargetRunner
from tickwork.worker.executors.task import TaskRunner
from tickwork.worker.executors.webhook import WebhookRunner
from tickwork.worker.leaser import LeaserConfig, StoreLeaser
from tickwork.worker.tenant_lists import TenantLists

from .access import bootstrap_admin_key, is_loopback_host, refuse_open_network_api
from .factory import store_for_url
from .secret_keys import check_keys_open, keyring_for

log = logging.getLogger("tickwork.up")


def default_node_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Role(StrEnum):
    API = "api"
    SCHEDULER = "scheduler"
    WORKER = "worker"


ALL_ROLES = frozenset(Role)


def run_up(settings: Settings, roles: frozenset[Role] = ALL_ROLES) -> None:
    """Run the given roles in this process until SIGINT/SIGTERM (the CLI entry point)."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # Migration chatter is not news at `info`; failures still surface as errors.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # uvloop (installed with uvicorn[standard]) roughly halves the event loop's cost per fire.
    if Role.WORKER in roles:
        import_task_modules(settings.imports)  # before serving: a bad module stops us here
    _tune_collector(roles)
    uvloop.run(serve(settings, roles))


def _tune_collector(roles: frozenset[Role]) -> None:
    """Fewer, cheaper garbage collections for a long-running process (its own, not a test's).

    Every fire allocates a few dozen short-lived objects, so with the default threshold (700)
    the collector ran ~20 times per 1,000 fires and, every so often, walked every module and
    function loaded at start-up. Measured in a 20,000-fire task burst: ~0.45 s of CPU in each
    of the scheduler and the worker, ~0.05 s after this. What start-up loaded is frozen (never
    scanned again) and the youngest generation is collected every 50,000 allocations."""
    _import_http_app(roles)  # loaded by every role; load it before the freeze

    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


async def serve(
    settings: Settings, roles: frozenset[Role] = ALL_ROLES, *, clock: Clock | None = None
) -> None:
    clock = clock or SystemClock()
    node_id = settings.node_id or default_node_id()
    store = store_for_url(settings.database_url, keyring=keyring_for(settings), node_id=node_id)
    sock = bind_socket(settings.host, settings.port)  # fail fast, before touching the store
    try:
        await store.open()
        try:
            await check_keys_open(store)
            await _serve_with(store, clock, settings, sock, roles, node_id)
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
    store: ScheduleStore,
    clock: Clock,
    settings: Settings,
    sock: socket.socket,
    roles: frozenset[Role],
    node_id: str,
) -> None:
    from tickwork.api.http_server import server_options

    identity = NodeIdentity(
        host=socket.gethostname(),
        pid=os.getpid(),
        version=tickwork_version(),
        started_at=clock.now(),
    )
    stop = asyncio.Event()
    keeper = None
    if Role.SCHEDULER in roles:
        keeper = _keeper(store, clock, settings, node_id, identity)
        await keeper.start()  # hold a share before serving; on SQLite, refuse a second one
    async with contextlib.AsyncExitStack() as stack:
        # Made first: a malformed proxy setting stops the start before any service exists.
        webhook_runner = _webhook_runner(settings, clock, store) if Role.WORKER in roles else None
        services: list[Coroutine[Any, Any, None]] = []
        executor = None
        queue = await _open_queue(stack, settings, roles)
        gauge = DepthGauge(
            depth_source(store, queue, clock),
            DepthGaugeConfig(interval_ms=settings.metrics_interval_ms),
        )
        if roles & {Role.SCHEDULER, Role.WORKER}:
            services.append(gauge.run(stop))
        if webhook_runner is not None:
            webhooks = await stack.enter_async_context(webhook_runner)
            tasks = TaskRunner(DEFAULT_REGISTRY, store, clock, lease_ttl_ms=settings.lease_ttl_ms)
            runner = TargetRunner(webhooks, tasks)
            alerts = AlertSender(webhooks)  # same guarded session and signing as the jobs
            executor = _executor(store, clock, settings, node_id, runner, alerts)
            leaser = _leaser(store, clock, settings, node_id, executor, queue is not None)
            services += [executor.run(stop), leaser.run(stop)]
            if queue is not None:
                consumer = QueueConsumer(
                    store, queue, executor, clock, node_id=node_id,
                    lease_ttl_ms=settings.lease_ttl_ms,
                )  # fmt: skip
                services.append(consumer.run(stop))
            beat = NodeHeartbeat(
                store,
                identity,
                HeartbeatConfig(node_id=node_id, ttl_ms=settings.partition_lease_ttl_ms),
                _worker_figures(executor, gauge, settings.queue_url if queue else ""),
                clock=clock,
            )
            services.append(beat.run(stop))
        if Role.SCHEDULER in roles:
            # With a worker in this process, fires go to it directly; otherwise they are handed
            # off through the store to whichever worker process leases them (the table queue),
            # and, with an external queue, published to it too.
            dispatch = executor.submit if executor is not None else None
            publish = _publisher(queue) if queue is not None and dispatch is None else None
            assert keeper is not None
            scheduler = _scheduler(store, clock, settings, node_id, dispatch, publish, keeper)
            keeper.describe = scheduler.describe
            services += [keeper.run(stop), scheduler.run(stop)]
            # Backfills and catch-ups have a loop of their own: the tick loop never waits on them.
            lane = BackfillLane(store, clock, LaneConfig(rate_per_s=settings.backfill_rate))
            services.append(lane.run(stop))
            retention = timedelta(days=settings.history_retention_days)
            services.append(Pruner(store, clock, PrunerConfig(retention=retention)).run(stop))
        if Role.API in roles:
            await _prepare_keys(store, clock, settings, roles)
            await _sign_by_default(store, clock)
        app = _http_app(store, clock, settings, roles)
        server = _QuietServer(
            uvicorn.Config(
                app,
                host=settings.host,
                port=settings.port,
                log_level="warning",
                lifespan="off",
                **server_options(),
            )
        )
        running = [asyncio.create_task(service) for service in services]
        failed = _stop_on_failure(running, server, stop)
        try:
            _announce(settings, sock, roles)
            await server.serve(sockets=[sock])
        finally:
            stop.set()
            await asyncio.gather(*running, return_exceptions=True)
        if failed:
            raise failed[0]  # e.g. a second scheduler on SQLite: the CLI says so, exit 2


def _import_http_app(roles: frozenset[Role]) -> None:
    """The module of the process's HTTP app: the API's, or, without the API role, the light
    ops server (/healthz, /metrics), which a restarted scheduler or worker imports in a
    fraction of the API's time (api/ops_app.py)."""
    importlib.import_module("tickwork.api.app" if Role.API in roles else "tickwork.api.ops_app")


def _http_app(
    store: ScheduleStore, clock: Clock, settings: Settings, roles: frozenset[Role]
) -> ASGIApp:
    if Role.API in roles:
        from tickwork.api.app import create_app

        return create_app(store=store, clock=clock, settings=settings)
    from tickwork.api.ops_app import create_ops_app

    limit = Limit(rate=settings.api_key_rate, burst=settings.api_key_burst)
    return create_ops_app(
        store=store,
        keys=KeyService(store, clock, limit=limit),
        open_ops=settings.open_ops,
        max_body_bytes=settings.max_body_bytes,
    )


def _stop_on_failure(
    running: Sequence[asyncio.Task[None]], server: uvicorn.Server, stop: asyncio.Event
) -> list[BaseException]:
    """Every service handles its own errors and goes on; one that ends with an exception
    anyway cannot go on (a second scheduler on a SQLite database), so the process stops and
    reports it rather than serve without it. Returns the list such failures are put in."""
    failed: list[BaseException] = []

    def done(task: asyncio.Task[None]) -> None:
        if stop.is_set() or task.cancelled() or task.exception() is None:
            return
        error = task.exception()
        assert error is not None
        log.error("a service stopped: %s", error, extra={"action": "service_failed"})
        failed.append(error)
        server.should_exit = True

    for task in running:
        task.add_done_callback(done)
    return failed


async def _open_queue(
    stack: contextlib.AsyncExitStack, settings: Settings, roles: frozenset[Role]
) -> Queue | None:
    """The external queue, for scheduler and worker processes that run apart."""
    if settings.queue_url.strip().lower() in ("", "table") or roles >= {
        Role.SCHEDULER,
        Role.WORKER,
    }:
        return None  # the store is the queue (or fires stay inside this process)
    from tickwork.queue.factory import queue_for_url

    queue = queue_for_url(settings.queue_url)
    await queue.open()
    stack.push_async_callback(queue.close)
    return queue


def _publisher(queue: Queue) -> Publish:
    async def publish(envelopes: Sequence[Envelope]) -> None:
        crash_if_asked("after_claim")  # fault injection: die between claim and publish
        await queue.publish(envelopes)

    return publish


def crash_if_asked(point: str) -> None:
    """`TICKWORK_FAULT=<point>` kills the process at that point (for crash tests only)."""
    if os.environ.get("TICKWORK_FAULT") == point:
        os._exit(137)


def _webhook_runner(settings: Settings, clock: Clock, store: ScheduleStore) -> WebhookRunner:
    return WebhookRunner(
        policy=AddressPolicy(allow=settings.webhook_allow),
        secrets=settings.webhook_secrets,
        clock=clock,
        max_connections=settings.worker_webhook_concurrency,
        tenant_lists=TenantLists(store, clock),
        ca_bundle=settings.webhook_ca_bundle,
        proxies=webhook_proxies(settings),
    )


def _executor(
    store: ScheduleStore,
    clock: Clock,
    settings: Settings,
    node_id: str,
    runner: Runner,
    alerts: Alerter,
) -> Executor:
    config = ExecutorConfig(
        node_id=node_id,
        concurrency=settings.executor_concurrency,
        webhook_concurrency=settings.worker_webhook_concurrency,
        max_per_host=settings.worker_max_per_host,
        tenant_share=settings.worker_tenant_share,
        parked_limit=settings.worker_parked_limit,
        unrecorded_limit=settings.worker_unrecorded_limit,
        lease_ttl_ms=settings.lease_ttl_ms,
        heartbeat_ms=settings.lease_heartbeat_ms,
    )
    return Executor(store, clock, runner, config, alerts=alerts)


def _leaser(
    store: ScheduleStore,
    clock: Clock,
    settings: Settings,
    node_id: str,
    executor: Executor,
    external_queue: bool,
) -> StoreLeaser:
    config = LeaserConfig(
        node_id=node_id,
        lease_ttl_ms=settings.lease_ttl_ms,
        lookahead_ms=settings.lookahead_ms,
        backstop_delay_ms=settings.queue_backstop_ms if external_queue else 0,
    )
    return StoreLeaser(store, clock, executor, config)


def _scheduler(
    store: ScheduleStore,
    clock: Clock,
    settings: Settings,
    node_id: str,
    dispatch: Dispatch | None,
    publish: Publish | None,
    keeper: PartitionKeeper,
) -> SchedulerService:
    config = SchedulerConfig(
        node_id=node_id,
        batch_size=settings.claim_batch,
        lookahead_ms=settings.lookahead_ms,
        max_idle_ms=settings.max_idle_ms,
        lease_ttl_ms=settings.lease_ttl_ms,
        takeover_grace_ms=settings.takeover_grace_ms,
        fire_ceiling=settings.fire_ceiling or None,  # 0: no ceiling
        herd_lead_ms=settings.herd_lead_ms,
    )
    return SchedulerService(store, clock, config, dispatch, publish, keeper=keeper)


def _worker_figures(
    executor: Executor, gauge: DepthGauge, queue_url: str
) -> Callable[[], dict[str, object]]:
    """What a worker's heartbeat reports: its queue, the fires it holds, the depth sampled."""
    kind = queue_url.partition("://")[0].lower() if "://" in queue_url else "table"
    queue = "redis" if kind == "rediss" else kind

    def figures() -> dict[str, object]:
        return {"queue": queue, "in_flight": executor.backlog, "queue_depth": gauge.last}

    return figures


def _keeper(
    store: ScheduleStore, clock: Clock, settings: Settings, node_id: str, identity: NodeIdentity
) -> PartitionKeeper:
    """The partition leases of this scheduler. SQLite (and memory) are single-process stores:
    there one scheduler holds every partition and a second one is refused."""
    config = KeeperConfig(
        node_id=node_id,
        lease_ttl_ms=settings.partition_lease_ttl_ms,
        exclusive=not settings.database_url.startswith(("postgres://", "postgresql")),
        frozen_view=os.environ.get("TICKWORK_FAULT") == "stale_partition_view",
    )
    return PartitionKeeper(store, clock, config, identity)


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


async def _prepare_keys(
    store: ScheduleStore, clock: Clock, settings: Settings, roles: frozenset[Role]
) -> None:
    """`tickwork up`, or an API on loopback, with no usable key yet mints the first admin key
    into the data directory; an API beyond loopback without any key refuses to start."""
    keys = KeyService(store, clock)
    if roles == ALL_ROLES or is_loopback_host(settings.host):
        written = await bootstrap_admin_key(keys, data_dir(settings))
        if written is not None:
            print(
                f"created an admin API key in {written} (mode 0600); the tickwork CLI reads it "
                "from there, HTTP clients send it as Authorization: Bearer <key>",
                flush=True,
            )
    await refuse_open_network_api(keys, settings.host)


async def _sign_by_default(store: ScheduleStore, clock: Clock) -> None:
    """Tenants whose signing was never configured (a new database's `default`) get a secret:
    every webhook is signed unless a job opts out (ADR 0019)."""
    signed = await TenantService(store, clock).sign_unconfigured()
    if signed:
        log.info(
            "generated a webhook signing secret for tenant(s) %s; show a new one with"
            " `tickwork tenants rotate-secret NAME`",
            ", ".join(signed),
        )


def _announce(settings: Settings, sock: socket.socket, roles: frozenset[Role]) -> None:
    port = sock.getsockname()[1]
    names = "+".join(r.value for r in Role if r in roles)
    extra = "API docs at /docs" if Role.API in roles else "/healthz and /metrics"
    print(
        f"tickwork {names} listening on http://{settings.host}:{port} "
        f"(store: {_describe(settings.database_url)}; {extra})",
        flush=True,
    )


def _describe(url: str) -> str:
    return url.split("@")[-1] if url.startswith("postgres") else url
