"""A scheduler or worker process alone loads no FastAPI, no aiohttp and no httpx: after a crash,
the time a restarted one spends importing is time its fires wait (api/ops_app.py,
ssrf_aiohttp.py, cli/client.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from tickwork.cli import app
from tickwork.runtime.up import Role, _import_http_app
_import_http_app(frozenset(Role(r) for r in sys.argv[1].split(",")))
import tickwork.store.postgres, tickwork.worker.executor, tickwork.worker.leaser
heavy = ("aiohttp", "fastapi", "httpx", "tickwork.api.app", "tickwork.api.ops_app")
print(",".join(sorted(m for m in heavy if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("roles", "loaded"),
    [
        ("worker", "tickwork.api.ops_app"),
        ("scheduler", "tickwork.api.ops_app"),
        ("scheduler,worker", "tickwork.api.ops_app"),
        ("api", "fastapi,tickwork.api.app"),
        ("api,scheduler,worker", "fastapi,tickwork.api.app"),
    ],
)
def test_only_a_process_serving_the_api_imports_fastapi(roles: str, loaded: str) -> None:
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, roles], capture_output=True, text=True, check=True
    )
    assert probe.stdout.strip() == loaded
