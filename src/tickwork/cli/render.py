"""How the commands print: the API's JSON as it came (`--json`), or rich tables for people.

The tables read the API's JSON answers, not tickwork's records: the CLI sees only what the
HTTP API returns, so anything shown here is something a script could read too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tickwork.cli.app import stdout_console
from tickwork.clock import utc_iso
from tickwork.timing.preview import PreviewEntry

__all__ = [
    "dead_letters_table",
    "ends_line",
    "fire_rows",
    "fires_table",
    "job_detail",
    "job_fires",
    "jobs_table",
    "print_json",
    "run_detail",
    "runs_table",
    "show",
    "show_page",
    "tenant_signing",
]


def print_json(data: Any, indent: int | None = 2) -> None:
    sys.stdout.write(json.dumps(data, indent=indent) + "\n")
    sys.stdout.flush()


def show(data: Any, as_json: bool, render: Callable[[Any], Any]) -> None:
    if as_json:
        print_json(data)
    else:
        stdout_console().print(render(data))


def show_page(page: Mapping[str, Any], as_json: bool, table: Table, more: str) -> None:
    """A list page: the table, then the command for the next page (`more` + the cursor)."""
    if as_json:
        print_json(page)
        return
    console = stdout_console()
    console.print(table)
    cursor = page.get("next_after") or page.get("next_before")
    if cursor:
        console.print(f"more: {more} {cursor}", markup=False)


# -- preview ----------------------------------------------------------------------------------


def fires_table(fires: Sequence[Mapping[str, Any]], *, title: str, zone: str) -> Table:
    """Fires as the API lists them (`utc`, `local`, `note`)."""
    table = Table("#", "UTC", f"local ({zone})", "note", title=title)
    for n, fire in enumerate(fires, 1):
        table.add_row(str(n), fire["utc"], fire["local"], fire["note"] or "")
    return table


def fire_rows(entries: Sequence[PreviewEntry]) -> list[dict[str, Any]]:
    """Locally computed fires in the API's shape, for `fires_table`."""
    return [{"utc": utc_iso(e.utc), "local": e.local.isoformat(), "note": e.note} for e in entries]


def job_fires(answer: Mapping[str, Any]) -> Group:
    """GET /v1/jobs/{id}/preview: the fires, then why they end, if they do."""
    fires = answer["fires"]
    state = answer["state"]
    heading = f"next {len(fires)} fires of job {answer['job_id']}"
    if state == "paused":
        heading += " (paused: what would fire if it were resumed now)"
    elif state == "completed":
        heading += " (completed)"
    parts: list[Any] = [fires_table(fires, title=heading, zone="schedule's zone")]
    if answer.get("ends"):
        parts.append(ends_line(answer["ends"]))
    return Group(*parts)


def ends_line(ends: Mapping[str, Any]) -> Text:
    return Text(f"ends ({ends['reason']}): {ends['message']}")


# -- jobs -------------------------------------------------------------------------------------


def jobs_table(jobs: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title=f"{len(jobs)} job(s)")
    table.add_column("id", no_wrap=True)
    for column in ("name", "state", "schedule", "next run (UTC)"):
        table.add_column(column)
    for job in jobs:
        table.add_row(
            job["id"],
            job["name"],
            job["state"],
            _schedule_text(job["schedule"]),
            job["next_run_at"] or "-",
        )
    return table


def _catchup_text(schedule: Mapping[str, Any]) -> str:
    window = str(schedule.get("catchup_window", "P1D"))
    # Only fire_all catches up: say so rather than let the window look in force.
    return window if schedule["misfire"] == "fire_all" else f"{window} (unused: not fire_all)"


def _shift_text(schedule: Mapping[str, Any]) -> str:
    if schedule.get("jitter"):
        return f"jitter {schedule['jitter']}"
    if schedule.get("window"):
        return f"window {schedule['window']} (least loaded second)"
    return "-"


def _next_text(job: Mapping[str, Any]) -> str:
    """When the next occurrence fires, and its own instant when a jitter or window moved it."""
    planned, nominal = job["next_run_at"], job.get("next_scheduled_for")
    if planned is None:
        return "-"
    return planned if nominal in (None, planned) else f"{planned} (occurrence {nominal})"


