"""Secrets never leave tickwork except to the target they are for: a real `tickwork up`
process, secrets of every kind (a target's Authorization header, a password in its URL, a
job's and a tenant's signing secrets, an alert's headers), fires that succeed, fail,
dead-letter and alert, and then a grep of everything an operator or an API user can see:
every answer, the CLI's output, /metrics, the audit log, the process's logs, and the bytes of
the database files. The one place each secret must appear is the request to its target.

Every canary starts with `tw-canary-`: tests/conftest.py also fails the session if any log
record of the in-process tests contains that prefix.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tickwork.webhooks import generate_secret, verify

from ..support.proc import UpProcess, data_dir_for
from ..support.receiver import Receiver

HEADER = "tw-canary-header-41c9"
PASSWORD = "tw-canary-password-7d02"
ALERT_HEADER = "tw-canary-alert-1b77"
JOB_SIGNING = generate_secret()  # the job's own signing secret
CANARIES = (HEADER, PASSWORD, ALERT_HEADER, JOB_SIGNING.removeprefix("whsec_"))


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    rx = await Receiver(statuses={"/fail": 400}).start()
    yield rx
    await rx.stop()


def cli(db_url: str, port: int, *args: str) -> str:
    env = {
        **os.environ,
        "TICKWORK_DATA_DIR": str(data_dir_for(db_url)),
        "TICKWORK_API_URL": f"http://127.0.0.1:{port}",
    }
    done = subprocess.run(
        [sys.executable, "-m", "tickwork", *args],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    return done.stdout + done.stderr


async def test_no_secret_is_shown_logged_or_stored_in_clear(
    tmp_path: Path, receiver: Receiver
) -> None:
    db_url = f"sqlite:///{tmp_path / 'tw.db'}"
    up = await UpProcess(db_url, extra_env={"TICKWORK_LOG_LEVEL": "debug"}).start()
    seen: list[str] = []  # every answer and output an operator or API user gets

    async def call(method: str, path: str, **kw: object) -> httpx.Response:
        answer = await up.call(method, path, **kw)  # type: ignore[arg-type]
        seen.append(answer.text)
        return answer

    try:
        port = receiver.port
        target = {
            "url": f"http://ops:{PASSWORD}@127.0.0.1:{port}/ok",
            "headers": {"Authorization": f"Bearer {HEADER}", "accept": "text/plain"},
            "secrets": [JOB_SIGNING],
        }
        alert = {"url": receiver.url("/alert"), "headers": {"x-pager-token": ALERT_HEADER}}
        job = (
            await call(
                "POST",
                "/v1/jobs",
                json={
                    "name": "leaky",
                    "schedule": {"every": "PT1H"},
                    "target": target,
                    "on_failure": alert,
                },
            )
        ).json()
        failing = (
            await call(
                "POST",
                "/v1/jobs",
                json={
                    "name": "fails",
                    "schedule": {"every": "PT1H"},
                    "target": {**target, "url": f"http://ops:{PASSWORD}@127.0.0.1:{port}/fail"},
                    "retry": {"max_attempts": 1},
                    "on_failure": alert,
                },
            )
        ).json()
        refused = await call(
            "POST",
            "/v1/jobs",
            json={"name": "x", "schedule": {"every": "PT1H"},
                  "target": {"url": f"http://ops:{PASSWORD}@10.1.2.3/x"}},
        )  # fmt: skip
        assert refused.status_code == 422
        await call("POST", f"/v1/jobs/{job['id']}/trigger")
        await call("POST", f"/v1/jobs/{failing['id']}/trigger")
        ok = (await receiver.wait_for("/ok", 1))[0]
        alerted = (await receiver.wait_for("/alert", 1))[0]

        # each secret reached its own target, decrypted
        assert ok.headers["authorization"] == f"Bearer {HEADER}"
        verify(headers=ok.headers, body=ok.body, secrets=[JOB_SIGNING])
        assert alerted.headers["x-pager-token"] == ALERT_HEADER

        # everything an operator or API user can look at
        for path in (
            "/v1/jobs",
            f"/v1/jobs/{job['id']}",
            f"/v1/jobs/{job['id']}/runs",
            f"/v1/jobs/{failing['id']}/runs",
            "/v1/dead-letters",
            "/v1/audit",
            "/v1/tenants",
            "/v1/tenants/default/webhook-secrets",
            "/metrics",
            "/openapi.json",
        ):
            assert (await call("GET", path)).status_code == 200, path
        runs = (await call("GET", f"/v1/jobs/{failing['id']}/runs")).json()["runs"]
        await call("GET", f"/v1/runs/{runs[0]['id']}")
        # an edit that resends the masked answer
        shown = (await call("GET", f"/v1/jobs/{job['id']}")).json()
        edited = await call(
            "PATCH",
            f"/v1/jobs/{job['id']}",
            json={"target": shown["target"], "on_failure": shown["on_failure"]},
        )
        assert edited.status_code == 200, edited.text
        seen.append(cli(db_url, up.port, "jobs", "list", "--json"))
        seen.append(cli(db_url, up.port, "jobs", "get", job["id"]))
        seen.append(cli(db_url, up.port, "dlq", "list"))
        before = len(receiver.for_path("/ok"))
        await call("POST", f"/v1/jobs/{job['id']}/trigger")
        await receiver.wait_for("/ok", before + 1)
    finally:
        await up.stop()

    logs = b"".join(up.log_tail).decode(errors="replace")
    assert "dead-letter alert delivered" in logs or "alert" in logs  # the logs were captured
    folder = tmp_path
    stored = b"".join(p.read_bytes() for p in folder.iterdir() if p.name.startswith("tw.db"))
    for canary in CANARIES:
        assert not any(canary in text for text in seen), canary
        assert canary not in logs, canary
        assert canary.encode() not in stored, canary
    # the masked edit kept the real values: the second trigger still carried them
    assert receiver.for_path("/ok")[-1].headers["authorization"] == f"Bearer {HEADER}"

    data = data_dir_for(db_url)
    assert stat.S_IMODE((data / "secrets.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((data / "admin.key").stat().st_mode) == 0o600
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
