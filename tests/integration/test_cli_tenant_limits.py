"""`tickwork tenants create|update|show` with limits, against a real HTTP server (the fixtures
of test_cli.py): set, merged, removed, shown; a bad limit and a job over the quota exit 2 with
the API's message naming the limit."""

from __future__ import annotations

from typing import Any

from tests.integration.test_cli import cli, create_args, server  # noqa: F401  (fixtures)


def test_limits_are_set_changed_removed_and_shown(cli: Any) -> None:  # noqa: F811
    made = cli(
        "tenants", "create", "cli-limits", "--max-jobs", "10", "--max-api-rps", "2.5",
        "--weight", "3", "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    assert made.json()["limits"] == {
        "max_jobs": 10,
        "max_fires_per_s": None,
        "max_concurrent_runs": None,
        "max_api_rps": 2.5,
        "weight": 3,
    }
    changed = cli(
        "tenants", "update", "cli-limits", "--max-concurrent-runs", "4", "--remove", "max-api-rps",
        "--remove", "weight", "--json",
    )  # fmt: skip
    assert changed.code == 0, changed.err
    limits = changed.json()["limits"]
    assert (limits["max_jobs"], limits["max_concurrent_runs"]) == (10, 4)
    assert (limits["max_api_rps"], limits["weight"]) == (None, None)
    shown = cli("tenants", "show", "cli-limits")
    assert shown.code == 0
    assert "0 of 10" in shown.out  # its jobs against its quota
    assert "max_concurrent_runs=4" in shown.out
    listed = cli("tenants", "list")
    assert "0 of 10" in listed.out


def test_bad_limits_and_empty_updates_exit_2(cli: Any) -> None:  # noqa: F811
    assert cli("tenants", "create", "cli-bad-limits").code == 0
    zero = cli("tenants", "update", "cli-bad-limits", "--max-jobs", "0")
    assert zero.code == 2
    assert "limits.max_jobs" in zero.err
    assert "give 1 to" in zero.err
    nothing = cli("tenants", "update", "cli-bad-limits")
    assert (nothing.code, "--max-jobs N" in nothing.err) == (2, True)
    unknown = cli("tenants", "update", "cli-bad-limits", "--remove", "max-job")
    assert (unknown.code, "not a limit" in unknown.err) == (2, True)
    both = cli("tenants", "update", "cli-bad-limits", "--max-jobs", "3", "--remove", "max_jobs")
    assert (both.code, "both given and removed" in both.err) == (2, True)
    not_a_number = cli("tenants", "update", "cli-bad-limits", "--max-jobs", "many")
    assert not_a_number.code == 2


def test_a_job_over_the_quota_exits_2_naming_the_limit(cli: Any) -> None:  # noqa: F811
    assert cli("tenants", "create", "cli-quota", "--max-jobs", "1").code == 0
    assert cli(*create_args("--every", "PT1M", "--tenant", "cli-quota")).code == 0
    over = cli(*create_args("--every", "PT1M", "--tenant", "cli-quota"))
    assert over.code == 2
    assert "limits.max_jobs is 1" in over.err
    assert "delete jobs" in over.err
    shown = cli("tenants", "show", "cli-quota", "--json").json()
    assert shown["usage"] == {"jobs": 1}
