"""The OpenAPI schema says what the API enforces: a schemathesis run against a real server.

A real uvicorn server on 127.0.0.1 serves the app on a SQLite store in a temporary directory;
`schemathesis run` (the command CI users run) tests every route with every check it has
(`--checks all`: no server errors, status codes, content types and headers as documented,
responses matching their schemas, valid data accepted, invalid data refused, methods not in
the schema refused, deleted resources gone, ...) in all of its phases: the schema's examples,
coverage of each keyword's edges, random fuzzing, and stateful sequences that follow the
schema's links (a created job's id into its other routes). schemathesis.toml beside this file
holds the two things the schema cannot say; schemathesis_hooks.py adds one stricter check.

The server counts what reached it, so the test knows the run's size and sees any 5xx for
itself. Every request carries an admin key (`auth_headers`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import httpx
import pytest
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tickwork.api.app import create_app
from tickwork.clock import SystemClock
from tickwork.settings import Settings
from tickwork.store.sqlite import SqliteStore
from tickwork.testing import mint_key

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
MIN_REQUESTS = 1000
MAX_EXAMPLES = 20  # per operation and phase: about 2,500 requests in all, in about 30 s
SEED = 19  # a fixed seed: a failure here reproduces; change it to explore further


@dataclass
class Tally:
    """What reached the server: requests by route template and statuses."""

    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)


class Counting:
    def __init__(self, app: ASGIApp, tally: Tally) -> None:
        self.app = app
        self.tally = tally

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/openapi.json":
            await self.app(scope, receive, send)
            return

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                self.tally.requests += 1
                self.tally.statuses[status] += 1
                if status >= 500:
                    self.tally.server_errors.append(f"{scope['method']} {scope['path']}: {status}")
            await send(message)

        await self.app(scope, receive, counting_send)


@dataclass(frozen=True)
class Served:
    url: str
    tally: Tally
    key: str  # an admin key every generated request carries
    key_id: str  # its id, which the hooks keep the run from revoking


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The API on SQLite behind a real uvicorn, in a thread with its own event loop."""
    db = tmp_path_factory.mktemp("schemathesis") / "tickwork.db"
    tally = Tally()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    async def serve() -> None:
        store = SqliteStore(db)
        await store.open()
        try:
            holder["key"] = await mint_key(store)
            holder["key_id"] = (await store.list_keys())[0].id
            # No per-key limit: thousands of requests in seconds are the point here.
            app = create_app(store=store, clock=SystemClock(), settings=Settings(api_key_rate=0))
            # uvicorn binds the port itself: on a socket handed over with `sockets=` each
            # answer took ~45 ms here instead of ~3 ms.
            config = uvicorn.Config(
                Counting(app, tally),
                host="127.0.0.1",
                port=0,
                log_level="warning",
                lifespan="off",
                access_log=False,
            )
            server = uvicorn.Server(config)
            holder["server"] = server
            ready.set()
            await server.serve()
        finally:
            await store.close()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    ready.wait(10)
    server = holder["server"]
    for _ in range(400):
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.025)  # uvicorn starting in its thread: nothing to await
    assert server.started, "the test server did not start"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Served(
            url=f"http://127.0.0.1:{port}", tally=tally, key=holder["key"], key_id=holder["key_id"]
        )
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def auth_headers(served: Served) -> dict[str, str]:
    """Headers every generated request carries: an admin key, so every route is reached."""
    return {"Authorization": f"Bearer {served.key}"}


def schemathesis_command() -> list[str]:
    script = Path(sys.executable).parent / "schemathesis"
    if script.exists():
        return [str(script)]
    found = shutil.which("schemathesis")
    if found is None:
        pytest.fail("schemathesis is not installed: uv sync installs the dev dependencies")
    return [found]


@pytest.mark.timeout(300)
def test_every_route_fuzzed_by_schemathesis_with_every_check(
    served: Served, auth_headers: dict[str, str], tmp_path: Path
) -> None:
    headers = [arg for name, value in auth_headers.items() for arg in ("-H", f"{name}: {value}")]
    command = [
        *schemathesis_command(),
        "--config-file",
        str(HERE / "schemathesis.toml"),
        "--no-color",
        "run",
        f"{served.url}/openapi.json",
        "--checks",
        "all",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        # One worker: hypothesis reads lambda sources with `ast`, which CPython 3.11 does not
        # allow from two threads at once ("AST constructor recursion depth mismatch").
        "--workers",
        "1",
        "--wait-for-schema",
        "30",
        "--continue-on-failure",
        "--generation-database",
        "none",
        "--request-timeout",
        "10",
        "--report",
        "junit",
        "--report-dir",
        str(tmp_path),
        *headers,
    ]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.integration.schemathesis_hooks",
        "TICKWORK_FUZZ_KEY_ID": served.key_id,
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # in tmp_path: schemathesis keeps a cache (.schemathesis/) in its working directory
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280, check=False
    )
    report = run.stdout[-12000:] + run.stderr[-4000:]
    tally = served.tally
    assert tally.server_errors == [], report
    assert run.returncode == 0, report
    assert tally.requests >= MIN_REQUESTS, f"only {tally.requests} requests\n{report}"
    tested = _operations_in(next(tmp_path.glob("junit*.xml")))
    spec = httpx.get(f"{served.url}/openapi.json").json()
    every = {f"{method.upper()} {path}" for path, item in spec["paths"].items() for method in item}
    assert every <= tested, f"not tested: {sorted(every - tested)}"


def _operations_in(junit: Path) -> set[str]:
    """The operations the JUnit report has a passing test case for."""
    cases = ElementTree.parse(junit).getroot().iter("testcase")
    return {
        case.get("name", "")
        for case in cases
        if not any(child.tag in ("failure", "error", "skipped") for child in case)
    }
