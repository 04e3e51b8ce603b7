"""The LISTEN connection of a PostgreSQL store, kept alive across restarts and cuts.

NOTIFY is how one process wakes the loops of another (a claim with hand-off wakes the
workers; a job write wakes the schedulers). A LISTEN connection that died and stayed dead
would never raise an error: every loop would silently fall back to its polling timeout, which
is correct but slow (the chaos harness measured a steady-state p99 of 4.6 s instead of
~0.2 s after a PostgreSQL crash-restart). So this keeper:

- notices a loss at once when the server closes the socket (asyncpg's termination
  listener: crash, restart, `pg_terminate_backend`), and within `probe_s + probe_timeout_s`
  when the network silently eats it (a `SELECT 1` probe);
- reconnects with the same backoff as the executor (50 ms doubling to 1 s), logging once
  per outage rather than once per attempt;
- calls `on_reconnect` after each new LISTEN, because notifications sent while no
  connection listened are gone: the loops must rescan rather than wait for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import asyncpg

from tickwork.store.postgres.errors import DRIVER_ERRORS, translated
from tickwork.timing.outage import outage_pause_s

log = logging.getLogger("tickwork.store.postgres")

_LOST_ERRORS = DRIVER_ERRORS  # whatever the error map knows means this connection is lost


class NotifyListener:
    def __init__(
        self,
        dsn: str,
        channel: str,
        on_payload: Callable[[str], None],
        on_reconnect: Callable[[], None],
        *,
        probe_s: float = 5.0,
        probe_timeout_s: float = 5.0,
        server_settings: Mapping[str, str] | None = None,
    ) -> None:
        self._dsn = dsn
        self._server_settings = dict(server_settings) if server_settings else None
        self._channel = channel
        self._on_payload = on_payload
        self._on_reconnect = on_reconnect
        self._probe_s = probe_s
        self._probe_timeout_s = probe_timeout_s
        self._conn: asyncpg.Connection | None = None
        self._lost = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self.reconnects = 0  # how many times a lost LISTEN was re-established (tests read it)

    async def start(self) -> None:
        """Listen now (an error here is the caller's, as for any first connection), then
        keep listening in the background."""
        with translated("starting to LISTEN"):
            await self._listen()
        self._keeper = asyncio.create_task(self._keep(), name="tickwork-pg-listen")

    async def close(self) -> None:
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(*_LOST_ERRORS):
                await asyncio.wait_for(conn.close(), self._probe_timeout_s)
            conn.terminate()  # no-op when close() finished; frees the socket when it hung

    @property
    def connection_pid(self) -> int | None:
        """The server process id of the LISTEN session (tests terminate it)."""
        return None if self._conn is None else self._conn.get_server_pid()

    async def _listen(self) -> None:
        conn = await asyncpg.connect(
            self._dsn, timeout=self._probe_timeout_s, server_settings=self._server_settings
        )
        try:
            await conn.add_listener(self._channel, self._deliver)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(self._terminated)
        self._lost.clear()
        self._conn = conn

    def _deliver(self, _conn: Any, _pid: int, _channel: str, payload: object) -> None:
        if isinstance(payload, str):
            self._on_payload(payload)

    def _terminated(self, conn: Any) -> None:
        if conn is self._conn:  # not a connection we replaced or closed ourselves
            self._lost.set()

    async def _keep(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._lost.wait(), self._probe_s)
            except TimeoutError:
                if await self._answers():
                    continue
            await self._relisten()

    async def _answers(self) -> bool:
        conn = self._conn
        if conn is None or conn.is_closed():
            return False
        try:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), self._probe_timeout_s)
        except _LOST_ERRORS:
            return False
        return True

    async def _relisten(self) -> None:
        dead, self._conn = self._conn, None
        if dead is not None:
            dead.terminate()
        lost_at = time.monotonic()
        log.warning("LISTEN connection lost; reconnecting", extra={"action": "listen_lost"})
        failures = 0
        while True:
            try:
                await self._listen()
                break
            except _LOST_ERRORS as exc:
                failures += 1
                log.debug("LISTEN reconnect attempt %d failed: %s", failures, exc)
                await asyncio.sleep(outage_pause_s(failures))
        self.reconnects += 1
        log.info(
            "LISTEN connection re-established after %.1f s",
            time.monotonic() - lost_at,
            extra={"action": "listen_restored", "failed_attempts": failures},
        )
        self._on_reconnect()
