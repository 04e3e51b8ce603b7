"""Throwaway PostgreSQL, NATS and Redis servers for tests: private, on free ports, deleted after.

A public helper, for tickwork's own tests and for anyone testing code that runs against
tickwork (docs/testing.md). Each server runs from the locally installed binaries, listens on
127.0.0.1 only, on a port the OS reports free, with its files in a new temporary directory; it
never touches the machine's own servers, so a test may crash, pause or fill it at will.

    ThrowawayPostgres   a cluster of its own (initdb); `.dsn(database)` is a superuser DSN
    ThrowawayNats       `nats-server -js`; `.url` is nats://127.0.0.1:PORT
    ThrowawayRedis      `redis-server` without persistence; `.url` is redis://127.0.0.1:PORT/0
    ServiceUnavailable  raised when a server cannot be provided here (binaries or accounts
                        missing, or it did not start): skip the test, or fail it in CI
    free_port()         a TCP port nobody listens on right now
    mint_key(store)     create an API key in an open store and get it whole (an admin key by
                        default), to call an API the test started
    pg_bindir()         where the PostgreSQL server binaries are (what ThrowawayPostgres uses)

Use a server as a context manager: it starts on entry, and on exit (or if starting fails) it
is stopped and its directory deleted. Forgotten ones are cleaned up at interpreter exit.

    with ThrowawayPostgres() as pg:                    # initdb + start: a few seconds
        subprocess.run(["tickwork", "db", "upgrade", "--db", pg.dsn()], check=True)
        ...                                             # point the code under test at pg.dsn()

    with ThrowawayRedis() as server:
        client = redis.Redis.from_url(server.url)

They can also be stopped and started again on the same port, to test what a client does in
an outage: `ThrowawayPostgres.stop("immediate")` is a crash (WAL replay on the next start),
`stop(kill=True)` SIGKILLs NATS or Redis, and `pause()` / `resume()` freeze NATS or Redis with
SIGSTOP / SIGCONT (connections stay open and nothing answers).

As root, initdb and pg_ctl (which refuse to run as root) run as the `postgres` account through
`runuser`; that account must exist. No extra dependency: the standard library only (and
tickwork itself for `mint_key`).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Self

from tickwork.clock import Clock, SystemClock

if TYPE_CHECKING:
    from tickwork.store.base import ScheduleStore

__all__ = [
    "ServiceUnavailable",
    "StopMode",
    "ThrowawayNats",
    "ThrowawayPostgres",
    "ThrowawayRedis",
    "free_port",
    "mint_key",
    "pg_bindir",
]

# How `ThrowawayPostgres.stop` stops the server (pg_ctl -m): "immediate" is a crash.
StopMode = Literal["smart", "fast", "immediate"]


class ServiceUnavailable(RuntimeError):
    """A service a test wants cannot be provided here (binaries or accounts are missing)."""


async def mint_key(
    store: ScheduleStore,
    *,
    role: str = "admin",
    tenant: str | None = None,
    clock: Clock | None = None,
    name: str = "test",
) -> str:
    """Create an API key in an open store and return it whole (what `tickwork keys create`
    does), for tests and tools that talk to an API they started themselves."""
    from tickwork.domain.keys import Role
    from tickwork.services.keys import KeyService

    keys = KeyService(store, clock or SystemClock())
    created = await keys.create(name=name, role=Role(role), tenant=tenant)
    return created.plaintext


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the OS picks it; racy only in theory)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def pg_bindir() -> Path:
    """The PostgreSQL server binaries: `pg_config --bindir`, else the newest /usr/lib/postgresql."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            )
            candidates.append(Path(out.stdout.strip()))
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted((Path(p) for p in versions), key=_major_version, reverse=True)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    raise ServiceUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) found")


def _major_version(bindir: Path) -> int:
    name = bindir.parent.name
    return int(name) if name.isdigit() else 0


class _Disposable:
    """`with` support for the throwaway servers: start on entry, always clean up on exit."""

    def start(self) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        raise NotImplementedError

    @property
    def log_file(self) -> Path:
        raise NotImplementedError

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cleanup()


