"""What the executor plugs in: a `Runner` that performs one attempt, an `Alerter` for dead
letters, and the `Attempt` record a runner returns; and what the executor offers the services
that feed it fires (`FireSink`).

The executor (worker/executor.py) owns everything around an attempt: when it starts, the
concurrency limit, the lease and its heartbeat, the fenced outcome write and the retry decision
(worker/outcomes.py). A runner owns only the attempt itself. The runners are in
worker/executors/: `WebhookRunner` (webhook.py), `TaskRunner` (task.py) and `TargetRunner`
(target.py), which picks one of the two by the fire's target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from tickwork.domain.runs import Fire, RunOutcome

__all__ = ["ERROR_EXCERPT_CHARS", "Alerter", "Attempt", "FireSink", "Preparing", "Runner"]

# An attempt's error text is kept in the run's history and shown by the API: a receiver's
# answer or an exception's text is cut to this many characters.
ERROR_EXCERPT_CHARS = 500


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    """What one execution produced; `retryable` and `retry_after_ms` feed the retry rules."""

    ok: bool
    http_status: int | None = None
    error: str | None = None
    retryable: bool = False
    retry_after_ms: int | None = None


class Runner(Protocol):
    """Performs one attempt of a fire and says how it went.

    The contract a runner keeps with the executor:

    * Failures are results, not exceptions. A target that answers with an error, times out,
      cannot be reached or is refused, a task that raises: the runner returns
      `Attempt(ok=False, error=...)`, with `retryable=True` when asking again may succeed and
      `retry_after_ms` when the target said how long to wait (an HTTP `Retry-After`). The
      job's retry policy then decides between a retry and a dead letter; `retry_after_ms`
      only lengthens the backoff, up to the rules' cap (domain/retry.py).
    * A runner that raises anyway has a bug. The executor (`Executor._execute`) logs it and
      records the attempt as failed, not retryable, with the error `internal error: <type>`
      (the exception's class name): the run is dead-lettered rather than retried into the
      same bug. A cancel (shutdown) is not caught: it propagates.
    * Every attempt of one occurrence carries the same idempotency key, `fire.key` (derived
      from the job and its scheduled instant). A runner hands it to the target (webhooks: the
      `idempotency-key` header and the start of `webhook-id`; tasks: `ctx.key`), because an
      attempt can run twice: a worker that dies after the effect but before its outcome is
      written leaves the run to be leased and run again.
    * `fire.fence_token` names this attempt's lease. Every store write for the attempt (the
      outcome, a heartbeat) is checked against it, so a superseded attempt cannot overwrite a
      newer one; a runner that writes to the store passes it on, and a webhook carries it in
      its signed `webhook-id` (`<key>@f<fence>`) for receivers that want to reject a
      superseded write (`tickwork.webhooks.FenceGuard`).
    * The runner enforces the target's own timeout (`timeout_s` of the job's target) and
      reports an overrun as a retryable failure; the executor sets no deadline of its own.
    * Long attempts keep their lease through the store: the executor extends the lease of
      every fire it holds three times per lease TTL (`Executor.heartbeat`), and a task may
      extend its own at once (`ctx.heartbeat()`, a fenced `extend_leases`).
    * It runs on the event loop, up to a pool's slots of attempts at once (webhooks and tasks
      have pools of their own, with caps per tenant and per webhook origin: ADR 0023): blocking
      work goes to a thread (as `TaskRunner` does with sync tasks).
    """

    async def __call__(self, fire: Fire, /) -> Attempt:
        """Run `fire`'s attempt once and return what it produced."""
        ...


@runtime_checkable
class Preparing(Protocol):
    """A runner that can do part of an attempt's work before the fire's instant.

    The executor calls `prepare` for fires that are not due yet, a batch at a time between
    other work on the loop, so that the instant itself does less (ADR 0027: a webhook's
    request is built and signed ahead). Preparing is an optimisation only: a fire that was
    not prepared, or whose preparation is stale, runs the same. It must not raise, block or
    do I/O.
    """

    def prepare(self, fire: Fire, /) -> None:
        """Do what can be done now for `fire`'s coming attempt."""
        ...


class Alerter(Protocol):
    """Sends a job's dead-letter alert (its `on_failure` webhook).

    The executor calls it once per dead-lettered occurrence, only after the batch that
    dead-letters the run was written and the store confirmed that this outcome applied (a
    zombie whose outcome the fence rejected stays silent). The call runs as a task of its own,
    outside the fires' concurrency slots, and nobody reads its result: an alerter handles and
    reports its own failures (`worker/alerts.py` logs and counts them) and does not raise.
    """

    async def __call__(self, fire: Fire, outcome: RunOutcome, /) -> object:
        """Deliver the alert for `fire`'s dead-lettered occurrence (best effort)."""
        ...


class FireSink(Protocol):
    """Where the services that lease fires hand them over: the executor.

    The store leaser (worker/leaser.py) and the queue consumer (worker/consumer.py) lease runs
    and `submit` them; the sink runs each at its instant and writes its outcome. They lease no
    more than `room()`, so a worker that cannot keep up leaves the rest for other workers.
    """

    def room(self) -> int:
        """How many more fires the sink wants now (its backlog limit minus what it holds)."""
        ...

    async def wait_for_room(self, timeout_s: float) -> bool:
        """Wait until `room()` is above zero, at most `timeout_s`; whether it is."""
        ...

    def holds(self, run_id: int) -> bool:
        """Whether a fire of this run is waiting or running in the sink."""
        ...

    def held_run_ids(self) -> frozenset[int]:
        """Every run whose fire is waiting or running in the sink (what a take-back skips)."""
        ...

    def submit(self, fires: Sequence[Fire]) -> int:
        """Run each fire at its instant; returns how many were new (a fire already held at
        the same fence is not started twice)."""
        ...

    def on_retry_released(self, callback: Callable[[datetime], None]) -> None:
        """Call `callback(retry_at)` whenever an outcome that releases a run for a retry is
        written: whoever leases from the store must lease again by then."""
        ...
