"""tickwork: a distributed job scheduler."""

from tickwork.tasks import PermanentFailure, TaskContext, task

__all__ = ["PermanentFailure", "TaskContext", "task"]
