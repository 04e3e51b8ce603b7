"""A real tickwork cluster on loopback, owned by the harness: its own PostgreSQL, its own queue
server, 1 API, 3 schedulers, 3 workers (the last behind TCP proxies the harness can cut) and
the independent receiver. Every process is started from tickwork's own CLI."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import asyncpg

from bench.chaos.disk import SmallDisk, faketime_library
from bench.chaos.faults import CUT_WORKER, SCHEDULERS, WORKERS
from bench.chaos.proxy import PartitionableProxy
from bench.procs import Child, start
from tickwork.store.postgres.statements import SQL as PG_SQL
from tickwork.testing import ThrowawayNats, ThrowawayPostgres, ThrowawayRedis, free_port

QueueKind = Literal["table", "nats", "redis"]
Role = Literal["api", "scheduler", "worker"]
State = Literal["up", "down", "paused"]
DATABASE = "tickwork"
RESTART_GIVE_UP_S = 120.0


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    queue: QueueKind
    workdir: Path
    secret: str
    secret_keys: str  # TICKWORK_SECRET_KEYS: every process of one deployment shares them
    lease_ttl_ms: int
    backstop_ms: int
    skew_s: float = 0.0  # scheduler-1's wall clock runs this far ahead (libfaketime)
    disk_mb: int = 0  # > 0: PostgreSQL's data on a tmpfs of this size, which faults may fill


@dataclass
class Member:
    name: str
    role: Role
    argv: list[str]
    env: dict[str, str]
    child: Child | None = None
    state: State = "down"
    restarts: int = 0
    faults: list[str] = field(default_factory=list)


class Cluster:
    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        # Bounded WAL, so that a small disk holds a long run.
        self.pg = ThrowawayPostgres(
            settings={
                "max_connections": "300",
                "max_wal_size": "256MB",
                "min_wal_size": "64MB",
                "checkpoint_timeout": "30s",
            }
        )
        self.disk = SmallDisk(config.disk_mb) if config.disk_mb > 0 else None
        self.queue_server: ThrowawayNats | ThrowawayRedis | None = None
        self.proxies: list[PartitionableProxy] = []
        self.members: dict[str, Member] = {}
        self.receiver: Child | None = None
        self.receiver_port = 0
        self.api_port = free_port()
        self.deliveries_file = config.workdir / "deliveries.jsonl"

    # -- start and stop ----------------------------------------------------------------------

    async def start(self) -> None:
        if self.disk is not None:
            self.pg.parent_dir = self.disk.mount()
        await asyncio.to_thread(self.pg.start)
        admin = await asyncpg.connect(self.pg.dsn())
        try:
            await admin.execute(f"CREATE DATABASE {DATABASE}")
        finally:
            await admin.close()
        await self._start_queue_server()
        await self._start_receiver()
        await self._run_cli(["db", "upgrade", "--db", self.pg.dsn(DATABASE)])
        await self._add_members()
        await asyncio.gather(*(self._spawn(m) for m in self.members.values()))

    async def _start_queue_server(self) -> None:
        if self.config.queue == "nats":
            self.queue_server = ThrowawayNats()
        elif self.config.queue == "redis":
            self.queue_server = ThrowawayRedis()
        if self.queue_server is not None:
            await asyncio.to_thread(self.queue_server.start)

    async def _start_receiver(self) -> None:
        self.deliveries_file.unlink(missing_ok=True)  # the receiver appends: start from nothing
        argv = [
            sys.executable, "-m", "bench.chaos.receiver",
            "--out", str(self.deliveries_file), "--secret", self.config.secret,
        ]  # fmt: skip
        self.receiver, line = await start(
            "receiver", argv, ready="ready", log_path=self.config.workdir / "receiver.log"
        )
        self.receiver_port = int(line.split()[1])

    async def _add_members(self) -> None:
        self._add("api", "api", self.pg.port, self._queue_url(self._queue_port()))
        for name in SCHEDULERS:
            self._add(name, "scheduler", self.pg.port, self._queue_url(self._queue_port()))
        for name in WORKERS:
            pg_port, queue_port = self.pg.port, self._queue_port()
            if name == CUT_WORKER:  # its every connection goes through a proxy we can cut
                pg_port = await self._proxy(self.pg.port)
                if queue_port:
                    queue_port = await self._proxy(queue_port)
            self._add(name, "worker", pg_port, self._queue_url(queue_port))

    def _queue_port(self) -> int:
        return self.queue_server.port if self.queue_server is not None else 0

    def _queue_url(self, port: int) -> str | None:
        if self.config.queue == "nats":
            return f"nats://127.0.0.1:{port}"
        if self.config.queue == "redis":
            return f"redis://127.0.0.1:{port}/0"
        return None

    async def _proxy(self, port: int) -> int:
        proxy = PartitionableProxy("127.0.0.1", port)
        self.proxies.append(proxy)
        return await proxy.start()

    def admin_key(self) -> str:
        """The admin key the API process wrote when it first started (it had no key)."""
        return (self.config.workdir / "api" / "admin.key").read_text().strip()

    def _add(self, name: str, role: Role, pg_port: int, queue_url: str | None) -> None:
        # application_name lets the harness find (and drop) exactly this process's sessions.
        dsn = f"postgresql://postgres@127.0.0.1:{pg_port}/{DATABASE}?application_name=tw-{name}"
        port = self.api_port if role == "api" else 0
        argv = [sys.executable, "-m", "tickwork", role, "--db", dsn, "--port", str(port)]
        if queue_url is not None and role != "api":
            argv += ["--queue", queue_url]
        env = {
            "TICKWORK_NODE_ID": name,
            "TICKWORK_LEASE_TTL_MS": str(self.config.lease_ttl_ms),
            # A fifth of the TTL, as in the defaults (5 s, 1 s): a lease must last longer than
            # four heartbeats, and this keeps any --lease-ttl-ms within that rule.
            "TICKWORK_LEASE_HEARTBEAT_MS": str(max(self.config.lease_ttl_ms // 5, 100)),
            "TICKWORK_QUEUE_BACKSTOP_MS": str(self.config.backstop_ms),
            "TICKWORK_WEBHOOK_SECRETS": self.config.secret,
            # Each process has its own data directory, as on separate machines: the key that
            # encrypts stored secrets must come from the configuration, the same for all.
            "TICKWORK_SECRET_KEYS": self.config.secret_keys,
            "TICKWORK_WEBHOOK_ALLOW": "127.0.0.1/32",
            "TICKWORK_LOG_LEVEL": "warning",
            # The API (on loopback) writes its first admin key here (`admin_key`).
            "TICKWORK_DATA_DIR": str(self.config.workdir / name),
            "TICKWORK_API_KEY_RATE": "0",  # jobs are created as fast as the API takes them
        }
        if name == SCHEDULERS[0] and self.config.skew_s:
            library = faketime_library()
            if library is None:
                raise RuntimeError("clock skew needs libfaketime (apt install faketime)")
            # Only the wall clock is skewed: asyncio's monotonic timers stay true.
            env |= {
                "LD_PRELOAD": str(library),
                "FAKETIME": f"{self.config.skew_s:+.3f}",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            }
        self.members[name] = Member(name=name, role=role, argv=argv, env=env)

    async def _spawn(self, member: Member) -> None:
        member.child, _ = await start(
            member.name, member.argv, ready="listening", env=member.env,
            log_path=self.config.workdir / f"{member.name}.log",
        )  # fmt: skip
        member.state = "up"

    async def _run_cli(self, args: list[str]) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tickwork", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"tickwork {' '.join(args)} failed: {out.decode()[-2000:]}")

    async def stop(self) -> None:
        """Stop every process gracefully (SIGCONT first: a paused one cannot exit)."""
        for member in self.members.values():
            if member.child is not None and member.state == "paused":
                self._signal(member, signal.SIGCONT)
        for proxy in self.proxies:
            proxy.heal()
        await asyncio.gather(
            *(m.child.stop(30.0) for m in self.members.values() if m.child is not None),
            return_exceptions=True,
        )
        for member in self.members.values():
            member.state = "down"
        if self.receiver is not None:
            await self.receiver.stop(10.0)

    async def cleanup(self) -> None:
        for proxy in self.proxies:
            await proxy.close()
        if self.queue_server is not None:
            await asyncio.to_thread(self.queue_server.cleanup)
        await asyncio.to_thread(self.pg.cleanup)
        if self.disk is not None:
            self.disk.unmount()

    # -- fault primitives ---------------------------------------------------------------------

    def pick(self, wanted: str | None, role: Role) -> Member | None:
        """`wanted` if it is up, else the first other member of its role that is up."""
        if wanted is not None and self.members[wanted].state == "up":
            return self.members[wanted]
        for member in self.members.values():
            if member.role == role and member.state == "up":
                return member
        return None

    def kill(self, member: Member) -> None:
        self._signal(member, signal.SIGKILL)
        member.state = "down"

    async def restart(self, member: Member) -> None:
        """Start a killed member again, as a supervisor would: retry until it comes up (it
        cannot while the database is down)."""
        if member.child is not None:
            await member.child.stop(5.0)
        deadline = time.monotonic() + RESTART_GIVE_UP_S
        while True:
            try:
                await self._spawn(member)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1.0)
            else:
                member.restarts += 1
                return

    def pause(self, member: Member) -> None:
        self._signal(member, signal.SIGSTOP)
        member.state = "paused"

    def resume(self, member: Member) -> None:
        self._signal(member, signal.SIGCONT)
        member.state = "up"

    def _signal(self, member: Member, sig: int) -> None:
        assert member.child is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(member.child.pid, sig)

    async def pg_crash(self) -> None:
        await asyncio.to_thread(self.pg.stop, "immediate")

    async def pg_start(self) -> None:
        await asyncio.to_thread(self.pg.start)

    async def queue_kill(self) -> None:
        assert self.queue_server is not None
        await asyncio.to_thread(self.queue_server.stop, kill=True)

    async def queue_start(self) -> None:
        assert self.queue_server is not None
        await asyncio.to_thread(self.queue_server.start)

    async def disk_fill(self) -> int:
        assert self.disk is not None
        return await asyncio.to_thread(self.disk.fill)

    async def disk_free(self) -> None:
        """Remove the ballast and start PostgreSQL again if the full disk killed it."""
        assert self.disk is not None
        self.disk.unfill()
        await asyncio.to_thread(self.pg.ensure_started)

    async def drop_connections(self, member: Member) -> int:
        admin = await asyncpg.connect(self.pg.dsn(), timeout=10)
        try:
            rows = await admin.fetch(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = $1",
                f"tw-{member.name}",
            )
        finally:
            await admin.close()
        return len(rows)

    def cut(self) -> None:
        for proxy in self.proxies:
            proxy.cut()

    def heal(self) -> None:
        for proxy in self.proxies:
            proxy.heal()

    # -- the ledger -----------------------------------------------------------------------------

    async def ledger(self) -> tuple[dict[str, int], dict[str, int]]:
        """(successful attempts per occurrence key, runs per status) from tickwork's tables."""
        conn = await asyncpg.connect(self.pg.dsn(DATABASE), timeout=10)
        try:
            successes = await conn.fetch(
                "SELECT r.key, count(*) AS n FROM tw_runs r"
                " JOIN tw_attempt_history a ON a.run_id = r.id AND a.status = 'succeeded'"
                " GROUP BY r.key"
            )
            statuses = await conn.fetch("SELECT status, count(*) AS n FROM tw_runs GROUP BY 1")
        finally:
            await conn.close()
        return (
            {row["key"]: row["n"] for row in successes},
            {row["status"]: row["n"] for row in statuses},
        )

    async def queue_mismatches(self) -> list[int]:
        """The runs whose row in the queue of pending runs disagrees with them (ADR 0030)."""
        conn = await asyncpg.connect(self.pg.dsn(DATABASE), timeout=10)
        try:
            found = await conn.fetch(PG_SQL.queue_mismatches.text)
        finally:
            await conn.close()
        return [row["run_id"] for row in found]

    async def attempts_of(self, keys: list[str]) -> list[dict[str, object]]:
        """Every attempt recorded for these occurrence keys, for the post-mortem of a failure."""
        conn = await asyncpg.connect(self.pg.dsn(DATABASE), timeout=10)
        try:
            found = await conn.fetch(
                "SELECT r.key, a.run_id, a.attempt, a.fence_token, a.worker, a.status,"
                " a.started_us, a.finished_us, a.tableoid::regclass::text AS partition"
                " FROM tw_attempt_history a JOIN tw_runs r ON r.id = a.run_id"
                " WHERE r.key = ANY($1::text[]) ORDER BY r.key, a.id",
                keys,
            )
        finally:
            await conn.close()
        return [dict(row) for row in found]

    async def pending_due(self, until_us: int) -> int:
        conn = await asyncpg.connect(self.pg.dsn(DATABASE), timeout=10)
        try:
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM tw_runs WHERE status = 'pending' AND scheduled_us <= $1",
                    until_us,
                )
            )
        finally:
            await conn.close()
