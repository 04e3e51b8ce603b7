"""The CLI against a real HTTP server (uvicorn in a thread, in-memory store, manual clock)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tickwork.api.app import create_app
from tickwork.cli import run
from tickwork.clock import ManualClock
from tickwork.domain.runs import Fire, RunOutcome, RunStatus
from tickwork.settings import Settings
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@dataclass
class Server:
    url: str
    clock: ManualClock
    store: MemoryStore
    key: str  # an admin key: the CLI calls send it (--api-key)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    store = MemoryStore()
    asyncio.run(store.open())
    clock = ManualClock(NOW)
    key = asyncio.run(mint_key(store, clock=clock))
    app = create_app(store=store, clock=clock, settings=Settings())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    http = uvicorn.Server(config)
    thread = threading.Thread(target=http.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    _wait_until_up(url, thread)
    try:
        yield Server(url=url, clock=clock, store=store, key=key)
    finally:
        http.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _wait_until_up(url: str, thread: threading.Thread) -> None:
    for _ in range(200):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if not thread.is_alive():
            break
        threading.Event().wait(0.025)
    raise RuntimeError("the test server did not start")


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], server: Server) -> Any:
    def invoke(*args: str, api: bool = True) -> Result:
        argv = [*args, "--api", server.url] if api else list(args)
        code = run(["--api-key", server.key, *argv])
        captured = capsys.readouterr()
        return Result(code=code, out=captured.out, err=captured.err)

    return invoke


def create_args(*extra: str) -> list[str]:
    return ["jobs", "create", "--name", "nightly", "--url", "https://example.com/hook", *extra]


# -- jobs -------------------------------------------------------------------------------------


def test_create_with_json_prints_exactly_the_api_job(cli: Any) -> None:
    args = ["--cron", "0 2 * * *", "--tz", "Europe/Berlin", "--header", "X-Team: data"]
    result = cli(*create_args(*args, "--body", '{"k": [1, 2]}', "--json"))
    assert (result.code, result.err) == (0, "")
    job = result.json()
    assert job["next_run_at"] == "2026-01-16T01:00:00Z"
    assert job["schedule"]["cron"] == "0 2 * * *"
    assert job["target"]["headers"] == {"X-Team": "data"}
    assert job["target"]["body"] == {"k": [1, 2]}


def test_create_every_and_at_and_with_options(cli: Any) -> None:
    cli("tenants", "create", "acme")  # exit 2 if another test made it already: either way
    every = cli(*create_args("--every", "30", "--json")).json()
    assert every["schedule"]["every"] == "PT30S"
    at = cli(*create_args("--at", "2026-12-24T18:00:00Z", "--method", "put", "--json")).json()
    assert (at["next_run_at"], at["target"]["method"]) == ("2026-12-24T18:00:00Z", "PUT")
    options = [
        "--every", "PT1M", "--start-at", "2026-02-01T00:00:00Z", "--end-at",
        "2026-03-01T00:00:00Z", "--misfire", "skip", "--timeout", "PT3S", "--tenant", "acme",
        "--overlap", "buffer_one", "--max-runs", "3",
    ]  # fmt: skip
    job = cli(*create_args(*options, "--json")).json()
    assert (job["overlap"], job["max_runs"]) == ("buffer_one", 3)
    assert job["schedule"]["start_at"] == "2026-02-01T00:00:00Z"
    assert job["schedule"]["misfire"] == "skip"
    assert (job["target"]["timeout"], job["tenant"]) == ("PT3S", "acme")
    assert job["next_run_at"] == "2026-02-01T00:00:00Z"


def test_create_with_a_catchup_window_and_get_shows_it(cli: Any) -> None:
    args = ["--every", "PT1M", "--misfire", "fire_all", "--catchup-window", "PT6H", "--json"]
    job = cli(*create_args(*args)).json()
    assert (job["schedule"]["misfire"], job["schedule"]["catchup_window"]) == ("fire_all", "PT6H")
    shown = cli("jobs", "get", job["id"])
    assert shown.code == 0
    assert "catch-up window" in shown.out
    assert "PT6H" in shown.out
    other = cli(*create_args("--every", "PT1M", "--json")).json()  # coalesce: the default P1D
    assert "P1D (unused: not fire_all)" in cli("jobs", "get", other["id"]).out


def test_create_with_a_jitter_or_a_window_and_get_shows_both_instants(cli: Any) -> None:
    job = cli(*create_args("--cron", "0 * * * *", "--jitter", "PT10M", "--json")).json()
    assert job["schedule"]["jitter"] == "PT10M"
    assert job["next_scheduled_for"] == "2026-01-15T13:00:00Z"
    assert job["next_run_at"] != job["next_scheduled_for"]  # this id draws a delay
    shown = cli("jobs", "get", job["id"]).out
    assert "jitter PT10M" in shown
    assert f"{job['next_run_at']} (occurrence 2026-01-15T13:00:00Z)" in shown
    urgent = cli(*create_args("--every", "PT1H", "--priority", "9", "--json")).json()
    assert urgent["priority"] == 9
    assert "priority" in cli("jobs", "get", urgent["id"]).out
    windowed = cli(*create_args("--every", "PT1H", "--window", "300", "--json")).json()
    assert windowed["schedule"]["window"] == "PT5M"
    assert "window PT5M (least loaded second)" in cli("jobs", "get", windowed["id"]).out


def test_create_from_a_file(cli: Any, tmp_path: Path) -> None:
    body = {
        "name": "from-file",
        "schedule": {"at": "2026-06-01T00:00:00Z"},
        "target": {"url": "https://example.com:9/x"},
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(body))
    job = cli("jobs", "create", "--file", str(path), "--json").json()
    assert (job["name"], job["next_run_at"]) == ("from-file", "2026-06-01T00:00:00Z")


def test_create_prints_a_readable_table(cli: Any) -> None:
    result = cli(*create_args("--cron", "0 2 * * *"))
    assert result.code == 0
    for text in ("nightly", "cron 0 2 * * * (UTC)", "POST https://example.com/hook", "scheduled"):
        assert text in result.out
    assert not result.out.lstrip().startswith("{")


def test_list_get_pause_resume_trigger_runs_delete(cli: Any) -> None:
    job = cli(*create_args("--cron", "0 * * * *", "--name", "lifecycle", "--json")).json()
    job_id = job["id"]

    listed = cli("jobs", "list", "--name-prefix", "lifecycle", "--json").json()
    assert [j["id"] for j in listed["jobs"]] == [job_id]
    table = cli("jobs", "list", "--name-prefix", "lifecycle")
    assert job_id in table.out
    assert "lifecycle" in table.out

    assert cli("jobs", "get", job_id, "--json").json() == job
    assert job_id in cli("jobs", "get", job_id).out

    paused = cli("jobs", "pause", job_id, "--note", "vendor outage", "--json").json()
    assert (paused["state"], paused["pause_note"]) == ("paused", "vendor outage")
    assert "vendor outage" in cli("jobs", "get", job_id).out
    assert "paused" in cli("jobs", "list", "--state", "paused").out
    resumed = cli("jobs", "resume", job_id)
    assert (resumed.code, "scheduled" in resumed.out) == (0, True)

    run_ = cli("jobs", "trigger", job_id, "--json").json()
    assert (run_["origin"], run_["status"]) == ("manual", "pending")
    triggered = cli("jobs", "trigger", job_id)
    assert "pending" in triggered.out

    # Two triggers at the same instant (the clock stands still here) are two runs, not one.
    runs = cli("jobs", "runs", job_id, "--json").json()
    assert [r["id"] for r in runs["runs"]] == [run_["id"] + 1, run_["id"]]
    assert "manual" in cli("jobs", "runs", job_id).out

    assert cli("jobs", "delete", job_id, "--json").out == ""
    gone = cli("jobs", "get", job_id)
    assert gone.code == 2
    assert "does not exist" in gone.err


def test_list_pages_with_a_hint(cli: Any) -> None:
    for n in range(3):
        cli(*create_args("--every", "60", "--name", f"paged-{n}", "--json"))
    first = cli("jobs", "list", "--name-prefix", "paged-", "--limit", "2")
    assert "more: tickwork jobs list --after" in first.out
    page = cli("jobs", "list", "--name-prefix", "paged-", "--limit", "2", "--json").json()
    rest = cli("jobs", "list", "--name-prefix", "paged-", "--after", page["next_after"], "--json")
    assert [j["name"] for j in rest.json()["jobs"]] == ["paged-2"]


def test_create_with_a_retry_policy(cli: Any) -> None:
    retry = ["--max-attempts", "3", "--backoff", "0", "--max-backoff", "PT1M"]
    job = cli(*create_args("--every", "60", *retry, "--json")).json()
    assert job["retry"] == {
        "max_attempts": 3,
        "backoff": "PT0S",
        "max_backoff": "PT1M",
        "multiplier": 2.0,
    }
    assert cli(*create_args("--every", "60", "--json")).json()["retry"]["max_attempts"] == 5
    table = cli(*create_args("--every", "60", "--max-attempts", "2"))
    assert "2 attempt(s), backoff PT1S x2 up to PT5M" in table.out


# -- runs and dead letters --------------------------------------------------------------------

_instants = itertools.count(1)


def dead_letter(server: Server, job_id: str) -> int:
    """Play a worker: a first attempt gets a 503 and is retried, the second one fails for good."""

    async def fail_twice() -> int:
        store, now = server.store, NOW + timedelta(seconds=next(_instants))
        run = await store.add_manual_run(job_id, now=now)
        for status in (RunStatus.PENDING, RunStatus.FAILED):
            leased = await store.lease_runs(now=now, owner="t", lease_until=now, limit=1000)
            (fire,) = [f for f in leased if f.run_id == run.id]
            retry_at = now if status is RunStatus.PENDING else None
            outcome = RunOutcome(
                run_id=run.id, job_id=job_id, attempt=fire.attempt, fence_token=fire.fence_token,
                status=status, started_at=now, finished_at=now, http_status=503,
                error="HTTP 503", retry_at=retry_at, worker="worker-1",
            )  # fmt: skip
            assert await store.finish_runs([outcome]) == 1
        return run.id

    return asyncio.run(fail_twice())


@pytest.fixture
def job_id(cli: Any) -> str:
    job_id: str = cli(*create_args("--cron", "0 2 * * *", "--json")).json()["id"]
    return job_id


def test_runs_show_lists_the_attempts(cli: Any, server: Server, job_id: str) -> None:
    run_id = dead_letter(server, job_id)
    shown = cli("runs", "show", str(run_id), "--json").json()
    assert (shown["id"], shown["status"], shown["last_error"]) == (run_id, "failed", "HTTP 503")
    assert [a["status"] for a in shown["attempts"]] == ["retry", "failed"]
    headers = {"Authorization": f"Bearer {server.key}"}
    assert httpx.get(f"{server.url}/v1/runs/{run_id}", headers=headers).json() == shown
    table = cli("runs", "show", str(run_id))
    assert table.code == 0
    for text in ("dead_lettered", "2 attempt(s)", "retry", "worker-1", "HTTP 503"):
        assert text in table.out
    assert cli("dlq", "show", str(run_id)).out == table.out


def test_runs_show_a_dead_workers_attempt_as_lost_and_the_next_as_running(
    cli: Any, server: Server, job_id: str
) -> None:
    # Leased by a worker that died: its lease ended before the server's clock (NOW). Leased
    # by id and fence, so that no other test's run is touched (the server is shared).
    start = NOW - timedelta(seconds=20)

    async def trigger_and_lease() -> Fire | None:
        run = await server.store.add_manual_run(job_id, now=start)
        until = start + timedelta(seconds=5)
        return await server.store.lease_run(
            run.id, run.fence_token, owner="host-a:41", lease_until=until, now=start
        )

    dead = asyncio.run(trigger_and_lease())
    assert dead is not None
    run_id = dead.run_id
    shown = cli("runs", "show", str(run_id))
    for text in ("retrying", "1 attempt(s)", "lost", "host-a:41", "worker stopped heartbeating"):
        assert text in shown.out, text
    assert "retrying" in cli("jobs", "runs", job_id).out

    # Another worker takes it over: the run is running there, after the lost attempt.
    until = NOW + timedelta(minutes=1)
    taken = asyncio.run(
        server.store.lease_run(
            run_id, dead.fence_token, owner="host-b:7", lease_until=until, now=NOW
        )
    )
    assert taken is not None
    detail = cli("runs", "show", str(run_id), "--json").json()
    assert (detail["state"], detail["worker"], detail["attempt"]) == ("running", "host-b:7", 2)
    assert [(a["status"], a["worker"]) for a in detail["attempts"]] == [("lost", "host-a:41")]
    assert "running on host-b:7" in cli("jobs", "runs", job_id).out


def test_dlq_list_pages_and_filters_by_job(cli: Any, server: Server, job_id: str) -> None:
    made = [dead_letter(server, job_id) for _ in range(3)]
    page = cli("dlq", "list", "--job", job_id, "--json").json()
    assert [r["id"] for r in page["dead_letters"]] == made[::-1]
    assert page["next_before"] is None
    first = cli("dlq", "list", "--job", job_id, "--limit", "2")
    assert f"more: tickwork dlq list --job {job_id} --before {made[1]}" in first.out
    assert "HTTP 503" in first.out
    rest = cli("dlq", "list", "--job", job_id, "--before", str(made[1]), "--json").json()
    assert [r["id"] for r in rest["dead_letters"]] == [made[0]]
    assert str(made[-1]) in cli("dlq", "list").out


def test_dlq_redrive_by_id_and_all_of_a_job(cli: Any, server: Server, job_id: str) -> None:
    one, two, three = (dead_letter(server, job_id) for _ in range(3))
    assert cli("dlq", "redrive", str(one), "--json").json() == {"redriven": 1}
    assert cli("runs", "show", str(one), "--json").json()["status"] == "pending"
    assert cli("dlq", "redrive", str(two)).out == "1 dead letter(s) redriven\n"
    again = cli("dlq", "redrive", str(one))
    assert (again.code, again.out) == (2, "0 dead letter(s) redriven\n")
    assert again.err.startswith(f"error: run {one} is not a dead letter")
    assert again.err.endswith("(1 of 1 not redriven)\n")
    assert cli("dlq", "redrive", "--all", "--job", job_id, "--json").json() == {"redriven": 1}
    assert cli("dlq", "list", "--job", job_id, "--json").json()["dead_letters"] == []
    assert three not in [r["id"] for r in cli("dlq", "list", "--json").json()["dead_letters"]]


def test_dlq_redrive_of_some_ids_goes_on_past_a_refused_one(
    cli: Any, server: Server, job_id: str
) -> None:
    run_id = dead_letter(server, job_id)
    result = cli("dlq", "redrive", "424242", str(run_id), str(run_id), "--json")
    assert (result.code, result.json()) == (2, {"redriven": 1})
    assert "run 424242 is not a dead letter" in result.err
    assert result.err.count("\n") == 1


def test_dlq_purge_by_id_and_all(cli: Any, server: Server, job_id: str) -> None:
    one, two = dead_letter(server, job_id), dead_letter(server, job_id)
    assert cli("dlq", "purge", str(one), "--json").json() == {"purged": 1}
    assert cli("runs", "show", str(one), "--json").json()["dead_lettered_at"] is None
    assert cli("dlq", "purge", "--all", "--job", job_id).out == "1 dead letter(s) purged\n"
    assert cli("runs", "show", str(two), "--json").json()["status"] == "failed"
    dead_letter(server, job_id)
    everything = cli("dlq", "purge", "--all", "--json")
    assert (everything.code, everything.json()["purged"] >= 1) == (0, True)
    assert cli("dlq", "list", "--json").json() == {"dead_letters": [], "next_before": None}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["dlq", "redrive", "1", "--all"], "give RUN_ID... or --all, not both"),
        (["dlq", "purge", "1", "2", "--all", "--job", "x"], "not both"),
        (["dlq", "redrive"], "give the ids of the runs to redrive, or --all"),
        (["dlq", "purge"], "give the ids of the runs to purge, or --all"),
        (["dlq", "purge", "--job", "x"], "--job goes with --all"),
        (["dlq", "redrive", "5", "--job", "x"], "--job goes with --all"),
        (["dlq", "redrive", "abc"], "RUN_ID"),
        (["dlq", "purge", "0"], "RUN_ID"),
        (["runs", "show", "abc"], "RUN_ID"),
        (["runs", "show", "0"], "RUN_ID"),
        (["dlq", "list", "--limit", "0"], "limit (--limit)"),
        (["dlq", "list", "--job", "nosuchjob"], "job 'nosuchjob' does not exist"),
        (["runs", "show", "424242"], "run '424242' does not exist"),
        (["dlq", "show", "424242"], "run '424242' does not exist"),
    ],
)
def test_dlq_and_runs_bad_input_exits_2_with_one_line(
    cli: Any, args: list[str], needle: str
) -> None:
    result = cli(*args)
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: ")
    assert result.err.count("\n") == 1
    assert needle in result.err


@pytest.mark.parametrize(
    "args",
    [["runs", "show", "1"], ["dlq", "list"], ["dlq", "redrive", "--all"], ["dlq", "purge", "1"]],
)
def test_dlq_and_runs_unreachable_api_exits_1(cli: Any, args: list[str]) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    result = cli(*args, "--api", dead, api=False)
    assert (result.code, result.out) == (1, "")
    assert "cannot reach the tickwork API" in result.err


# -- preview ----------------------------------------------------------------------------------


def test_preview_json_is_exactly_the_utc_instants(cli: Any) -> None:
    args = ["preview", "--cron", "30 2 * * *", "--tz", "Europe/Berlin"]
    result = cli(*args, "--after", "2026-03-28T00:00:00Z", "--count", "3", "--json", api=False)
    assert result.code == 0
    assert result.err == ""
    assert result.out == (
        '["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]\n'
    )


def test_preview_table_shows_local_times_and_the_dst_note(cli: Any) -> None:
    args = ["preview", "--cron", "30 2 * * *", "--tz", "Europe/Berlin"]
    result = cli(*args, "--after", "2026-03-28T00:00:00Z", "--count", "3", api=False)
    assert result.code == 0
    for text in ("2026-03-29T01:00:00Z", "2026-03-29T03:00:00+02:00", "02:30", "not exist"):
        assert text in result.out


def test_preview_of_an_interval_within_bounds_and_max_runs(cli: Any) -> None:
    args = ["preview", "--every", "PT30M", "--start-at", "2026-01-15T13:00:00Z"]
    result = cli(*args, "--after", "2026-01-15T12:00:00Z", "--max-runs", "2", "--json", api=False)
    assert (result.code, result.err) == (0, "")
    assert result.json() == ["2026-01-15T13:00:00Z", "2026-01-15T13:30:00Z"]
    table = cli(*args, "--end-at", "2026-01-15T14:00:00Z", "--count", "5", api=False)
    assert table.code == 0
    for text in ("every PT30M", "2026-01-15T14:00:00Z", "ends (end_at)"):
        assert text in table.out
    anchored = cli("preview", "--every", "90", "--anchor", "2026-01-01T00:00:00Z", "--json",
                   "--after", "2026-01-01T00:00:00Z", "--count", "2", api=False)  # fmt: skip
    assert anchored.json() == ["2026-01-01T00:00:00Z", "2026-01-01T00:01:30Z"]


def test_preview_of_a_one_shot(cli: Any) -> None:
    result = cli("preview", "--at", "2026-03-01T09:00:00+01:00", "--count", "3", api=False)
    assert result.code == 0
    assert "2026-03-01T08:00:00Z" in result.out
    assert "ends (one_shot)" in result.out


def test_jobs_preview_through_the_api(cli: Any, server: Server) -> None:
    at = (server.clock.now() + timedelta(hours=1)).isoformat()
    job = cli(*create_args("--every", "PT10M", "--start-at", at, "--json")).json()
    answer = cli("jobs", "preview", job["id"], "--count", "2", "--json").json()
    assert answer["state"] == "scheduled"
    assert [f["utc"] for f in answer["fires"]] == [
        "2026-01-15T13:00:00Z",
        "2026-01-15T13:10:00Z",
    ]
    later = cli("jobs", "preview", job["id"], "--after", "2026-01-15T13:00:00Z", "--json")
    assert later.json()["fires"][0]["utc"] == "2026-01-15T13:10:00Z"
    table = cli("jobs", "preview", job["id"], "--count", "2")
    assert table.code == 0
    assert f"next 2 fires of job {job['id']}" in table.out
    assert "2026-01-15T13:10:00Z" in table.out


def test_jobs_preview_bad_input_exits_2_naming_the_flag(cli: Any) -> None:
    missing = cli("jobs", "preview", "f" * 32)
    assert missing.code == 2
    assert "does not exist" in missing.err
    job = cli(*create_args("--every", "PT10M", "--json")).json()
    bad = cli("jobs", "preview", job["id"], "--count", "0")
    assert bad.code == 2
    assert "--count" in bad.err


def test_load_shows_the_planned_herd_and_its_shape(cli: Any, server: Server) -> None:
    cli("tenants", "create", "herd")  # exit 2 if it exists: either way
    at = (server.clock.now() + timedelta(minutes=1)).isoformat()
    for _ in range(3):
        made = cli(*create_args("--every", "PT1M", "--start-at", at, "--tenant", "herd"))
        assert made.code == 0, made.err
    start = server.clock.now().isoformat()
    end = (server.clock.now() + timedelta(minutes=3)).isoformat()
    window = ["--from", start, "--to", end, "--tenant", "herd"]
    answer = cli("load", *window, "--json").json()
    assert (answer["total"], answer["peak"]) == (6, 3)
    table = cli("load", *window, "--bucket", "60")
    assert table.code == 0, table.err
    assert "total 6  peak 3/bucket" in table.out
    # Three one-minute buckets: none, 3, 3 fires: one column each, the empty one blank.
    assert "| ██|" in table.out
    bad = cli("load", "--from", start, "--to", start)
    assert bad.code == 2
    assert "to" in bad.err


# -- bad input and failures -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["preview", "--cron", "0 0 30 2 *"], "--cron"),
        (["preview", "--cron", "* * * * *", "--tz", "Mars/Base"], "--tz"),
        (["preview", "--cron", "* * * * *", "--count", "0"], "--count"),
        (["preview", "--cron", "* * * * *", "--count", "many"], "--count"),
        (["preview", "--cron", "* * * * *", "--after", "2026-01-01T00:00:00"], "add Z"),
        (["preview", "--cron", "* * * * *", "--after", "soon"], "--after"),
        (["preview"], "--cron/--every/--at"),
        (["preview", "--every", "PT1M", "--at", "2026-01-01T00:00:00Z"], "exactly one"),
        (["preview", "--every", "PT1M", "--tz", "Europe/Berlin"], "--tz"),
        (
            ["preview", "--at", "2026-01-01T00:00:00Z", "--anchor", "2026-01-01T00:00:00Z"],
            "--anchor",
        ),
        (["preview", "--every", "soon"], "--every"),
        (["preview", "--every", "PT1M", "--max-runs", "0"], "--max-runs"),
        (["preview", "--every", "PT1M", "--anchor", "yesterday"], "--anchor"),
        (["preview", "--at", "2026-01-01T00:00:00"], "add Z"),
        (["preview", "--at", "9999-01-01T00:00:00Z"], "--at"),
        (
            [
                "preview",
                "--every",
                "PT1M",
                "--start-at",
                "2026-02-01T00:00:00Z",
                "--end-at",
                "2026-01-01T00:00:00Z",
            ],
            "--end-at",
        ),
        (["preview", "--cron", "* * * * *", "--bogus"], "--bogus"),
        (["nosuchcommand"], "nosuchcommand"),
    ],
)
def test_local_bad_input_exits_2_with_one_line(cli: Any, args: list[str], needle: str) -> None:
    result = cli(*args, api=False)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith("error: ")
    assert result.err.count("\n") == 1
    assert needle in result.err


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--cron", "0 2 * * FOO"], "schedule.cron (--cron)"),
        (["--cron", "* * * * *", "--tz", "Nowhere"], "schedule.timezone (--tz)"),
        ([], "schedule (--cron/--every/--at)"),
        (["--every", "fast"], "schedule.every (--every)"),
        (["--at", "2026-12-24T18:00:00"], "add Z"),
        (["--every", "30", "--header", "no-colon"], "--header"),
        (["--every", "30", "--body", "{not json"], "--body"),
        (["--every", "30", "--max-attempts", "0"], "retry.max_attempts (--max-attempts)"),
        (["--every", "30", "--backoff", "soon"], "retry.backoff (--backoff)"),
        (["--every", "30", "--backoff", "PT10M"], "retry.max_backoff (--max-backoff)"),
        (["--every", "30", "--max-attempts", "many"], "--max-attempts"),
        (["--every", "30", "--overlap", "sometimes"], "overlap (--overlap)"),
        (["--every", "30", "--max-runs", "0"], "max_runs (--max-runs)"),
        (
            ["--every", "30", "--catchup-window", "PT0S"],
            "schedule.catchup_window (--catchup-window)",
        ),
        (["--every", "30", "--jitter", "P2D"], "schedule.jitter (--jitter)"),
        (["--every", "30", "--priority", "10"], "priority (--priority)"),
        (["--every", "30", "--jitter", "5", "--window", "5"], "schedule.window (--window)"),
    ],
)
def test_api_bad_input_exits_2_naming_the_flag(cli: Any, extra: list[str], needle: str) -> None:
    result = cli(*create_args(*extra))
    assert result.code == 2
    assert needle in result.err
    assert result.err.count("\n") == 1


def test_bad_url_names_the_flag(cli: Any) -> None:
    args = ["jobs", "create", "--name", "x", "--every", "30", "--url", "file:///etc/passwd"]
    result = cli(*args)
    assert result.code == 2
    assert "target.url (--url)" in result.err


@pytest.mark.parametrize(
    "env",
    [{"TICKWORK_LEASE_TTL_MS": "3000"}, {"TICKWORK_LEASE_HEARTBEAT_MS": "2000"}],
)
def test_a_lease_that_cannot_outlive_two_missed_heartbeats_is_refused(
    cli: Any, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = cli("worker", api=False)
    assert (result.code, result.out, result.err.count("\n")) == (2, "", 1)
    assert result.err.startswith("error: ")
    for needle in ("lease_ttl_ms", "lease_heartbeat_ms", "raise TICKWORK_LEASE_TTL_MS"):
        assert needle in result.err


@pytest.mark.parametrize(
    ("value", "why"),
    [("-1", "greater than or equal to 0"), ("fast", "valid number"), ("inf", "finite")],
)
def test_a_bad_fire_ceiling_stops_the_scheduler_with_a_clear_error(
    cli: Any, monkeypatch: pytest.MonkeyPatch, value: str, why: str
) -> None:
    monkeypatch.setenv("TICKWORK_FIRE_CEILING", value)
    result = cli("scheduler", api=False)
    assert (result.code, result.out, result.err.count("\n")) == (2, "", 1)
    assert result.err.startswith("error: fire_ceiling: ")
    assert why in result.err


def test_file_and_flags_do_not_mix(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text("{}")
    assert "not both" in cli("jobs", "create", "--file", str(path), "--name", "x").err
    both = cli("jobs", "create", "--file", str(path), "--max-attempts", "3")
    assert "not both (--max-attempts)" in both.err
    path.write_text("[1]")
    assert "JSON object" in cli("jobs", "create", "--file", str(path)).err
    missing = cli("jobs", "create", "--file", str(tmp_path / "nope.json"))
    assert (missing.code, "cannot read" in missing.err) == (2, True)


def test_unreachable_api_exits_1(cli: Any) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    result = cli("jobs", "list", "--api", dead, api=False)
    assert result.code == 1
    assert result.err == (
        f"error: cannot reach the tickwork API at {dead} (is `tickwork up` running?)\n"
    )


# -- the installed entry point ----------------------------------------------------------------


def _tickwork(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "tickwork"
    command = [str(script)] if script.exists() else [sys.executable, "-c", _MAIN]
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


_MAIN = "import sys; from tickwork.cli import main; sys.argv[0] = 'tickwork'; main()"


def test_entry_point_bad_input_has_no_traceback() -> None:
    result = _tickwork("preview", "--cron", "0 0 30 2 *", "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: schedule.cron (--cron):")


def test_entry_point_preview_json(server: Server) -> None:
    args = ["--cron", "0 12 * * *", "--after", "2026-01-01T00:00:00Z", "--count", "2", "--json"]
    result = _tickwork("preview", *args)
    assert result.returncode == 0
    assert json.loads(result.stdout) == ["2026-01-01T12:00:00Z", "2026-01-02T12:00:00Z"]


def test_entry_point_talks_to_the_api_from_the_environment(server: Server) -> None:
    os.environ["TICKWORK_API_URL"] = server.url
    os.environ["TICKWORK_API_KEY"] = server.key
    try:
        result = _tickwork("jobs", "list", "--limit", "1", "--json")
    finally:
        del os.environ["TICKWORK_API_URL"]
        del os.environ["TICKWORK_API_KEY"]
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)) == {"jobs", "next_after"}


def test_entry_point_help_lists_the_commands() -> None:
    result = _tickwork("--help")
    assert result.returncode == 0
    for command in ("up", "db", "jobs", "runs", "dlq", "preview"):
        assert command in result.stdout


def test_task_jobs_are_created_and_shown(cli: Any) -> None:
    base = ["jobs", "create", "--name", "build", "--every", "PT1H"]
    job = cli(*base, "--task", "reports.build", "--args", '{"day": 1}', "--json").json()
    assert job["target"] == {
        "type": "task",
        "name": "reports.build",
        "args": {"day": 1},
        "timeout": "PT1M",
    }
    shown = cli("jobs", "get", job["id"])
    assert shown.code == 0
    assert "task reports.build" in shown.out
    both = cli(*base, "--task", "x", "--url", "https://example.com/hook")
    neither = cli(*base)
    for result in (both, neither):
        assert result.code == 2
        assert "give one of --url (a webhook) or --task (a Python task)" in result.err


def test_tenants_through_the_cli(cli: Any) -> None:
    made = cli("tenants", "create", "cli-tenant", "--json")
    assert made.code == 0, made.err
    assert made.json()["name"] == "cli-tenant"
    again = cli("tenants", "create", "cli-tenant")
    assert (again.code, "already exists" in again.err) == (2, True)
    listed = cli("tenants", "list", "--json").json()["tenants"]
    assert "cli-tenant" in [t["name"] for t in listed]
    assert cli("tenants", "show", "cli-tenant").code == 0
    assert cli("tenants", "delete", "cli-tenant").code == 0
    gone = cli("tenants", "show", "cli-tenant")
    assert (gone.code, "does not exist" in gone.err) == (2, True)


def test_a_tenants_destination_lists_through_the_cli(cli: Any) -> None:
    assert cli("tenants", "create", "cli-egress").code == 0
    made = cli(
        "tenants", "egress", "set", "cli-egress",
        "--allow", "*.Example.com", "--allow", "api.partner.io", "--deny", "bad.example.com",
        "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    lists = {"allow": ["*.example.com", "api.partner.io"], "deny": ["bad.example.com"]}
    assert made.json()["egress"] == lists
    shown = cli("tenants", "egress", "show", "cli-egress")
    assert shown.code == 0
    assert "*.example.com" in shown.out
    assert "bad.example.com" in shown.out
    bad = cli("tenants", "egress", "set", "cli-egress", "--allow", "a.*.example.com")
    assert bad.code == 2
    assert "egress.allow[0]" in bad.err
    assert "'*' may only start" in bad.err
    nothing = cli("tenants", "egress", "set", "cli-egress")
    assert (nothing.code, "--allow" in nothing.err) == (2, True)
    cleared = cli("tenants", "egress", "clear", "cli-egress", "--json")
    assert cleared.json()["egress"] == {"allow": [], "deny": []}
    assert cli("tenants", "delete", "cli-egress").code == 0


def test_keys_are_made_with_database_access_and_work_against_the_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'k.db'}"
    assert run(["keys", "create", "--name", "ops", "--role", "admin", "--db", db, "--json"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert set(created) == {
        "id", "key", "prefix", "name", "role", "tenant", "created_at", "expires_at",
    }  # fmt: skip
    assert created["key"].startswith(created["prefix"])
    bad = run(["keys", "create", "--name", "t", "--role", "tenant-read", "--db", db])
    assert bad == 2
    assert "tenant" in capsys.readouterr().err
    assert run(["keys", "list", "--db", db, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)["keys"]
    assert (listed["id"], listed["revoked_at"]) == (created["id"], None)
    assert "key" not in listed
    assert run(["keys", "revoke", created["id"], "--db", db]) == 0
    assert created["prefix"] in capsys.readouterr().out
    assert run(["keys", "list", "--db", db, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["keys"][0]["revoked_at"] is not None
    assert run(["keys", "revoke", "key_nope", "--db", db]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_resume_catch_up_starts_where_the_job_was_paused(cli: Any, server: Server) -> None:
    caught_up = cli(*create_args("--every", "60", "--name", "catch-up", "--json")).json()
    from_now = cli(*create_args("--every", "60", "--name", "from-now", "--json")).json()
    for job in (caught_up, from_now):
        assert cli("jobs", "pause", job["id"]).code == 0
    before = server.clock.now()
    server.clock.advance(timedelta(minutes=10, seconds=30))
    try:
        again = cli("jobs", "resume", caught_up["id"], "--catch-up", "--json").json()
        later = cli("jobs", "resume", from_now["id"], "--json").json()
    finally:
        server.clock.set(before)  # the server is shared by this module's tests
    assert again["next_run_at"] == caught_up["next_run_at"]  # the misfire policy decides
    skipped_to = datetime.fromisoformat(later["next_run_at"].replace("Z", "+00:00"))
    assert skipped_to > before + timedelta(minutes=10)