class ThrowawayPostgres(_Disposable):
    """A private PostgreSQL cluster: initdb into a temp dir, served on a free 127.0.0.1 port.

    Use as a context manager (initdb + start on enter, cleanup on exit). initdb and pg_ctl
    refuse to run as root, so as root the temp dir is handed to the `postgres` account and the
    binaries run through `runuser -u postgres --`. The data dir is also removed at interpreter
    exit if a test forgot to clean up, and the server stopped first.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        bindir: Path | None = None,
        settings: Mapping[str, str] | None = None,
        start_timeout_s: int = 60,
        parent_dir: Path | None = None,
    ) -> None:
        self.bindir = bindir if bindir is not None else pg_bindir()
        self.parent_dir = parent_dir  # e.g. a small tmpfs, to fill the disk on purpose
        self.port = port if port is not None else free_port()
        self._port_fixed = port is not None
        self._started_once = False
        self.settings = dict(settings or {})
        self.start_timeout_s = start_timeout_s
        self._as_postgres = os.geteuid() == 0
        self._root: Path | None = None
        self._running = False

    # -- paths -------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        """The temp dir: data/ (PGDATA), the unix socket, and server.log."""
        if self._root is None:
            raise RuntimeError("ThrowawayPostgres: call init() (or use it as a context manager)")
        return self._root

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def running(self) -> bool:
        return self._running

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    # -- lifecycle ---------------------------------------------------------------------------

    def init(self) -> None:
        """Create the temp dir and run initdb (trust auth, superuser `postgres`)."""
        if self._root is not None:
            return
        if self._as_postgres:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise ServiceUnavailable(
                    "running as root but there is no `postgres` account"
                ) from None
            if shutil.which("runuser") is None:
                raise ServiceUnavailable("running as root but `runuser` is not installed")
        # Always under the system temp dir: the postgres account must be able to reach it,
        # which it cannot inside root's 0700 pytest tmp_path.
        self._root = Path(tempfile.mkdtemp(prefix="tw-pg-", dir=self.parent_dir))
        atexit.register(self.cleanup)
        if self._as_postgres:
            shutil.chown(self._root, "postgres", "postgres")
        self._run(
            "initdb",
            ["-D", str(self.data_dir), "-A", "trust", "-U", "postgres", "-E", "UTF8"],
            ["--no-sync", "--no-instructions"],
        )

    def start(self) -> None:
        """Start the server and wait until it accepts connections (crash recovery included).

        The first start moves to another free port if someone took ours in the meantime; a
        restart keeps the port, since clients hold DSNs naming it.
        """
        self.init()
        for attempt in range(3):
            try:
                self._start_once()
            except ServiceUnavailable as exc:
                taken = "could not bind" in str(exc) or "already in use" in str(exc)
                if not taken or self._port_fixed or self._started_once or attempt == 2:
                    raise
                self.port = free_port()
            else:
                self._started_once = True
                return

    def _start_once(self) -> None:
        options = [
            f"-p {self.port}",
            f"-k {self.root}",
            "-c listen_addresses=127.0.0.1",
            *(f"-c {name}={value}" for name, value in self.settings.items()),
        ]
        try:
            self._run(
                "pg_ctl",
                ["-D", str(self.data_dir), "-l", str(self.log_file), "-o", " ".join(options)],
                ["-w", "-t", str(self.start_timeout_s), "start"],
            )
        except ServiceUnavailable as exc:
            raise ServiceUnavailable(f"{exc}\n--- server.log ---\n{self._log_tail()}") from exc
        self._running = True

    def stop(self, mode: StopMode = "fast") -> None:
        """Stop the server. "immediate" is a crash: no shutdown checkpoint, WAL replay on start."""
        if not self._running:
            return
        self._run("pg_ctl", ["-D", str(self.data_dir), "-m", mode], ["-w", "stop"])
        self._running = False

    def alive(self) -> bool:
        """Whether the server process runs, asked of `pg_ctl status` (not our own bookkeeping:
        a server can die by itself, e.g. PANIC when its disk is full)."""
        if self._root is None:
            return False
        try:
            self._run("pg_ctl", ["-D", str(self.data_dir)], ["status"])
        except ServiceUnavailable:
            return False
        return True

    def ensure_started(self) -> None:
        """Start the server if it is not running, whatever the reason it stopped."""
        if not self.alive():
            self._running = False
            self.start()

    def cleanup(self) -> None:
        """Stop the server if it runs (fast, then immediate) and delete the temp dir."""
        if self._root is None:
            return
        try:
            if self._running:
                try:
                    self.stop("fast")
                except ServiceUnavailable:
                    self.stop("immediate")
        finally:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None
            self._running = False
            atexit.unregister(self.cleanup)

    # -- internals ---------------------------------------------------------------------------

    def _run(self, tool: str, args: Sequence[str], tail: Sequence[str] = ()) -> None:
        argv = [str(self.bindir / tool), *args, *tail]
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=self.start_timeout_s + 30,
                cwd=self.root,  # the postgres account may not be able to read our cwd
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceUnavailable(f"{tool} failed: {exc}") from exc
        if done.returncode != 0:
            output = (done.stderr or done.stdout).strip()
            raise ServiceUnavailable(f"{tool} exited with {done.returncode}: {output}")

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"ThrowawayPostgres(port={self.port}, root={self._root}, {state})"


# -- throwaway NATS and Redis servers -----------------------------------------------------------


class _ThrowawayServer(_Disposable):
    """A server process of our own on a free 127.0.0.1 port, with its files in a temp dir.

    `stop()` ends it (SIGTERM, or SIGKILL with `kill=True`: a crash), `start()` brings it back
    on the same port with the same directory, `cleanup()` stops it and deletes the directory
    (also at interpreter exit if a test forgot). Readiness is a real protocol round trip, not a
    fixed sleep.
    """

    binary_name = ""
    default_binary = ""
    prefix = "tw-server-"

    def __init__(
        self, *, port: int | None = None, binary: str | None = None, start_timeout_s: float = 20
    ) -> None:
        found = binary or shutil.which(self.binary_name) or self.default_binary
        if not found or not os.access(found, os.X_OK):
            raise ServiceUnavailable(f"no {self.binary_name} binary (looked on PATH)")
        self.binary = found
        self.port = port if port is not None else free_port()
        self._port_fixed = port is not None
        self._started_once = False
        self.start_timeout_s = start_timeout_s
        self._root: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix=self.prefix))
            atexit.register(self.cleanup)
        return self._root

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def url(self) -> str:
        raise NotImplementedError

    def argv(self) -> list[str]:
        raise NotImplementedError

    def _ready(self, sock: socket.socket) -> bool:
        raise NotImplementedError

    def start(self) -> None:
        """Start the server and wait until it answers; the first start may move port if taken."""
        if self.running:
            return
        for attempt in range(3):
            try:
                self._start_once()
            except ServiceUnavailable:
                if self._port_fixed or self._started_once or attempt == 2:
                    raise
                self.port = free_port()
            else:
                self._started_once = True
                return

    def _start_once(self) -> None:
        with self.log_file.open("ab") as log:
            try:
                self._process = subprocess.Popen(
                    self.argv(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.root,
                )
            except OSError as exc:
                raise ServiceUnavailable(f"{self.binary_name} did not start: {exc}") from exc
        # Real time, not a Clock: this waits for a real process to start, whatever clock the
        # services under test are given.
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                raise ServiceUnavailable(
                    f"{self.binary_name} exited on start\n--- log ---\n{self._log_tail()}"
                )
            if self._answers():
                return
            time.sleep(0.02)
        self._kill()
        raise ServiceUnavailable(
            f"{self.binary_name} not ready within {self.start_timeout_s:g} s\n{self._log_tail()}"
        )

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.settimeout(1)
                return self._ready(sock)
        except OSError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        """Stop the server: SIGTERM and wait (graceful), or SIGKILL with `kill=True` (a crash)."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            if kill:
                process.kill()
            else:
                process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=15)
        self._process = None

    def pause(self) -> None:
        """SIGSTOP: connections stay open and nothing answers (a hung server, a GC pause).
        Returns once the kernel reports the process stopped, so that nothing sent after this
        call can still be answered."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)
            _until_stopped(self._process.pid)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def _kill(self) -> None:
        self.stop(kill=True)

    def cleanup(self) -> None:
        """Stop (SIGKILL) if running and delete the temp dir."""
        try:
            self.stop(kill=True)
        finally:
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
                self._root = None
                atexit.unregister(self.cleanup)

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"{type(self).__name__}(port={self.port}, root={self._root}, {state})"


def _until_stopped(pid: int, timeout_s: float = 5.0) -> None:
    """Wait until /proc says `pid` is stopped (state T); a signal is delivered asynchronously.
    Where there is no /proc, return at once."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("T", "t"):
            return
        time.sleep(0.001)  # the kernel has no event for this; it takes microseconds


