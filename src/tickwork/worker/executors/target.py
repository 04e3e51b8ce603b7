"""The runner a worker process uses: each fire goes to the runner for its target's kind.

A job's target is a webhook or a Python task, and one worker runs both, so the executor gets
this dispatcher as its one `Runner` (worker/base.py). It lives apart from the two runners it
chooses between so that neither depends on the other.
"""

from __future__ import annotations

from tickwork.domain.jobs import TaskTarget
from tickwork.domain.runs import Fire
from tickwork.worker.base import ERROR_EXCERPT_CHARS, Attempt, Preparing, Runner

__all__ = ["TargetRunner"]


class TargetRunner:
    """Dispatches each fire to the runner for its target's kind."""

    def __init__(self, webhooks: Runner, tasks: Runner) -> None:
        self._webhooks = webhooks
        self._tasks = tasks

    def prepare(self, fire: Fire) -> None:
        """Let the webhook runner build `fire`'s request ahead (tasks have nothing to
        prepare)."""
        webhooks = self._webhooks
        readable = fire.unreadable is None
        if readable and isinstance(webhooks, Preparing) and not isinstance(fire.target, TaskTarget):
            webhooks.prepare(fire)

    async def __call__(self, fire: Fire) -> Attempt:
        if fire.unreadable is not None:  # a stored secret this process has no key for
            return Attempt(ok=False, error=fire.unreadable[:ERROR_EXCERPT_CHARS])
        if isinstance(fire.target, TaskTarget):
            return await self._tasks(fire)
        return await self._webhooks(fire)
