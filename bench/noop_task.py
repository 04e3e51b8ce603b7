"""The no-op Python task of the end-to-end benchmark: `tickwork worker --import bench.noop_task`."""

from __future__ import annotations

import tickwork

NOOP_TASK = "bench.noop"


@tickwork.task(NOOP_TASK)
async def noop(ctx: tickwork.TaskContext) -> None:
    """Does nothing: what is measured is tickwork's own cost per fire."""
