"""`tickwork preview`: the next fires of a schedule (cron, every or at), computed locally.

It needs no API and no store: the same timing code the scheduler uses, run on this machine.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Group

from tickwork.cli.app import CliFailure, app, stdout_console
from tickwork.cli.render import ends_line, fire_rows, fires_table, print_json
from tickwork.clock import SystemClock, utc_iso
from tickwork.domain.jobs import DstGap, DstRepeat
from tickwork.timing.preview import preview_schedule
from tickwork.timing.preview_query import preview_query_schedule

__all__ = ["preview"]

# What the API accepts too: far from now an instant is a mistake, and near datetime's limits
# the interval arithmetic would overflow.
_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(2200, 1, 1, tzinfo=UTC)


@app.command()
def preview(
    cron: Annotated[str | None, typer.Option(help="cron expression, e.g. '30 2 * * *'")] = None,
    tz: Annotated[
        str | None, typer.Option("--tz", help="IANA time zone of --cron [default: UTC]")
    ] = None,
    every: Annotated[str | None, typer.Option(help="interval: PT30S or seconds")] = None,
    anchor: Annotated[
        str | None, typer.Option(help="--every's first fire [default: --start-at, else --after]")
    ] = None,
    at: Annotated[str | None, typer.Option(help="one-shot ISO-8601 instant")] = None,
    start_at: Annotated[str | None, typer.Option(help="no fire before this instant")] = None,
    end_at: Annotated[str | None, typer.Option(help="no fire after this instant")] = None,
    max_runs: Annotated[
        int | None, typer.Option(help="stop after this many fires", min=1, show_default=False)
    ] = None,
    after: Annotated[
        str | None, typer.Option(help="ISO-8601 instant to start from (default: now)")
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
    """Show the next fires of one of --cron, --every or --at (computed locally, no API)."""
    start = _instant(after, "--after") or SystemClock().now()
    schedule = preview_query_schedule(
        start=start,
        cron=cron,
        timezone=tz,
        every=every,
        anchor=_instant(anchor, "--anchor"),
        at=_instant(at, "--at"),
        start_at=_instant(start_at, "--start-at"),
        end_at=_instant(end_at, "--end-at"),
        max_runs=max_runs,
        dst_gap=dst_gap,
        dst_repeat=dst_repeat,
    )
    result = preview_schedule(schedule, start, count)
    if as_json:
        print_json([utc_iso(entry.utc) for entry in result.fires], indent=None)
        return
    fires = fire_rows(result.fires)
    what = f"{cron!r}" if cron is not None else f"every {every}" if every is not None else "at"
    table = fires_table(
        fires, title=f"next {len(fires)} fires of {what}", zone=tz if cron and tz else "UTC"
    )
    parts: list[Any] = [table]
    if result.ends is not None:
        parts.append(ends_line({"reason": result.ends.reason, "message": result.ends.message}))
    stdout_console().print(Group(*parts))


def _instant(value: str | None, flag: str) -> datetime | None:
    if value is None:
        return None
    example = "e.g. 2026-03-28T00:00:00Z"
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise CliFailure(f"{flag}: {value!r} is not an ISO-8601 instant; use {example}") from None
    if when.tzinfo is None:
        raise CliFailure(f"{flag}: {value!r} has no offset; add Z or an offset, {example}")
    if not _EARLIEST <= when < _LATEST:
        raise CliFailure(f"{flag}: give an instant from 1970 to 2199, {example}")
    return when
