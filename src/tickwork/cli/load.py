"""`tickwork load`: the fires planned per time bucket, through the API (GET /v1/load), with a
small chart in the terminal so an operator sees a herd before it comes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from tickwork.cli.app import app, stdout_console
from tickwork.cli.client import api_client, present
from tickwork.cli.options import ApiOpt, JsonOpt
from tickwork.cli.render import print_json

__all__ = ["load", "sparkline"]

_BLOCKS = " ▁▂▃▄▅▆▇█"
CHART_WIDTH = 60  # columns of the timeline; each sums the buckets it covers


@app.command()
def load(
    start: Annotated[
        str | None, typer.Option("--from", help="ISO-8601 instant [default: now]")
    ] = None,
    end: Annotated[
        str | None, typer.Option("--to", help="ISO-8601 instant [default: --from + 1 hour]")
    ] = None,
    bucket: Annotated[int, typer.Option(help="bucket width in seconds, 1..86400")] = 1,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's jobs")] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show the fires planned per bucket in a window: totals, peak, busiest buckets, per tenant."""
    query = present({"from": start, "to": end, "bucket": bucket, "tenant": tenant})
    found = api_client(api).call("GET", "/v1/load", params=query)
    if as_json:
        print_json(found)
        return
    console = stdout_console()
    span = f"{found['from']} .. {found['to']}, buckets of {found['bucket_s']} s"
    console.print(f"planned fires {span}", markup=False)
    console.print(
        f"total {found['total']}  peak {found['peak']}/bucket  jobs {found['jobs']}"
        + ("  (truncated: counts are a lower bound)" if found["truncated"] else ""),
        markup=False,
    )
    if found["total"]:
        line = sparkline(found["buckets"], found["from"], found["to"], found["bucket_s"])
        console.print(f"|{line}|", markup=False)
    console.print(_busiest_table(found["busiest"], title="busiest buckets"))
    if len(found["tenants"]) > 1 or tenant is None:
        console.print(_tenants_table(found["tenants"]))


def sparkline(buckets: Sequence[Mapping[str, Any]], start: str, end: str, bucket_s: int) -> str:
    """The window as CHART_WIDTH columns (fewer for a short window), each a block character
    scaled to the busiest column: the shape of the load at a glance."""
    t0 = datetime.fromisoformat(start)
    count = max(1, int((datetime.fromisoformat(end) - t0).total_seconds() // bucket_s))
    width = min(CHART_WIDTH, count)
    columns = [0] * width
    for b in buckets:
        index = int((datetime.fromisoformat(b["start"]) - t0).total_seconds() // bucket_s)
        columns[min(width - 1, index * width // count)] += b["fires"]
    top = max(columns)
    if top == 0:
        return " " * width
    steps = len(_BLOCKS) - 1
    return "".join(_BLOCKS[-(-c * steps // top)] for c in columns)


def _busiest_table(buckets: Sequence[Mapping[str, Any]], *, title: str) -> Table:
    table = Table(title=title)
    table.add_column("bucket start (UTC)", no_wrap=True)
    table.add_column("fires", justify="right")
    for b in buckets:
        table.add_row(b["start"], str(b["fires"]))
    return table


def _tenants_table(tenants: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title="per tenant")
    for column in ("tenant", "total", "peak", "busiest bucket"):
        table.add_column(column, no_wrap=True)
    for name, t in tenants.items():
        top = t["busiest"][0]["start"] if t["busiest"] else "-"
        table.add_row(name, str(t["total"]), str(t["peak"]), top)
    return table
