"""`tickwork preview`: the next fire instants of a cron expression, computed locally.

It needs no API and no store: the same timing code the scheduler uses, run on this machine.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from tickwork.cli.app import CliFailure, app, stdout_console
from tickwork.cli.render import fires_table, print_json
from tickwork.clock import SystemClock, utc_iso
from tickwork.domain.jobs import DstGap, DstRepeat
from tickwork.timing.preview import preview_cron

__all__ = ["preview"]


@app.command()
def preview(
    cron: Annotated[str, typer.Option(help="cron expression, e.g. '30 2 * * *'")],
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone of the expression")] = "UTC",
    after: Annotated[
        str | None, typer.Option(help="ISO-8601 instant to start after (default: now)")
    ] = None,
    count: Annotated[int, typer.Option(help="how many fires, 1..1000")] = 10,
    as_json: Annotated[
        bool, typer.Option("--json", help="print a JSON array of UTC instants")
    ] = False,
    dst_gap: Annotated[
        DstGap,
        typer.Option(help="a wall time that does not exist (spring forward): cron, shift, skip"),
    ] = DstGap.CRON,
    dst_repeat: Annotated[
        DstRepeat,
        typer.Option(help="a wall time that happens twice (fall back): cron, first, second, both"),
    ] = DstRepeat.CRON,
) -> None:
    """Show the next fire instants of a cron expression (computed locally, no API)."""
    start = _parse_instant(after, "--after") if after else SystemClock().now()
    entries = preview_cron(cron, tz, start, count, gap=dst_gap, repeat=dst_repeat)
    if as_json:
        print_json([utc_iso(entry.utc) for entry in entries], indent=None)
        return
    stdout_console().print(fires_table(entries, cron=cron, tz=tz))


def _parse_instant(value: str, flag: str) -> datetime:
    example = "e.g. 2026-03-28T00:00:00Z"
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise CliFailure(f"{flag}: {value!r} is not an ISO-8601 instant; use {example}") from None
    if when.tzinfo is None:
        raise CliFailure(f"{flag}: {value!r} has no offset; add Z or an offset, {example}")
    return when