def job_detail(job: Mapping[str, Any]) -> Table:
    schedule, target = job["schedule"], job["target"]
    window = f"{schedule.get('start_at') or '-'} .. {schedule.get('end_at') or '-'}"
    rows = {
        "id": job["id"],
        "name": job["name"],
        "tenant": job["tenant"],
        "state": _state_text(job),
        "schedule": _schedule_text(schedule),
        "window": window,
        "misfire": f"{schedule['misfire']} (grace {schedule['misfire_grace']})",
        "catch-up window": _catchup_text(schedule),
        "shift": _shift_text(schedule),
        "overlap": str(job.get("overlap", "allow")),
        "priority": str(job.get("priority", 5)),
        "runs": _runs_text(job),
        **_target_rows(target),
        "signing": _signing_text(job["signing"]),
        "on failure": job["on_failure"]["url"] if job.get("on_failure") else "-",
        "retry": _retry_text(job["retry"]),
        "next run": _next_text(job),
        "last fired": job["last_fired_at"] or "-",
        "fence token": str(job["fence_token"]),
        "created": job["created_at"],
        "updated": job["updated_at"],
    }
    return _detail_table(f"job {job['name']}", rows)


def _state_text(job: Mapping[str, Any]) -> str:
    if job["state"] != "paused":
        return str(job["state"])
    since = f" since {job['paused_at']}" if job.get("paused_at") else ""
    note = f": {job['pause_note']}" if job.get("pause_note") else ""
    return f"paused{since}{note}"


def _runs_text(job: Mapping[str, Any]) -> str:
    fired = job.get("fired_count", 0)
    limit = job.get("max_runs")
    return f"{fired} fired" + ("" if limit is None else f" of at most {limit}")


def _schedule_text(schedule: Mapping[str, Any]) -> str:
    if "cron" in schedule:
        return f"cron {schedule['cron']} ({schedule.get('timezone', 'UTC')})"
    if "every" in schedule:
        return f"every {schedule['every']}"
    return f"at {schedule.get('at')}"


def _target_rows(target: Mapping[str, Any]) -> dict[str, str]:
    if target["type"] == "task":
        return {
            "target": f"task {target['name']} (timeout {target['timeout']})",
            "args": "-" if target["args"] is None else json.dumps(target["args"]),
        }
    return {
        "target": f"{target['method']} {target['url']} (timeout {target['timeout']})",
        "headers": ", ".join(f"{k}: {v}" for k, v in target["headers"].items()) or "-",
        "body": "-" if target["body"] is None else json.dumps(target["body"]),
    }


def _signing_text(signing: Mapping[str, Any]) -> str:
    if signing["source"] == "job":
        return f"job's own secrets (fingerprints {', '.join(signing['fingerprints'])})"
    return "inherited: the tenant's secrets, else the workers', else unsigned"


def _retry_text(retry: Mapping[str, Any]) -> str:
    return (
        f"{retry['max_attempts']} attempt(s), backoff {retry['backoff']}"
        f" x{retry['multiplier']:g} up to {retry['max_backoff']}"
    )


def _detail_table(title: str, rows: Mapping[str, str]) -> Table:
    table = Table(show_header=False, title=title)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows.items():
        table.add_row(key, value)
    return table


# -- runs and dead letters --------------------------------------------------------------------


def _run_state_text(run: Mapping[str, Any]) -> str:
    """The run's state (the API's `state`), with the worker holding it while it runs."""
    state = str(run["state"])
    return f"{state} on {run['worker']}" if run.get("worker") else state


def _result_text(run: Mapping[str, Any]) -> str:
    error = run.get("error") or run.get("last_error")
    return error or (f"HTTP {run['http_status']}" if run.get("http_status") else "-")


def runs_table(runs: Sequence[Mapping[str, Any]], *, title: str) -> Table:
    table = Table(title=title)
    for column in ("run", "scheduled for", "origin", "state", "attempt", "started", "finished"):
        table.add_column(column, no_wrap=column in ("run", "state"))
    table.add_column("result", overflow="fold")
    for r in runs:
        table.add_row(
            str(r["id"]),
            r["scheduled_for"],
            r["origin"],
            _run_state_text(r),
            str(r["attempt"]),
            r["started_at"] or "-",
            r["finished_at"] or "-",
            _result_text(r),
        )
    return table


def dead_letters_table(runs: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title=f"{len(runs)} dead letter(s)")
    for column in ("run", "job", "scheduled for", "attempts", "dead-lettered"):
        table.add_column(column, no_wrap=column in ("run", "job"))
    table.add_column("last error", overflow="fold")
    for r in runs:
        table.add_row(
            str(r["id"]),
            r["job_id"],
            r["scheduled_for"],
            str(r["attempt"]),
            r["dead_lettered_at"] or "-",
            _result_text(r),
        )
    return table


