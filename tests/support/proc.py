"""Run `tickwork up` as a real subprocess and talk to it over HTTP.

Every process of one database shares a data directory (`data_dir_for`): the first API process
on a database without keys writes its admin key there, and `call` sends it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
import tempfile
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tickwork.testing import free_port


async def _drain(stream: asyncio.StreamReader, keep: deque[bytes] | None) -> None:
    """Read a child's pipe to its end, keeping the last chunks in `keep`."""
    while chunk := await stream.read(65536):
        if keep is not None:
            keep.append(chunk)


def data_dir_for(db_url: str) -> Path:
    """The data directory the test processes of `db_url` share."""
    digest = hashlib.sha256(db_url.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "tw-test-data" / digest


_PORT_ATTEMPTS = 3


class PortTaken(RuntimeError):
    """The process could not bind its port: something took it after free_port() found it."""


@dataclass
class UpProcess:
    """`tickwork up` by default; `command` runs `tickwork api|scheduler|worker` instead."""

    db_url: str
    extra_env: dict[str, str] = field(default_factory=dict)
    command: str = "up"
    args: list[str] = field(default_factory=list)  # extra command-line arguments
    port: int = field(default_factory=free_port)
    proc: asyncio.subprocess.Process | None = None
    banner: str = ""
    # The end of stderr: read all the while, or a chatty process fills the pipe, and
    # asyncio's wait() never returns (it waits for the pipes to reach EOF too).
    log_tail: deque[bytes] = field(default_factory=lambda: deque(maxlen=200))
    _readers: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, timeout_s: float = 30.0) -> UpProcess:
        # free_port() closes the port it found before the process binds it, and in between an
        # outgoing connection of any process may take it as its local port (CI saw "already in
        # use" once). Such a start is retried on another free port.
        for attempt in range(_PORT_ATTEMPTS):
            try:
                return await self._start_once(timeout_s)
            except PortTaken:
                if attempt + 1 == _PORT_ATTEMPTS:
                    raise
                self.port = free_port()
        raise AssertionError("unreachable")

    async def _start_once(self, timeout_s: float) -> UpProcess:
        env = {
            **os.environ,
            "TICKWORK_LOG_LEVEL": "warning",
            "TICKWORK_WEBHOOK_ALLOW": "127.0.0.1/32",  # the test receiver is on loopback
            "TICKWORK_DATA_DIR": str(data_dir_for(self.db_url)),
            **self.extra_env,
        }
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tickwork", self.command,
            "--db", self.db_url, "--port", str(self.port), *self.args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )  # fmt: skip
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout_s):
            while "listening" not in self.banner:
                line = await self.proc.stdout.readline()
                if not line:
                    stderr = await self._stderr()
                    if "is already in use" in stderr:
                        await self.proc.wait()
                        raise PortTaken(stderr)
                    raise RuntimeError(f"tickwork up exited early: {stderr}")
                self.banner += line.decode()
        assert self.proc.stderr is not None
        self._readers = [
            asyncio.create_task(_drain(self.proc.stdout, None)),
            asyncio.create_task(_drain(self.proc.stderr, self.log_tail)),
        ]
        return self

    async def _stderr(self) -> str:
        assert self.proc is not None
        assert self.proc.stderr is not None
        return (await self.proc.stderr.read()).decode()[-4000:]

    async def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        async with asyncio.timeout(timeout_s):
            code = await self.proc.wait()
            await asyncio.gather(*self._readers)
            return code

    def api_key(self) -> str | None:
        """The admin key an API process of this database wrote at its first start."""
        path = data_dir_for(self.db_url) / "admin.key"
        return path.read_text().strip() if path.exists() else None

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        key = self.api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(base_url=self.api, timeout=10, headers=headers) as client:
            return await client.request(method, path, **kwargs)
