"""The test harness's process starter: a port taken between free_port() and the bind is
retried on another one, so the race costs a second start, not a failed test."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.support.proc import UpProcess


async def test_a_taken_port_is_retried_on_another(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        up = UpProcess(f"sqlite:///{tmp_path}/t.db", command="api", port=port)
        await up.start()
        try:
            assert up.port != port
            assert (await up.call("GET", "/healthz")).status_code == 200
        finally:
            await up.stop()
