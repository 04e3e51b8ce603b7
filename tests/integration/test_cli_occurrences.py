"""`tickwork jobs occurrences` and `tickwork jobs explain` against a real HTTP server."""

from __future__ import annotations

from typing import Any

from .test_cli import cli, create_args, server  # noqa: F401 - fixtures


def test_occurrences_and_explain_through_the_api(cli: Any) -> None:  # noqa: F811
    job = cli(*create_args("--every", "PT1H", "--json")).json()
    job_id = job["id"]
    start = job["next_run_at"]
    window = ("--from", start, "--to", start, "--limit", "3")
    listed = cli("jobs", "occurrences", job_id, *window, "--json")
    assert listed.code == 0, listed.err
    assert [(o["at"], o["outcome"]) for o in listed.json()["occurrences"]] == [(start, "scheduled")]
    table = cli("jobs", "occurrences", job_id, "--from", start, "--limit", "2")
    assert table.code == 0, table.err
    assert "scheduled" in table.out
    assert f"tickwork jobs occurrences {job_id} --from" in table.out  # cut at --limit

    explained = cli("jobs", "explain", job_id, "--at", start, "--json").json()
    assert explained["summary"] == f"will fire at {start}"
    assert explained["rule"]["kind"] == "every"
    shown = cli("jobs", "explain", job_id, "--at", start)
    assert shown.code == 0, shown.err
    assert f"will fire at {start}" in shown.out
    assert "every PT1H from" in shown.out


def test_a_backwards_window_exits_2_naming_the_field(cli: Any) -> None:  # noqa: F811
    job_id = cli(*create_args("--every", "PT1H", "--json")).json()["id"]
    bad = cli(
        "jobs",
        "occurrences",
        job_id,
        "--from",
        "2026-01-16T00:00:00Z",
        "--to",
        "2026-01-15T00:00:00Z",
    )
    assert bad.code == 2
    assert bad.err == "error: to (--to): must not be before `from`; swap them\n"
    assert bad.out == ""
