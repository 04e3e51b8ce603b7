"""Python tasks: functions that jobs run in worker processes, instead of calling a webhook.

    import tickwork

    @tickwork.task("reports.build")
    async def build(ctx: tickwork.TaskContext) -> None:
        ...                     # ctx.args is the job's `args`; ctx.key is the idempotency key
        await ctx.heartbeat()   # long tasks: keep the lease (it is also renewed automatically)

A worker started with `tickwork worker --import myapp.tasks` (or `tickwork up --import ...`)
imports the module, which registers its tasks. Sync functions run in a thread; a task that
outlives the job's timeout is cancelled (a sync one is abandoned in its thread). Retries follow
the job's policy: an exception is a retryable failure, `PermanentFailure` is not.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from tickwork.clock import Clock
from tickwork.domain.jobs import TaskTarget
from tickwork.domain.runs import Fire
from tickwork.errors import InvalidInput
from tickwork.store.base import ScheduleStore
from tickwork.worker.deadlines import Deadlines
from tickwork.worker.executors.webhook import ERROR_EXCERPT_CHARS, Attempt

__all__ = ["PermanentFailure", "TaskContext", "TaskRegistry", "import_task_modules", "task"]

TaskFunction = Callable[["TaskContext"], Any]
F = TypeVar("F", bound=TaskFunction)


class PermanentFailure(Exception):
    """Raise it from a task to fail without retries (the run is dead-lettered at once)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskContext:
    job_id: str
    run_id: int
    key: str  # the occurrence's idempotency key: the same on every attempt
    scheduled_for: datetime
    attempt: int
    fence_token: int
    args: Any
    heartbeat: Callable[[], Awaitable[None]]


class TaskRegistry:
    def __init__(self) -> None:
        self._tasks: dict[str, TaskFunction] = {}

    def task(self, name: str) -> Callable[[F], F]:
        """Register the decorated function (sync or async, taking a TaskContext) as `name`."""
        if not name or len(name) > 200:
            raise ValueError("task names are 1 to 200 characters")

        def register(fn: F) -> F:
            if name in self._tasks and self._tasks[name] is not fn:
                raise ValueError(f"a task named {name!r} is already registered")
            self._tasks[name] = fn
            return fn

        return register

    def get(self, name: str) -> TaskFunction | None:
        return self._tasks.get(name)

    def names(self) -> list[str]:
        return sorted(self._tasks)


DEFAULT_REGISTRY = TaskRegistry()
task = DEFAULT_REGISTRY.task


def import_task_modules(modules: Iterable[str]) -> None:
    """Import the modules that register tasks (`--import`); a bad name is a clear error."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise InvalidInput("import", f"cannot import {module!r}: {exc}") from None


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
            # Parsed targets are shared between fires (store/sql/rows.py): a task that
            # mutates its args must not change what the job's next fire receives.
            args=copy.deepcopy(target.args)
            if isinstance(target.args, dict | list)
            else target.args,
            heartbeat=lambda: self._heartbeat(fire),
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
            timed_out = deadlines.end(task)
            # Our cancel is spent; only a cancel from elsewhere (shutdown) may remain.
            outside_cancel = timed_out and task.uncancel() > 0
    except asyncio.CancelledError:
        if not timed_out or outside_cancel:
            raise
        return Attempt(ok=False, error=f"timed out after {timeout_s:g} s", retryable=True)
    except PermanentFailure as exc:
        return Attempt(ok=False, error=_excerpt(exc))
    except Exception as exc:
        return Attempt(ok=False, error=_excerpt(exc), retryable=True)
    return Attempt(ok=True)


def _excerpt(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:ERROR_EXCERPT_CHARS]


class TargetRunner:
    """Dispatches each fire to the runner for its target's kind."""

    def __init__(
        self,
        webhooks: Callable[[Fire], Awaitable[Attempt]],
        tasks: Callable[[Fire], Awaitable[Attempt]],
    ) -> None:
        self._webhooks = webhooks
        self._tasks = tasks

    async def __call__(self, fire: Fire) -> Attempt:
        if isinstance(fire.target, TaskTarget):
            return await self._tasks(fire)
        return await self._webhooks(fire)
