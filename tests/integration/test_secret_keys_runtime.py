"""Where a process's keys for secrets at rest come from, and a start that fails (exit 2,
naming the setting) when its keys cannot read what the deployment stored."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tickwork.errors import InvalidInput
from tickwork.runtime.secret_keys import check_keys_open, create_once, keyring_for
from tickwork.sealing import Keyring, generate_key_line, parse_key_lines
from tickwork.settings import Settings
from tickwork.store.sqlite import SqliteStore
from tickwork.webhooks import generate_secret

from ..support.proc import UpProcess


def test_processes_starting_together_all_get_the_same_key(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secrets.key"
    path.parent.mkdir()
    start = threading.Barrier(8)
    created: list[bool] = []

    failures: list[BaseException] = []

    def race(n: int) -> None:
        start.wait()
        try:
            created.append(create_once(path, f"k{n}:{'A' * 43}=\n"))
        except BaseException as exc:  # a thread's exception would otherwise be only a warning
            failures.append(exc)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(created) == 8
    assert created.count(True) == 1
    assert path.read_text().startswith("k")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in path.parent.iterdir()] == ["secrets.key"]  # no leftovers


def test_keys_come_from_the_setting_first_then_the_data_directory(tmp_path: Path) -> None:
    line = generate_key_line("set")
    configured = keyring_for(Settings(secret_keys=line, data_dir=str(tmp_path)))
    assert configured.ids == ("set",)
    assert not (tmp_path / "secrets.key").exists()
    made = keyring_for(Settings(data_dir=str(tmp_path)))
    assert keyring_for(Settings(data_dir=str(tmp_path))).ids == made.ids
    with pytest.raises(InvalidInput, match="secret_keys") as info:
        keyring_for(Settings(secret_keys="k1:c2hvcnQ=", data_dir=str(tmp_path)))
    assert "c2hvcnQ" not in str(info.value)
    with pytest.raises(InvalidInput, match="no TICKWORK_SECRET_KEYS"):
        keyring_for(Settings(data_dir=str(tmp_path / "empty")), create=False)


async def test_a_store_whose_tenants_this_keyring_cannot_read_fails_the_check(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tw.db"
    k1 = Keyring(parse_key_lines([generate_key_line("k1")], source="t"))
    k2 = Keyring(parse_key_lines([generate_key_line("k2")], source="t"))
    writer = SqliteStore(path, keyring=k1)
    await writer.open()
    await check_keys_open(writer)  # nothing sealed yet, and then its own key
    await writer.set_tenant_secrets("default", (generate_secret(),), now=datetime.now(UTC))
    await check_keys_open(writer)
    other = SqliteStore(path, keyring=k2)
    await other.open()
    with pytest.raises(InvalidInput, match="'k1', which this process does not have"):
        await check_keys_open(other)
    await writer.close()
    await other.close()


async def test_a_worker_with_other_keys_than_the_api_refuses_to_start(
    pg_dsn: str, tmp_path: Path
) -> None:
    api = await UpProcess(pg_dsn, command="api").start()  # signs `default` with its key
    try:
        env = {**os.environ, "TICKWORK_DATA_DIR": str(tmp_path / "elsewhere")}
        done = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tickwork", "worker", "--db", pg_dsn, "--port", "0"],
            capture_output=True, text=True, env=env, timeout=60, check=False,
        )  # fmt: skip
    finally:
        await api.stop()
    assert done.returncode == 2, done.stderr
    assert "secret_keys" in done.stderr
    assert "every process of a deployment needs the same keys" in done.stderr
