"""The no-op Python task of the end-to-end benchmark: `tickwork worker --import bench.noop_task`."""

from __future__ import annotations

import os

import tickwork
from bench.peers.harnesses._record import BodyLog

NOOP_TASK = "bench.noop"
# The peer suite (bench/peers) sets this so tickwork's body records what every peer's records
# (one line per execution); unset, the task does nothing at all.
BODY_LOG_ENV = "TICKWORK_BENCH_BODY_LOG"
_body = BodyLog(os.environ[BODY_LOG_ENV]) if os.environ.get(BODY_LOG_ENV) else None


@tickwork.task(NOOP_TASK)
async def noop(ctx: tickwork.TaskContext) -> None:
    """Does nothing: what is measured is tickwork's own cost per fire."""
    if _body is not None:
        _body.ran(ctx.job_id, ctx.scheduled_for.timestamp())
