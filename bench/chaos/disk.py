"""A small disk for the harness's PostgreSQL, so that it can be filled on purpose: a tmpfs of a
fixed size, mounted in a temp dir (needs root and the right to mount; `usable()` says whether
this machine allows it), with a ballast file that takes every free byte until removed."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CHUNK = 4 * 1024 * 1024


def faketime_library() -> Path | None:
    """libfaketime, for running one scheduler on a skewed clock (Debian: `apt install faketime`)."""
    for pattern in ("/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"):
        found = sorted(Path("/").glob(pattern.lstrip("/")))
        if found:
            return found[0]
    return None


class SmallDisk:
    def __init__(self, size_mb: int) -> None:
        self.size_mb = size_mb
        self.path: Path | None = None

    @property
    def ballast(self) -> Path:
        assert self.path is not None
        return self.path / "ballast"

    def mount(self) -> Path:
        path = Path(tempfile.mkdtemp(prefix="tw-chaos-disk-"))
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0755", "tmpfs", str(path)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            path.rmdir()
            raise PermissionError(f"cannot mount a tmpfs: {done.stderr.strip()}")
        if os.geteuid() == 0:
            with contextlib.suppress(KeyError, LookupError):
                shutil.chown(path, "postgres", "postgres")  # ThrowawayPostgres runs as postgres
        self.path = path
        return path

    def fill(self) -> int:
        """Take every free byte; returns how many were taken."""
        taken = 0
        size = CHUNK
        fd = os.open(self.ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while size >= 512:
                try:
                    taken += os.write(fd, b"\0" * size)
                except OSError:  # no room for this much: try a smaller piece
                    size //= 2
        finally:
            os.close(fd)
        return taken

    def unfill(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.ballast.unlink()

    def unmount(self) -> None:
        if self.path is None:
            return
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            self.path.rmdir()
        self.path = None


def can_mount() -> bool:
    disk = SmallDisk(1)
    try:
        disk.mount()
    except PermissionError:
        return False
    disk.unmount()
    return True
