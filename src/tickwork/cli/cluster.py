"""`tickwork cluster`: the cluster view through the API, once or kept up to date (`--watch`)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer
from rich.live import Live

from tickwork.cli.app import app, stdout_console
from tickwork.cli.client import ApiClient, api_client
from tickwork.cli.options import ApiOpt, JsonOpt
from tickwork.cli.render import cluster_view, print_json

__all__ = ["cluster"]

WatchOpt = Annotated[bool, typer.Option("--watch", help="keep the view up to date (Ctrl-C ends)")]
IntervalOpt = Annotated[
    float, typer.Option("--interval", min=0.2, help="seconds between refreshes with --watch")
]
CountOpt = Annotated[
    int | None,
    typer.Option("--count", min=1, help="with --watch: stop after this many refreshes"),
]


@app.command("cluster")
def cluster(
    watch: WatchOpt = False,
    interval: IntervalOpt = 2.0,
    count: CountOpt = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Schedulers, workers, partitions and queues: who holds what and how far behind."""
    client = api_client(api)
    if not watch:
        _print(_fetch(client), as_json)
        return
    if as_json:  # one JSON document per refresh, one per line
        for data in _refreshes(client, interval, count):
            print_json(data, indent=None)
        return
    refreshes = _refreshes(client, interval, count)
    with Live(cluster_view(next(refreshes)), console=stdout_console(), auto_refresh=False) as live:
        for data in refreshes:
            live.update(cluster_view(data), refresh=True)


def _refreshes(client: ApiClient, interval_s: float, count: int | None) -> Any:
    """The view now, then every `interval_s`, `count` times in all (None: until Ctrl-C)."""
    done = 0
    try:
        while count is None or done < count:
            if done:
                time.sleep(interval_s)
            yield _fetch(client)
            done += 1
    except KeyboardInterrupt:
        return


def _fetch(client: ApiClient) -> dict[str, Any]:
    data: dict[str, Any] = client.call("GET", "/v1/cluster")
    return data


def _print(data: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(data)
    else:
        stdout_console().print(cluster_view(data))
