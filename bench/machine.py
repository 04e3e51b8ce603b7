"""Facts about the machine and software a run was measured on."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git_state() -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "no commit"
    dirty = " + uncommitted changes" if git("status", "--porcelain") else ""
    return head + dirty


def facts() -> dict[str, Any]:
    return {
        "cores": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "mem_gib": _mem_gib(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
        "tickwork": _version("tickwork"),
        "asyncpg": _version("asyncpg"),
        "aiohttp": _version("aiohttp"),
        "uvicorn": _version("uvicorn"),
        "git": _git_state(),
    }
