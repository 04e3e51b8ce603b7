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

This module is the API for defining tasks; running them is the worker's
(`tickwork.worker.executors.task.TaskRunner`).
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from tickwork.errors import InvalidInput

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
    # The instant a jittered or windowed occurrence was planned at (`schedule.jitter`,
    # `schedule.window`); None: it was planned at `scheduled_for`.
    planned_for: datetime | None = None


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
