"""Dead-letter alerts: a job's `on_failure` webhook, POSTed once its occurrence is dead-lettered.

The executor calls `AlertSender` only after the fenced write that dead-letters the run has
committed, so a zombie whose write was rejected never alerts. Delivery is best effort: a few
quick attempts, then the failure is logged and counted (`tickwork_alert_failures_total`).
An alert never changes the run's outcome and runs beside the executor's fires, not in their
concurrency slots.

The request goes through the webhook runner's SSRF-guarded session and is signed with the same
secrets as the job's own requests, with `webhook-id` = `<occurrence key>:dead_letter` (one id
per occurrence, so a receiver can drop a repeated alert).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Final

from tickwork import metrics
from tickwork.clock import utc_iso
from tickwork.domain.runs import Fire, RunOutcome
from tickwork.worker.base import Attempt
from tickwork.worker.executors.webhook import USER_AGENT, WebhookRunner

log = logging.getLogger("tickwork.alerts")

ALERT_TYPE: Final = "run.dead_lettered"


@dataclass(frozen=True, kw_only=True, slots=True)
class AlertConfig:
    attempts: int = 3
    retry_delays_ms: tuple[int, ...] = (200, 1000)  # before the 2nd, 3rd... (the last repeats)
    timeout_s: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or not self.retry_delays_ms or self.timeout_s <= 0:
            raise ValueError("AlertConfig: attempts >= 1, some retry delay, timeout_s > 0")


def alert_key(fire: Fire) -> str:
    return f"{fire.key}:dead_letter"


def alert_body(fire: Fire, outcome: RunOutcome) -> dict[str, Any]:
    """The JSON document an alert carries (documented in docs/webhooks.md)."""
    return {
        "type": ALERT_TYPE,
        "job_id": fire.job_id,
        "run_id": fire.run_id,
        "key": fire.key,
        "scheduled_for": utc_iso(fire.scheduled_for),
        "dead_lettered_at": utc_iso(outcome.finished_at),
        "attempts": outcome.attempt,
        "last_error": outcome.error,
        "http_status": outcome.http_status,
    }


class AlertSender:
    def __init__(self, webhooks: WebhookRunner, config: AlertConfig | None = None) -> None:
        self._webhooks = webhooks
        self._config = config or AlertConfig()

    async def __call__(self, fire: Fire, outcome: RunOutcome) -> bool:
        """Deliver the alert for `fire`'s dead-lettered occurrence; True if it got a 2xx."""
        alert = fire.on_failure
        if alert is None:
            return False
        data = json.dumps(alert_body(fire, outcome)).encode()
        headers = {
            **alert.headers,
            "content-type": "application/json",
            "user-agent": USER_AGENT,
            "tickwork-job-id": fire.job_id,
            "idempotency-key": alert_key(fire),
        }
        _, secrets = self._webhooks.signing_for(fire)
        config = self._config
        refused = await self._webhooks.tenant_refusal(fire, alert.url)
        result = refused or Attempt(ok=False, error="not sent")
        for n in range(0 if refused is not None else config.attempts):
            if n:
                delays = config.retry_delays_ms
                await asyncio.sleep(delays[min(n - 1, len(delays) - 1)] / 1000)
            result = await self._webhooks.send(
                "POST",
                alert.url,
                headers=headers,
                data=data,
                msg_id=alert_key(fire),
                secrets=secrets,
                timeout_s=config.timeout_s,
            )
            if result.ok or not result.retryable:
                break
        return _record(fire, result)


def _record(fire: Fire, result: Attempt) -> bool:
    context = {"run_id": fire.run_id, "job_id": fire.job_id}
    if result.ok:
        metrics.ALERTS.inc()
        log.info("dead-letter alert delivered", extra={"action": "alert_sent", **context})
        return True
    metrics.ALERT_FAILURES.inc()
    log.warning(
        "dead-letter alert failed: %s",
        result.error,
        extra={"action": "alert_failed", **context},
    )
    return False
