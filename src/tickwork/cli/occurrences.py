"""`tickwork jobs occurrences` and `tickwork jobs explain`: the occurrence ledger, through the
API (GET /v1/jobs/{id}/occurrences and /explain)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.table import Table

from tickwork.cli.app import jobs_app, stdout_console
from tickwork.cli.client import api_client, present
from tickwork.cli.options import ApiOpt, JobIdArg, JsonOpt
from tickwork.cli.render import print_json, show

__all__ = ["jobs_explain", "jobs_occurrences"]


@jobs_app.command("occurrences")
def jobs_occurrences(
    job_id: JobIdArg,
    start: Annotated[
        str | None,
        typer.Option("--from", help="ISO-8601 instant [default: --to minus 1 day]"),
    ] = None,
    end: Annotated[
        str | None, typer.Option("--to", help="ISO-8601 instant [default: now + 1 hour]")
    ] = None,
    limit: Annotated[int, typer.Option(help="at most this many entries, 1..1000")] = 100,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a job's occurrences in a window, each with its one outcome and why."""
    query = present({"from": start, "to": end, "limit": limit})
    page = api_client(api).call("GET", f"/v1/jobs/{job_id}/occurrences", params=query)
    if as_json:
        print_json(page)
        return
    console = stdout_console()
    console.print(occurrences_table(page["occurrences"], title=f"occurrences of job {job_id}"))
    if page["next_from"]:
        to = "" if end is None else f" --to {end}"
        more = f"more: tickwork jobs occurrences {job_id}{to} --from {page['next_from']}"
        console.print(more, markup=False)


@jobs_app.command("explain")
def jobs_explain(
    job_id: JobIdArg,
    at: Annotated[
        str | None, typer.Option(help="ISO-8601 instant: the occurrence at or after it [now]")
    ] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Say what happened, or will happen, to a job's occurrence at or after --at, and why."""
    found = api_client(api).call("GET", f"/v1/jobs/{job_id}/explain", params=present({"at": at}))
    show(found, as_json, explanation)


def occurrences_table(entries: Sequence[Mapping[str, Any]], *, title: str) -> Table:
    table = Table(title=title)
    for column in ("at (UTC)", "outcome", "count", "until", "run", "origin"):
        table.add_column(column, no_wrap=True)
    table.add_column("why", overflow="fold")
    for e in entries:
        table.add_row(
            e["at"],
            e["outcome"],
            str(e["count"]),
            e["last"] or "",
            "" if e["run_id"] is None else str(e["run_id"]),
            e["origin"] or "",
            e["reason"],
        )
    return table


def explanation(found: Mapping[str, Any]) -> Group:
    rule = found["rule"]
    rows = {
        "summary": found["summary"],
        "occurrence": found["occurrence"] or "-",
        "outcome": found["outcome"] or "-",
        "why": found["reason"] or "-",
        "rule": _rule_text(rule),
        "job state": found["state"],
        "overlap": found["overlap"],
        "misfire": f"{found['misfire']} (grace {found['misfire_grace']})",
    }
    if found["misfire"] == "fire_all":  # the only policy that catches up
        rows["catch-up window"] = str(found.get("catchup_window", "P1D"))
    if found.get("shift"):
        rows["shift"] = str(found["shift"])
    if found.get("planned_for"):
        rows["planned for"] = str(found["planned_for"])
    if found["count"] and found["count"] > 1:
        rows["range"] = f"{found['range_first']} .. {found['range_last']} ({found['count']})"
    if found["dst"] is not None:
        dst = found["dst"]
        rows["dst"] = f"gap {dst['gap']}, repeat {dst['repeat']}" + (
            f"; {dst['note']}" if dst["note"] else ""
        )
    if found["paused"] is not None:
        paused = found["paused"]
        rows["paused"] = f"since {paused['since'] or '-'}" + (
            f" (note: {paused['note']})" if paused["note"] else ""
        )
    if found["max_runs"] is not None:
        rows["max runs"] = f"{found['fired_count']} of {found['max_runs']} fired"
    if found["run"] is not None:
        run = found["run"]
        rows["run"] = f"{run['id']} ({run['status']}, attempt {run['attempt']})"
    table = _detail(f"job {found['job_id']}", rows)
    if not found["attempts"]:
        return Group(table)
    attempts = Table(title=f"{len(found['attempts'])} attempt(s)")
    for column in ("#", "status", "started", "finished", "result"):
        attempts.add_column(column)
    for a in found["attempts"]:
        result = str(a["http_status"] or "") + (f" {a['error']}" if a["error"] else "")
        attempts.add_row(
            str(a["attempt"]), a["status"], a["started_at"], a["finished_at"], result.strip()
        )
    return Group(table, attempts)


def _rule_text(rule: Mapping[str, Any]) -> str:
    if rule["kind"] == "cron":
        local = f", {rule['local']} local" if rule["local"] else ""
        text = f"cron {rule['cron']!r} in {rule['timezone']}{local}"
    elif rule["kind"] == "every":
        text = f"every {rule['every']} from {rule['anchor']}"
    else:
        text = f"at {rule['at']}"
    for bound in ("start_at", "end_at"):
        if rule[bound]:
            text += f"; {bound} {rule[bound]}"
    return text


def _detail(title: str, rows: Mapping[str, str]) -> Table:
    table = Table(show_header=False, title=title)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows.items():
        table.add_row(key, value)
    return table
