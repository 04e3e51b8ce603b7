"""`tickwork jobs backfill` and `tickwork jobs backfills`: replaying a job's past occurrences
through the paced lane, watched with a progress bar until every occurrence is enqueued."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from tickwork.cli.app import jobs_app, stdout_console
from tickwork.cli.client import ApiClient, api_client, present
from tickwork.cli.options import ApiOpt, JobIdArg, JsonOpt
from tickwork.cli.render import print_json, show

__all__ = ["jobs_backfill", "jobs_backfills"]

FromOpt = Annotated[
    str, typer.Option("--from", help="first instant of the range, ISO-8601 (included)")
]
ToOpt = Annotated[
    str, typer.Option("--to", help="end of the range, ISO-8601 (excluded), at or before now")
]
RateOpt = Annotated[
    float | None, typer.Option("--rate", help="occurrences enqueued per second [default: 50]")
]
NoWaitOpt = Annotated[
    bool, typer.Option("--no-wait", help="return once it is accepted; do not watch it")
]
IntervalOpt = Annotated[
    float, typer.Option("--interval", min=0.1, help="seconds between progress polls")
]


@jobs_app.command("backfill")
def jobs_backfill(
    job_id: JobIdArg,
    from_: FromOpt,
    to: ToOpt,
    rate: RateOpt = None,
    no_wait: NoWaitOpt = False,
    interval: IntervalOpt = 0.5,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay the job's occurrences in [--from, --to), oldest first, at --rate per second
    (runs of origin `backfill`); shows a progress bar until all are enqueued. Ctrl-C stops
    watching, not the backfill."""
    client = api_client(api)
    body = present({"from": from_, "to": to, "rate": rate})
    backfill: dict[str, Any] = client.call("POST", f"/v1/jobs/{job_id}/backfill", json=body)
    if no_wait:
        show(backfill, as_json, backfill_summary)
    elif as_json:
        print_json(_wait(client, backfill, interval))
    else:
        stdout_console().print(backfill_summary(_watch(client, backfill, interval)), markup=False)


@jobs_app.command("backfills")
def jobs_backfills(job_id: JobIdArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """List the job's backfills and catch-ups, newest first."""
    found = api_client(api).call("GET", f"/v1/jobs/{job_id}/backfills")
    show(found, as_json, lambda data: backfills_table(data["backfills"], job_id))


def _poll(client: ApiClient, backfill_id: int, interval_s: float) -> Any:
    """The backfill every `interval_s`, until it is no longer running."""
    while True:
        time.sleep(interval_s)
        current: dict[str, Any] = client.call("GET", f"/v1/backfills/{backfill_id}")
        yield current
        if current["state"] != "running":
            return


def _wait(client: ApiClient, backfill: dict[str, Any], interval_s: float) -> dict[str, Any]:
    current = backfill
    if current["state"] == "running":
        for current in _poll(client, backfill["id"], interval_s):  # noqa: B007
            pass
    return current


def _watch(client: ApiClient, backfill: dict[str, Any], interval_s: float) -> dict[str, Any]:
    """A progress bar of `done` of `total` until it finishes; Ctrl-C leaves it running."""
    current = backfill
    columns = (
        TextColumn(f"backfill {backfill['id']}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("enqueued"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=stdout_console(), transient=False) as progress:
        task = progress.add_task("backfill", total=max(current["total"], 1))
        progress.update(task, completed=current["done"])
        try:
            if current["state"] == "running":
                for current in _poll(client, backfill["id"], interval_s):
                    progress.update(task, completed=current["done"])
        except KeyboardInterrupt:
            progress.stop()
            stdout_console().print(
                f"stopped watching; backfill {backfill['id']} goes on (cancel it with"
                f" DELETE /v1/backfills/{backfill['id']})",
                markup=False,
            )
    return current


def backfill_summary(b: dict[str, Any]) -> str:
    rate = f"{b['rate']:g}/s"
    return (
        f"backfill {b['id']} of job {b['job_id']}: {b['state']}, {b['done']} of {b['total']}"
        f" occurrences enqueued ({b['from']} to {b['to']}, {rate})"
    )


def backfills_table(backfills: list[dict[str, Any]], job_id: str) -> Table:
    table = Table(title=f"backfills of job {job_id}")
    for column in ("id", "kind", "state", "done", "total", "from", "to", "rate", "created_at"):
        table.add_column(column)
    for b in backfills:
        table.add_row(
            str(b["id"]),
            b["kind"],
            b["state"],
            str(b["done"]),
            str(b["total"]),
            b["from"],
            b["to"],
            f"{b['rate']:g}/s",
            b["created_at"],
        )
    return table
