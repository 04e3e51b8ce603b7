"""Run `tickwork up` as a real subprocess and talk to it over HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

import httpx

from tickwork.testing import free_port


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

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, timeout_s: float = 30.0) -> UpProcess:
        env = {
            **os.environ,
            "TICKWORK_LOG_LEVEL": "warning",
            "TICKWORK_WEBHOOK_ALLOW": "127.0.0.1/32",  # the test receiver is on loopback
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
                    raise RuntimeError(f"tickwork up exited early: {await self._stderr()}")
                self.banner += line.decode()
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
            return await self.proc.wait()

    async def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self.api, timeout=10) as client:
            return await client.request(method, path, **kwargs)
