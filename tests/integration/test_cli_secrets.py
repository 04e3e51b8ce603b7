"""`tickwork jobs create --secret/--on-failure` and `tickwork tenants secrets ...` against a
real API server."""

from __future__ import annotations

from typing import Any

from tickwork.webhooks import fingerprint, generate_secret

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
