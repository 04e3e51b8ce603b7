"""Tasks for the end-to-end tests (`tickwork up --import tests.support.sample_tasks`)."""

from __future__ import annotations

import aiohttp

import tickwork


@tickwork.task("tests.echo")
async def echo(ctx: tickwork.TaskContext) -> None:
    """POST the occurrence's identity to the receiver named in the job's args."""
    await ctx.heartbeat()
    payload = {"key": ctx.key, "attempt": ctx.attempt, "args": ctx.args}
    headers = {"webhook-id": ctx.key, "tickwork-scheduled-for": ctx.scheduled_for.isoformat()}
    async with aiohttp.ClientSession() as session:
        await session.post(ctx.args["url"], json=payload, headers=headers)
