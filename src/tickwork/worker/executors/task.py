"""Task execution: runs a fire whose target is a Python task (`@tickwork.task`) in this process.

The task is looked up by name in a `TaskRegistry` (tickwork/tasks.py, the public API for
defining tasks) and called with a `TaskContext`: the occurrence's identity, the job's `args`
(a private copy) and a `heartbeat()` that extends this attempt's lease at its fence. An async
task runs on the loop, a sync one in a thread. A task that outlives the job's timeout is
cancelled (a sync one is abandoned in its thread: Python cannot stop a thread) and the attempt
is a retryable failure. An exception is a retryable failure, `PermanentFailure` one that is
not: both become an `Attempt`, as the `Runner` contract asks (worker/base.py).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from datetime import timedelta
from typing import Any

from tickwork.clock import Clock
from tickwork.domain.jobs import TaskTarget
from tickwork.domain.runs import Fire
from tickwork.store.base import ScheduleStore
from tickwork.tasks import PermanentFailure, TaskContext, TaskFunction, TaskRegistry
from tickwork.worker.base import ERROR_EXCERPT_CHARS, Attempt
from tickwork.worker.deadlines import Deadlines

__all__ = ["TaskRunner"]


class TaskRunner:
    """Runs a fire whose target is a TaskTarget, from `registry`."""

    def __init__(
        self, registry: TaskRegistry, store: ScheduleStore, clock: Clock, *, lease_ttl_ms: int
    ) -> None:
        self._registry = registry
        self._store = store
        self._clock = clock
        self._lease_ttl = timedelta(milliseconds=lease_ttl_ms)
        self._deadlines = Deadlines()

    async def _heartbeat(self, fire: Fire) -> None:
        """`ctx.heartbeat()`: extend this fire's lease now (fence-checked like every write)."""
        until = self._clock.now() + self._lease_ttl
        await self._store.extend_leases([(fire.run_id, fire.fence_token)], lease_until=until)

    async def __call__(self, fire: Fire) -> Attempt:
        target = fire.target
        assert isinstance(target, TaskTarget)
        fn = self._registry.get(target.name)
        if fn is None:
            hint = "start the worker with --import MODULE for the module that defines it"
            return Attempt(ok=False, error=f"no task named {target.name!r} here; {hint}")
        ctx = TaskContext(
            job_id=fire.job_id,
            run_id=fire.run_id,
            key=fire.key,
            scheduled_for=fire.scheduled_for,
            attempt=fire.attempt,
            fence_token=fire.fence_token,
            args=_own_copy(target.args),
            heartbeat=lambda: self._heartbeat(fire),
            planned_for=fire.planned_for,
        )
        return await _call(fn, ctx, target.timeout_s, self._deadlines)


def _own_copy(args: Any) -> Any:
    """Parsed targets are shared between fires (store/sql/rows.py): a task that mutates its
    args must not change what the job's next fire receives."""
    return copy.deepcopy(args) if isinstance(args, dict | list) else args


async def _call(
    fn: TaskFunction, ctx: TaskContext, timeout_s: float, deadlines: Deadlines
) -> Attempt:
    task = asyncio.current_task()
    assert task is not None
    deadlines.begin(task, timeout_s)
    timed_out = False
    try:
        try:
            if inspect.iscoroutinefunction(fn):
                await fn(ctx)
            else:
                await asyncio.to_thread(fn, ctx)
        finally:
            timed_out = deadlines.settle(task)
    except asyncio.CancelledError:
        if not timed_out:
            raise
        return Attempt(ok=False, error=f"timed out after {timeout_s:g} s", retryable=True)
    except PermanentFailure as exc:
        return Attempt(ok=False, error=_excerpt(exc))
    except Exception as exc:
        return Attempt(ok=False, error=_excerpt(exc), retryable=True)
    return Attempt(ok=True)


def _excerpt(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_EXCERPT_CHARS]
