"""`tickwork preview --dst-gap/--dst-repeat`: the same choices as a job's `schedule.dst`."""

from __future__ import annotations

import json

import pytest

from tickwork.cli import run

ARGS = ["preview", "--cron", "30 1 * * *", "--tz", "America/New_York"]
AFTER = ["--after", "2026-10-31T12:00:00Z", "--count", "3"]


def test_repeat_both_lists_both_instants(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*ARGS, *AFTER, "--dst-repeat", "both", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        "2026-11-01T05:30:00Z",
        "2026-11-01T06:30:00Z",
        "2026-11-02T06:30:00Z",
    ]


def test_the_table_notes_the_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert run([*ARGS, *AFTER, "--dst-repeat", "second"]) == 0
    out = capsys.readouterr().out
    assert "2026-11-01T06:30:00Z" in out
    assert "2026-11-01T05:30:00Z" not in out
    assert "dst repeat: second" in " ".join(out.split())  # the table may wrap the note


def test_gap_skip(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["preview", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--count", "1"]
    assert run([*args, "--after", "2026-03-28T12:00:00Z", "--dst-gap", "skip", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ["2026-03-30T00:30:00Z"]


@pytest.mark.parametrize(("flag", "value"), [("--dst-gap", "later"), ("--dst-repeat", "twice")])
def test_an_unknown_choice_exits_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    assert run([*ARGS, flag, value]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ")
    assert flag in captured.err
