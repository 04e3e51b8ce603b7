"""Each peer's own virtualenv, created once with `uv` and cached between runs.

Peers are not project dependencies: a peer runs in a venv of its own, built from the pinned
specs of its registry entry, under ~/.cache/tickwork-bench/peers/<venv>-<version>. A marker
file holds the specs the venv was built from; a venv whose marker differs is rebuilt. An
install that fails is returned as a reason, not raised: the run goes on without that peer.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

CACHE = Path.home() / ".cache" / "tickwork-bench" / "peers"
MARKER = "tickwork-bench-specs.txt"
INSTALL_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Venv:
    python: Path | None  # None: not installed
    reason: str = ""  # why not, or "cached" / "installed"


def venv_dir(name: str, specs: tuple[str, ...]) -> Path:
    """<name>-<version of the first spec>, plus a short hash when that is not pinned."""
    first = specs[0].split("==", 1)
    tag = first[1] if len(first) == 2 else hashlib.sha1("\n".join(specs).encode()).hexdigest()[:8]
    return CACHE / f"{name}-{tag}"


async def _run(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), INSTALL_TIMEOUT_S)
    except TimeoutError:
        proc.kill()  # our own child, by its pid
        await proc.wait()
        return -1, f"timed out after {INSTALL_TIMEOUT_S:.0f} s"
    return proc.returncode or 0, out.decode(errors="replace")


async def ensure(name: str, specs: tuple[str, ...]) -> Venv:
    """The venv's python for `specs`, installing it if the cache lacks it."""
    uv = shutil.which("uv")
    if uv is None:
        return Venv(None, "not installed: uv not found on PATH")
    where = venv_dir(name, specs)
    python, marker = where / "bin" / "python", where / MARKER
    wanted = "\n".join(specs) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return Venv(python, "cached")
    shutil.rmtree(where, ignore_errors=True)
    where.parent.mkdir(parents=True, exist_ok=True)
    code, out = await _run(uv, "venv", "-q", str(where))
    if code == 0:
        code, out = await _run(uv, "pip", "install", "-q", "--python", str(python), *specs)
    if code != 0:
        shutil.rmtree(where, ignore_errors=True)
        tail = " | ".join(out.strip().splitlines()[-3:])
        return Venv(None, f"not installed: {tail or f'exit {code}'}")
    marker.write_text(wanted)
    return Venv(python, "installed")
