"""A PostgreSQL store must keep hearing NOTIFY after its LISTEN connection dies.

Found by the chaos harness (docs/reliability.md): after a PostgreSQL crash-restart the store's
LISTEN connection stayed dead, so workers and schedulers were only woken by their polling
timeouts, and the steady-state delay p99 rose from ~0.2 s to 4.6 s for the rest of the run.
Each test here kills the LISTEN session a different way (terminated backend, crashed server,
silent network cut), then checks that (1) the reconnect wakes the loops, because notifications
sent while nobody listened are lost, and (2) a NOTIFY sent by another session wakes them again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from bench.chaos.proxy import PartitionableProxy

from tickwork.store.postgres import CHANNEL, PostgresStore, asyncpg_dsn
from tickwork.store.postgres.listen import NotifyListener
from tickwork.testing import ThrowawayPostgres

WAKE_TIMEOUT_S = 15.0


async def woken(event: asyncio.Event, what: str) -> None:
    try:
        await asyncio.wait_for(event.wait(), WAKE_TIMEOUT_S)
    except TimeoutError:
        pytest.fail(f"no wake-up within {WAKE_TIMEOUT_S} s: {what}")
    event.clear()


async def notify_from_elsewhere(dsn: str, payload: str) -> None:
    conn = await asyncpg.connect(asyncpg_dsn(dsn))
    try:
        await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
    finally:
        await conn.close()


async def assert_still_hears(store: PostgresStore, dsn: str) -> None:
    runs, jobs = store.watch("runs"), store.watch("jobs")
    await woken(runs, "the reconnect did not wake the runs loops")
    await woken(jobs, "the reconnect did not wake the jobs loops")
    await notify_from_elsewhere(dsn, "runs")
    await woken(runs, "a NOTIFY sent after the reconnect was not heard")
    assert not jobs.is_set(), "a 'runs' notification woke the jobs loops"


async def test_a_terminated_listen_session_is_replaced(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    await store.open()
    try:
        runs = store.watch("runs")
        await notify_from_elsewhere(pg_dsn, "runs")
        await woken(runs, "NOTIFY before any fault")

        pid = store.listener.connection_pid
        assert pid is not None
        admin = await asyncpg.connect(asyncpg_dsn(pg_dsn))
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await admin.close()

        await assert_still_hears(store, pg_dsn)
        assert store.listener.connection_pid not in (None, pid)
        assert store.listener.reconnects == 1
    finally:
        await store.close()


async def test_listen_survives_a_postgres_crash_restart(throwaway_pg: ThrowawayPostgres) -> None:
    dsn = throwaway_pg.dsn()
    store = PostgresStore(dsn)
    await store.open()
    try:
        throwaway_pg.stop("immediate")
        throwaway_pg.start()
        await assert_still_hears(store, dsn)
        assert store.listener.reconnects >= 1
    finally:
        await store.close()


class _LostLogged(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "action", None) == "listen_lost":
            self.seen.set()


@pytest.fixture
def lost_logged() -> Iterator[_LostLogged]:
    handler = _LostLogged()
    logger = logging.getLogger("tickwork.store.postgres")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_a_silently_cut_listen_session_is_found_by_the_probe(
    pg_dsn: str, lost_logged: _LostLogged
) -> None:
    # A cut that holds bytes sends no FIN or RST: only the probe can tell the session is gone.
    direct = urlsplit(asyncpg_dsn(pg_dsn))
    assert direct.hostname, f"the test server needs a TCP address: {pg_dsn}"
    assert direct.port, f"the test server needs a TCP port: {pg_dsn}"
    proxy = PartitionableProxy(direct.hostname, direct.port)
    proxy_port = await proxy.start()
    user = f"{direct.username}@" if direct.username else ""
    through_proxy = urlunsplit(direct._replace(netloc=f"{user}127.0.0.1:{proxy_port}"))

    heard: list[str] = []
    woke = asyncio.Event()
    relistened = asyncio.Event()

    def on_payload(payload: str) -> None:
        heard.append(payload)
        woke.set()

    listener = NotifyListener(
        through_proxy, CHANNEL, on_payload, relistened.set, probe_s=0.3, probe_timeout_s=0.5
    )
    await listener.start()
    try:
        proxy.cut()
        await woken(lost_logged.seen, "the probe did not notice the cut")
        assert not relistened.is_set(), "reconnected through a cut network"
        proxy.heal()
        await woken(relistened, "no reconnect after the network healed")
        await notify_from_elsewhere(pg_dsn, "jobs")
        await woken(woke, "a NOTIFY sent after the heal was not heard")
        assert heard[-1] == "jobs"
    finally:
        await listener.close()
        await proxy.close()
