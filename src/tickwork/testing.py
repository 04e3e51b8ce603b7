"""Helpers for tests and chaos tooling: free ports and private, killable PostgreSQL clusters.

    free_port() -> int
    ThrowawayPostgres(...)            a PostgreSQL cluster of our own in a temp dir, on a free port
        .dsn(database="postgres")     postgresql://postgres@127.0.0.1:PORT/DATABASE
        .stop(mode="fast")            "immediate" is a crash: no checkpoint, recovery on start
        .start()
        .cleanup()                    stop (if running) and delete the data directory
    ServiceUnavailable                the binaries or the `postgres` account are missing

Never point any of this at the machine's shared servers: whatever gets crashed here is ours.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

__all__ = ["ServiceUnavailable", "ThrowawayPostgres", "free_port", "pg_bindir"]

StopMode = Literal["smart", "fast", "immediate"]


class ServiceUnavailable(RuntimeError):
    """A service a test wants cannot be provided here (binaries or accounts are missing)."""


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


class ThrowawayPostgres:
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
    ) -> None:
        self.bindir = bindir if bindir is not None else pg_bindir()
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
        self._root = Path(tempfile.mkdtemp(prefix="tw-pg-"))
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

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"ThrowawayPostgres(port={self.port}, root={self._root}, {state})"
