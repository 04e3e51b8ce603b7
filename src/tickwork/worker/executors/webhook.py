"""Webhook execution: one HTTP request per attempt, carrying the occurrence's identity.

Every attempt of one occurrence sends the same `idempotency-key` / `webhook-id` (derived from
job id + scheduled instant), so a receiver can drop duplicates; `tickwork-fence` lets it reject
a write from a superseded attempt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import aiohttp

from tickwork.clock import utc_iso
from tickwork.domain.runs import Fire

USER_AGENT = "tickwork/0.1"
ERROR_EXCERPT_CHARS = 500


@dataclass(frozen=True, kw_only=True, slots=True)
class Attempt:
    ok: bool
    http_status: int | None = None
    error: str | None = None


def fire_headers(fire: Fire) -> dict[str, str]:
    return {
        "user-agent": USER_AGENT,
        "idempotency-key": fire.key,
        "webhook-id": fire.key,
        "tickwork-job-id": fire.job_id,
        "tickwork-scheduled-for": utc_iso(fire.scheduled_for),
        "tickwork-attempt": str(fire.attempt),
        "tickwork-fence": str(fire.fence_token),
    }


class WebhookRunner:
    """Sends fires as HTTP requests over one pooled aiohttp session."""

    def __init__(self, *, max_connections: int = 256) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> WebhookRunner:
        connector = aiohttp.TCPConnector(limit=self._max_connections, ttl_dns_cache=60)
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __call__(self, fire: Fire) -> Attempt:
        if self._session is None:
            raise RuntimeError("WebhookRunner used outside `async with`")
        target = fire.target
        headers = {**target.headers, **fire_headers(fire)}
        data: bytes | None = None
        if target.body is not None:
            data = json.dumps(target.body).encode()
            headers.setdefault("content-type", "application/json")
        try:
            async with self._session.request(
                target.method,
                target.url,
                headers=headers,
                data=data,
                allow_redirects=False,  # a redirect could point anywhere; the job names its URL
                timeout=aiohttp.ClientTimeout(total=target.timeout_s),
            ) as response:
                await response.read()
                if 200 <= response.status < 300:
                    return Attempt(ok=True, http_status=response.status)
                return Attempt(
                    ok=False, http_status=response.status, error=f"HTTP {response.status}"
                )
        except TimeoutError:
            return Attempt(ok=False, error=f"timed out after {target.timeout_s:g} s")
        except aiohttp.ClientError as exc:
            return Attempt(ok=False, error=f"{type(exc).__name__}: {exc}"[:ERROR_EXCERPT_CHARS])