class ThrowawayNats(_ThrowawayServer):
    """`nats-server -js` on a free port, JetStream store in the temp dir (kept across restarts).

    .url            nats://127.0.0.1:PORT
    .store_dir      the JetStream store (-sd): streams and consumers survive stop/start
    .stop(kill=False), .start(), .cleanup()
    """

    binary_name = "nats-server"
    default_binary = "/usr/sbin/nats-server"
    prefix = "tw-nats-"

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def store_dir(self) -> Path:
        return self.root / "jetstream"

    def argv(self) -> list[str]:
        return [
            self.binary,
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            str(self.store_dir),
            "-l",
            str(self.root / "nats.log"),
        ]

    def _ready(self, sock: socket.socket) -> bool:
        # The server greets with INFO once it accepts clients; with -js it only listens after
        # JetStream is up (streams recovered from the store dir).
        return sock.recv(4).startswith(b"INFO")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.root / "nats.log").read_text(errors="replace")
        except OSError:
            return super()._log_tail(lines)
        return "\n".join(text.splitlines()[-lines:])


class ThrowawayRedis(_ThrowawayServer):
    """`redis-server` on a free port, without persistence (a restart loses everything).

    .url            redis://127.0.0.1:PORT/0
    .stop(kill=False), .start(), .cleanup()
    """

    binary_name = "redis-server"
    default_binary = "/usr/bin/redis-server"
    prefix = "tw-redis-"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        return [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.root),
            "--daemonize",
            "no",
        ]

    def _ready(self, sock: socket.socket) -> bool:
        sock.sendall(b"PING\r\n")
        return sock.recv(7).startswith(b"+PONG")
