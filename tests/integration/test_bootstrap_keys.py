"""The embedded default's first key, and no API open on a network without one (processes)."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.proc import UpProcess, data_dir_for
from tickwork.testing import free_port


async def test_the_first_up_writes_an_admin_key_the_cli_finds(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tw.db'}"
    key_file = data_dir_for(db) / "admin.key"
    up = await UpProcess(db).start()
    try:
        assert f"created an admin API key in {key_file}" in up.banner
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = key_file.read_text().strip()
        assert key.startswith("tw_")
        no_key = await up.call("GET", "/v1/jobs", headers={"Authorization": ""})
        assert no_key.status_code == 401
        assert (await up.call("GET", "/v1/jobs")).status_code == 200
        env = {**os.environ, "TICKWORK_DATA_DIR": str(key_file.parent)}
        env.pop("TICKWORK_API_KEY", None)
        listed = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tickwork", "jobs", "list", "--api", up.api, "--json"],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
    finally:
        await up.stop()
    again = await UpProcess(db).start()  # a key exists: nothing new is written
    try:
        assert "created an admin API key" not in again.banner
        assert key_file.read_text().strip() == key
    finally:
        await again.stop()


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_an_api_beyond_loopback_without_a_key_refuses_to_start(tmp_path: Path, host: str) -> None:
    db = f"sqlite:///{tmp_path / 'tw.db'}"
    started = subprocess.run(
        [sys.executable, "-m", "tickwork", "api", "--db", db, "--host", host,
         "--port", str(free_port())],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "TICKWORK_DATA_DIR": str(tmp_path / "data")},
    )  # fmt: skip
    assert started.returncode == 2, started.stderr
    assert "no API key in the database" in started.stderr
    assert "tickwork keys create" in started.stderr
    assert not (tmp_path / "data" / "admin.key").exists()