def run_detail(run: Mapping[str, Any]) -> Group:
    rows = {
        "id": str(run["id"]),
        "job": run["job_id"],
        "key": run["key"],
        "origin": run["origin"],
        "scheduled for": run["scheduled_for"],
        "state": run["state"],
        "worker": run["worker"] or "-",
        "attempt": str(run["attempt"]),
        "fence token": str(run["fence_token"]),
        # A running run's lease ends then unless renewed; a waiting one may be leased from then.
        ("lease until" if run["worker"] else "leasable from"): run["lease_until"] or "-",
        "created": run["created_at"],
        "started": run["started_at"] or "-",
        "finished": run["finished_at"] or "-",
        "result": _result_text(run),
        "dead-lettered": run["dead_lettered_at"] or "-",
    }
    return Group(_detail_table(f"run {run['id']}", rows), _attempts_table(run["attempts"]))


def _attempts_table(attempts: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title=f"{len(attempts)} attempt(s)")
    for column in ("#", "status", "started", "finished", "worker", "fence"):
        table.add_column(column, no_wrap=column in ("#", "status"))
    table.add_column("result", overflow="fold")
    for a in attempts:
        table.add_row(
            str(a["attempt"]),
            a["status"],
            a["started_at"],
            a["finished_at"],
            a["worker"] or "-",
            str(a["fence_token"]),
            _result_text(a),
        )
    return table


# -- tenants ----------------------------------------------------------------------------------


def tenant_signing(answer: Mapping[str, Any]) -> Table:
    fingerprints = ", ".join(answer["fingerprints"])
    rows = {
        "tenant": answer["tenant"],
        "signing": (
            f"tenant's secrets (fingerprints {fingerprints})"
            if answer["signing"] == "tenant"
            else "none set: the workers' secrets, else unsigned"
        ),
        "updated": answer["updated_at"] or "-",
    }
    return _detail_table(f"webhook secrets of tenant {answer['tenant']}", rows)


# -- cluster ----------------------------------------------------------------------------------


def cluster_view(data: Mapping[str, Any]) -> Group:
    """`tickwork cluster`: schedulers, workers, queues, and the partitions' owners and lag."""
    summary = (
        f"{len(data['schedulers'])} schedulers, {len(data['workers'])} workers; "
        f"{data['partition_count']} partitions, {data['unowned_partitions']} unowned, "
        f"max lag {data['max_partition_lag_s']:.3f} s (at {data['now']})"
    )
    return Group(
        summary,
        _schedulers_table(data["schedulers"]),
        _workers_table(data["workers"]),
        _queues_table(data["queues"]),
        _lagging_table(data["partitions"]),
    )


def _schedulers_table(schedulers: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="schedulers")
    for column in ("id", "version", "started", "partitions (epochs)", "renewed", "fires/min"):
        table.add_column(column)
    for s in schedulers:
        epochs = sorted(set(s["partitions"].values()))
        held = f"{len(s['partitions'])} ({', '.join(map(str, epochs)) or '-'})"
        table.add_row(
            s["id"], s["version"], s["started_at"], held, s["last_renewal"] or "-",
            str(s["fires_last_minute"]),
        )  # fmt: skip
    return table


def _workers_table(workers: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="workers")
    for column in ("id", "version", "queue", "in flight", "last heartbeat"):
        table.add_column(column)
    for w in workers:
        table.add_row(w["id"], w["version"], w["queue"], str(w["in_flight"]), w["last_heartbeat"])
    return table


def _queues_table(queues: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title="queues")
    for column in ("queue", "depth", "oldest waiting (s)"):
        table.add_column(column)
    for q in queues:
        depth = "?" if q["depth"] is None else str(q["depth"])
        table.add_row(q["name"], depth, f"{q['oldest_waiting_s']:.3f}")
    return table


def _lagging_table(partitions: Sequence[Mapping[str, Any]]) -> Table:
    """Only the partitions worth a look: unowned, or behind by 1 s or more."""
    table = Table(title="partitions unowned or lagging (others: owned, no lag)")
    for column in ("partition", "owner", "epoch", "lag (s)"):
        table.add_column(column)
    for p in partitions:
        if p["owner"] is None or p["lag_s"] >= 1:
            table.add_row(str(p["partition"]), p["owner"] or "-", str(p["epoch"]), str(p["lag_s"]))
    return table
