"""`tickwork jobs create --secret/--on-failure` and `tickwork tenants secrets ...` against a
real API server."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tickwork.domain.jobs import WebhookTarget
from tickwork.sealing import Keyring, generate_key_line, parse_key_lines
from tickwork.store.sqlite import SqliteStore
from tickwork.webhooks import fingerprint, generate_secret

from ..contract.store_helpers import make_job
from . import test_cli
from .test_cli import Server, create_args

# The same module-scoped API server and `cli` runner as test_cli.py.
server = test_cli.server
cli = test_cli.cli

OLD, NEW = generate_secret(), generate_secret()


def test_create_with_secrets_and_an_alert(cli: Any, server: Server) -> None:
    args = ["--every", "60", "--secret", OLD, "--secret", NEW]
    result = cli(*create_args(*args, "--on-failure", "https://example.com/alerts", "--json"))
    assert (result.code, result.err) == (0, "")
    job = result.json()
    assert job["signing"] == {"source": "job", "fingerprints": [fingerprint(OLD), fingerprint(NEW)]}
    assert job["on_failure"] == {"url": "https://example.com/alerts", "headers": {}}
    shown = cli("jobs", "get", job["id"])
    assert shown.code == 0
    assert fingerprint(OLD) in shown.out
    assert "https://example.com/alerts" in shown.out
    for output in (result.out, shown.out):
        assert OLD.removeprefix("whsec_") not in output
        assert NEW.removeprefix("whsec_") not in output


def test_a_bad_secret_exits_2_naming_the_flag_without_repeating_it(cli: Any) -> None:
    bad = "whsec_c2hvcnQgYnV0IHNlY3JldA=="
    result = cli(*create_args("--every", "60", "--secret", bad))
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith("error: target.secrets (--secret): secret 1 of 1: decodes to")
    assert len(result.err.strip().splitlines()) == 1
    assert "c2hvcnQgYnV0IHNlY3JldA" not in result.err


def test_tenant_secrets_set_show_clear(cli: Any) -> None:
    set_ = cli("tenants", "secrets", "set", "acme", "--secret", OLD, "--secret", NEW)
    assert (set_.code, set_.err) == (0, "")
    assert fingerprint(OLD) in set_.out
    assert fingerprint(NEW) in set_.out
    shown = cli("tenants", "secrets", "show", "acme", "--json")
    assert shown.code == 0
    assert shown.json()["fingerprints"] == [fingerprint(OLD), fingerprint(NEW)]
    cleared = cli("tenants", "secrets", "clear", "acme")
    assert (cleared.code, cleared.out.strip()) == (0, "cleared the webhook secrets of tenant acme")
    assert cli("tenants", "secrets", "show", "acme", "--json").json()["fingerprints"] == []
    for result in (set_, shown, cleared):
        assert OLD.removeprefix("whsec_") not in result.out + result.err
        assert NEW.removeprefix("whsec_") not in result.out + result.err


def test_tenant_secrets_bad_input_exits_2(cli: Any) -> None:
    missing = cli("tenants", "secrets", "set", "acme")
    assert (missing.code, missing.err.strip()) == (
        2,
        "error: give --secret whsec_... (twice during a rotation)",
    )
    bad = cli("tenants", "secrets", "set", "acme", "--secret", "whsec_!!")
    assert bad.code == 2
    assert bad.err.startswith("error: secrets (--secret): secret 1 of 1: expected 'whsec_'")
    three = cli("tenants", "secrets", "set", "acme", *["--secret", OLD] * 3)
    assert three.code == 2
    assert "at most 2" in three.err
    assert OLD.removeprefix("whsec_") not in three.err


def test_tenants_create_prints_its_signing_secret_once_and_rotation_works(cli: Any) -> None:
    created = cli("tenants", "create", "newco", "--json")
    assert created.code == 0, created.err
    secret = created.json()["webhook_secret"]
    assert created.json()["fingerprints"] == [fingerprint(secret)]
    table = cli("tenants", "create", "otherco")
    assert table.code == 0
    assert "new secret (shown once" in table.out
    rotated = cli("tenants", "secrets", "rotate", "newco", "--json")
    assert rotated.code == 0, rotated.err
    new = rotated.json()["secret"]
    assert rotated.json()["fingerprints"] == [fingerprint(new), fingerprint(secret)]
    retired = cli("tenants", "secrets", "retire", "newco", "--json")
    assert retired.json()["fingerprints"] == [fingerprint(new)]
    shown = cli("tenants", "show", "newco")
    assert secret.removeprefix("whsec_") not in shown.out


def test_keygen_prints_a_usable_key(cli: Any) -> None:
    result = cli("secrets", "keygen", "--id", "prod-1", api=False)
    assert result.code == 0
    [(key_id, material)] = parse_key_lines([result.out.strip()], source="keygen")
    assert key_id == "prod-1"
    assert len(material) == 32
    assert cli("secrets", "keygen", "--id", "bad id", api=False).code == 2


def test_reencrypt_moves_stored_secrets_to_the_first_key(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_line, new_line = generate_key_line("old"), generate_key_line("new")
    path = tmp_path / "tw.db"

    async def write_with_old_key() -> None:
        store = SqliteStore(path, keyring=Keyring(parse_key_lines([old_line], source="t")))
        await store.open()
        await store.create_job(
            make_job(1, target=WebhookTarget(url="https://x.test/", secrets=(OLD,)))
        )
        await store.close()

    asyncio.run(write_with_old_key())
    monkeypatch.setenv("TICKWORK_SECRET_KEYS", f"{new_line},{old_line}")
    result = cli("secrets", "reencrypt", "--db", f"sqlite:///{path}", "--json", api=False)
    assert result.code == 0, result.err
    assert result.json()["jobs_resealed"] == 1
    assert result.json()["key"] == "new"
    with sqlite3.connect(path) as conn:
        [(stored,)] = conn.execute("SELECT webhook_secrets FROM tw_jobs").fetchall()
    assert stored.startswith("tw1:new:")
    monkeypatch.setenv("TICKWORK_SECRET_KEYS", "not a key")
    bad = cli("secrets", "reencrypt", "--db", f"sqlite:///{path}", api=False)
    assert bad.code == 2
    assert "TICKWORK_SECRET_KEYS" in bad.err
