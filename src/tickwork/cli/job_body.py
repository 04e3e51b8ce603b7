"""The POST /v1/jobs body of `tickwork jobs create`: built from its flags, or read from --file.

Only the command line's own syntax is checked here (a header without a colon, JSON that does
not parse, flags and a file together, a --dst-* flag without --cron): the API checks the job
itself, and its answer names the field, which the command line turns back into the flag.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tickwork.cli.app import CliFailure
from tickwork.cli.client import present

__all__ = ["job_body", "load_job_file"]


def load_job_file(path: Path, options: Mapping[str, Any]) -> dict[str, Any]:
    """The body in `path`; `options` are the other flags, which must all be left out."""
    given = [f"--{k.replace('_', '-')}" for k, v in options.items() if v not in (None, [])]
    if given:
        raise CliFailure(
            f"--file: give the whole job in the file or as flags, not both ({given[0]})"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliFailure(f"--file: cannot read {str(path)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise CliFailure(f"--file: {str(path)!r} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CliFailure(f"--file: {str(path)!r} must hold a JSON object (the POST /v1/jobs body)")
    return data


def job_body(o: Mapping[str, Any]) -> dict[str, Any]:
    """The body the flags describe (`o`: each flag's value by parameter name, None if absent)."""
    if o["name"] is None:
        raise CliFailure("--name is required (or give the whole job with --file job.json)")
    if (o["url"] is None) == (o["task"] is None):
        raise CliFailure("give one of --url (a webhook) or --task (a Python task)")
    schedule = {
        "cron": o["cron"], "timezone": o["tz"], "every": _number_or_text(o["every"]),
        "at": o["at"], "start_at": o["start_at"], "end_at": o["end_at"], "misfire": o["misfire"],
        "catchup_window": _number_or_text(o["catchup_window"]),
        "jitter": _number_or_text(o.get("jitter")), "window": _number_or_text(o.get("window")),
        "dst": _dst(o),
    }  # fmt: skip
    job = {"name": o["name"], "schedule": present(schedule), "target": _target(o)}
    if o["on_failure"]:
        job["on_failure"] = {"url": o["on_failure"]}
    retry = {
        "max_attempts": o["max_attempts"],
        "backoff": _number_or_text(o["backoff"]),
        "max_backoff": _number_or_text(o["max_backoff"]),
    }
    if any(v is not None for v in retry.values()):
        job["retry"] = present(retry)
    job |= present({"overlap": o["overlap"], "max_runs": o["max_runs"]})
    job |= present({"priority": o.get("priority")})
    return job | ({"tenant": o["tenant"]} if o["tenant"] else {})


def _dst(o: Mapping[str, Any]) -> dict[str, str] | None:
    """`schedule.dst` from --dst-gap/--dst-repeat; absent when neither is given, so a job
    without them gets the API's defaults (and an --every or --at job no dst at all)."""
    choices = present({"gap": o["dst_gap"], "repeat": o["dst_repeat"]})
    if choices and o["cron"] is None:
        # The API would name `schedule`, i.e. --cron/--every/--at: name the flag given instead.
        flag = "--dst-gap" if "gap" in choices else "--dst-repeat"
        raise CliFailure(f"{flag}: goes with --cron only (a clock change moves no interval)")
    return {k: str(v) for k, v in choices.items()} or None


def _target(o: Mapping[str, Any]) -> dict[str, Any]:
    target: dict[str, Any] = {"type": "webhook", "url": o["url"]}
    if o["task"] is not None:
        target = {"type": "task", "name": o["task"]}
        if o["args"] is not None:
            target["args"] = _parse_json_flag(o["args"], "--args")
    if o["method"]:
        target["method"] = o["method"]
    if o["header"]:
        target["headers"] = _parse_headers(o["header"])
    if o["body"] is not None:
        target["body"] = _parse_json_flag(o["body"], "--body")
    if o["timeout"]:
        target["timeout"] = _number_or_text(o["timeout"])
    if o["secret"]:
        target["secrets"] = list(o["secret"])
    return target


def _number_or_text(value: str | None) -> str | int | float | None:
    """`--every 30` means 30 seconds; `--every PT30S` is passed on as text."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() else number


def _parse_headers(lines: Sequence[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise CliFailure(f"--header: {line!r} is not 'Name: value', e.g. 'X-Team: data'")
        headers[name.strip()] = value.strip()
    return headers


def _parse_json_flag(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliFailure(f"{flag}: not valid JSON ({exc}); quote it, e.g. '{{\"k\": 1}}'") from None
