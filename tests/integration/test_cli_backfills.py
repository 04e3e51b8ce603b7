"""`tickwork jobs backfill` and `jobs backfills` against a real HTTP server (the fixtures of
test_cli.py): accepted without waiting, refused with the flag named, listed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.integration.test_cli import NOW, cli, create_args, server  # noqa: F401  (fixtures)
from tickwork.clock import utc_iso


def every_minute(cli: Any) -> str:  # noqa: F811
    job: dict[str, Any] = cli(*create_args("--cron", "* * * * *", "--json")).json()
    return str(job["id"])


def test_backfill_without_waiting_prints_the_accepted_backfill(cli: Any) -> None:  # noqa: F811
    job_id = every_minute(cli)
    window = ["--from", utc_iso(NOW - timedelta(hours=2)), "--to", utc_iso(NOW)]
    made = cli("jobs", "backfill", job_id, *window, "--rate", "5", "--no-wait", "--json")
    assert (made.code, made.err) == (0, "")
    backfill = made.json()
    assert (backfill["state"], backfill["total"], backfill["rate"]) == ("running", 120, 5.0)
    text = cli("jobs", "backfill", job_id, *window, "--no-wait")
    assert text.code == 0
    assert "running, 0 of 120 occurrences enqueued" in text.out
    listed = cli("jobs", "backfills", job_id, "--json").json()
    assert len(listed["backfills"]) == 2
    table = cli("jobs", "backfills", job_id)
    assert table.code == 0
    assert "running" in table.out
    assert "5/s" in table.out


def test_a_range_with_nothing_to_replay_is_completed_at_once(cli: Any) -> None:  # noqa: F811
    job_id = every_minute(cli)
    window = ["--from", utc_iso(NOW - timedelta(seconds=30)), "--to", utc_iso(NOW)]
    done = cli("jobs", "backfill", job_id, *window, "--json")
    assert (done.code, done.json()["state"], done.json()["total"]) == (0, "completed", 0)


def test_a_range_in_the_future_exits_2_naming_the_flag(cli: Any) -> None:  # noqa: F811
    job_id = every_minute(cli)
    window = ["--from", utc_iso(NOW), "--to", utc_iso(NOW + timedelta(hours=1))]
    refused = cli("jobs", "backfill", job_id, *window)
    assert refused.code == 2
    assert "to (--to): backfill replays the past" in refused.err
    unknown = cli("jobs", "backfill", "0" * 32, *window)
    assert unknown.code == 2
