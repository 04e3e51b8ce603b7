"""`tickwork jobs create --dst-gap/--dst-repeat` against a real HTTP server (the fixtures of
test_cli.py): the choices reach the job's `schedule.dst` and change its fires; bad ones exit 2
naming the flag and create nothing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_cli import cli, create_args, server  # noqa: F401  (fixtures)

# Berlin's clocks jump 02:00 -> 03:00 on 29 March 2026: 02:30 does not exist that day.
BERLIN_0230 = ["--cron", "30 2 * * *", "--tz", "Europe/Berlin"]
# New York's clocks go back 02:00 -> 01:00 on 1 November 2026: 01:30 happens twice.
NEW_YORK_0130 = ["--cron", "30 1 * * *", "--tz", "America/New_York"]


def _fires(cli: Any, job_id: str, after: str, count: int) -> list[str]:  # noqa: F811
    answer = cli("jobs", "preview", job_id, "--after", after, "--count", str(count), "--json")
    assert (answer.code, answer.err) == (0, "")
    return [fire["utc"] for fire in answer.json()["fires"]]


def test_both_choices_reach_the_job_and_its_fires(cli: Any) -> None:  # noqa: F811
    made = cli(*create_args(*BERLIN_0230, "--dst-gap", "skip", "--dst-repeat", "first", "--json"))
    assert (made.code, made.err) == (0, "")
    job = made.json()
    assert job["schedule"]["dst"] == {"gap": "skip", "repeat": "first"}
    # skip: no fire on the 29th, the next is the 30th's 02:30 (00:30Z)
    assert _fires(cli, job["id"], "2026-03-28T12:00:00Z", 1) == ["2026-03-30T00:30:00Z"]


def test_one_choice_leaves_the_other_at_cron(cli: Any) -> None:  # noqa: F811
    job = cli(*create_args(*NEW_YORK_0130, "--dst-repeat", "both", "--json")).json()
    assert job["schedule"]["dst"] == {"gap": "cron", "repeat": "both"}
    assert _fires(cli, job["id"], "2026-10-31T12:00:00Z", 3) == [
        "2026-11-01T05:30:00Z",
        "2026-11-01T06:30:00Z",
        "2026-11-02T06:30:00Z",
    ]


def test_without_the_flags_a_cron_job_keeps_cron_rules(cli: Any) -> None:  # noqa: F811
    job = cli(*create_args(*BERLIN_0230, "--json")).json()
    assert job["schedule"]["dst"] == {"gap": "cron", "repeat": "cron"}
    # Debian cron's rule: a fixed time in the gap fires at the jump (01:00Z, 03:00 local)
    assert _fires(cli, job["id"], "2026-03-28T12:00:00Z", 1) == ["2026-03-29T01:00:00Z"]


def _job_count(cli: Any) -> int:  # noqa: F811
    return len(cli("jobs", "list", "--limit", "1000", "--json").json()["jobs"])


@pytest.mark.parametrize(("flag", "value"), [("--dst-gap", "later"), ("--dst-repeat", "twice")])
def test_an_unknown_choice_exits_2_naming_the_flag(
    cli: Any,  # noqa: F811
    flag: str,
    value: str,
) -> None:
    before = _job_count(cli)
    result = cli(*create_args(*BERLIN_0230, flag, value))
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: ")
    assert result.err.count("\n") == 1
    assert flag in result.err
    assert _job_count(cli) == before


@pytest.mark.parametrize("schedule", [["--every", "30"], ["--at", "2026-12-24T18:00:00Z"]])
def test_a_choice_beside_every_or_at_exits_2_naming_the_flag(
    cli: Any,  # noqa: F811
    schedule: list[str],
) -> None:
    result = cli(*create_args(*schedule, "--dst-gap", "shift"))
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith("error: --dst-gap: goes with --cron only")
    assert result.err.count("\n") == 1
