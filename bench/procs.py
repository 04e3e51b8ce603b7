"""Child processes of the bench: started, waited for, stopped by their own pid only."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from bench.machine import REPO


@dataclass
class Child:
    name: str
    proc: asyncio.subprocess.Process
    log_path: Path
    _drain: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM, wait; SIGKILL (this pid only) if it does not exit in time."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        if self._drain is not None:
            await self._drain
        return self.proc.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


async def start(
    name: str, argv: list[str], *, ready: str, log_path: Path, env: dict[str, str] | None = None,
    timeout_s: float = 60.0, cwd: Path | None = None,
) -> tuple[Child, str]:  # fmt: skip
    """Start `argv` (in `cwd`, default this checkout); return once a stdout line contains
    `ready` (and that line)."""
    log = _open_log(log_path)
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd if cwd is not None else REPO,
        # Children may write bytecode caches even where the caller's environment forbids it:
        # without them every process start compiles all of its imports again (seconds of CPU
        # each on this machine, measured with py-spy), which is not what the bench measures.
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "", **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
    )
    child = Child(name=name, proc=proc, log_path=log_path)
    try:
        line = await asyncio.wait_for(_read_until(proc, ready, log), timeout_s)
    except BaseException:
        await child.stop(5.0)
        log.close()
        raise RuntimeError(f"{name} did not start: {child.log_tail()}") from None
    child._drain = asyncio.create_task(_drain(proc, log))
    return child, line


def _open_log(path: Path) -> BinaryIO:
    return open(path, "ab")  # closed by the drain task when the child exits


async def _read_until(proc: asyncio.subprocess.Process, ready: str, log: BinaryIO) -> str:
    assert proc.stdout is not None
    while True:
        raw = await proc.stdout.readline()
        if not raw:
            raise RuntimeError("exited before it was ready")
        log.write(raw)
        line = raw.decode(errors="replace")
        if ready in line:
            return line.strip()


async def _drain(proc: asyncio.subprocess.Process, log: BinaryIO) -> None:
    """Keep reading the child's stdout into its log, so a full pipe never blocks it."""
    assert proc.stdout is not None
    try:
        while raw := await proc.stdout.readline():
            log.write(raw)
    finally:
        log.close()
