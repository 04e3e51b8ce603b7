"""Webhook execution: one HTTP request per attempt, carrying the occurrence's identity.

Every attempt of one occurrence sends the same `idempotency-key` (derived from job id +
scheduled instant), so a receiver can drop duplicates; the signed `webhook-id` is that key plus
the lease's fence (`<key>@f<fence>`), so a receiver can also refuse a superseded lease's request
(`tickwork.webhooks.FenceGuard`); `tickwork-fence` repeats the fence, unsigned. Requests are
signed the Standard Webhooks way (`tickwork.webhooks.verify` checks it on the receiving side)
with the job's secrets, else its tenant's (both carried by the fire), else this process's, else
not at all.

Requests go out through `http1.Http1Client` (pooled keep-alive connections; ADR 0010 says
why not aiohttp's client), with verified TLS (plus an operator's CA bundle) and through the
outbound proxy, if one is configured (`proxy.py`). Every connection goes through the SSRF
guard (`ssrf.py`): loopback, private, link-local, metadata and other non-global addresses are
refused unless the allow-list names them, and the address checked is the address connected
to. Before that, the job's
tenant's destination lists (`worker/tenant_lists.py`) may refuse the URL: a refusal is final
(not retried), its error names the tenant and the list.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tickwork.clock import Clock, SystemClock, utc_iso
from tickwork.domain.jobs import WebhookTarget
from tickwork.domain.retry import classify_http, http_succeeded, parse_retry_after
from tickwork.domain.runs import Fire
from tickwork.domain.signing import SigningSource, resolve_secrets
from tickwork.webhooks import fenced_id, sign
from tickwork.worker.base import ERROR_EXCERPT_CHARS, Attempt
from tickwork.worker.executors.http1 import Http1Client, Prepared, ProxyFailed, Resolve
from tickwork.worker.executors.proxy import ProxyRoutes
from tickwork.worker.executors.ssrf import AddressPolicy, EgressRefused
from tickwork.worker.tenant_lists import TenantLists

USER_AGENT = "tickwork/0.1"
# A request prepared ahead of its fire is sent as built if signed at most this long before its
# start; a fire held back longer (a cap, a slow target's lane) is signed anew. Receivers
# tolerate 5 minutes of skew (Standard Webhooks), so this leaves them almost all of it.
PREPARED_FRESH_S = 30.0
PREPARED_KEPT = 20_000  # prepared requests held (a herd's worth, several times over)


@dataclass(frozen=True, slots=True)
class _Request:
    """A fire's request built ahead: for its run at `fence`, signed at `signed_at` (epoch s)."""

    request: Prepared
    fence: int
    signed_at: int


_instant_text = functools.lru_cache(maxsize=256)(utc_iso)  # a herd's fires share one instant


def fire_headers(fire: Fire) -> dict[str, str]:
    headers = {
        "user-agent": USER_AGENT,
        "idempotency-key": fire.key,
        "webhook-id": fenced_id(fire.key, fire.fence_token),
        "tickwork-job-id": fire.job_id,
        "tickwork-scheduled-for": _instant_text(fire.scheduled_for),
        "tickwork-attempt": str(fire.attempt),
        "tickwork-fence": str(fire.fence_token),
    }
    if fire.planned_for is not None:
        # Only for a jittered or windowed occurrence: the instant it was planned at.
        headers["tickwork-planned-for"] = _instant_text(fire.planned_for)
    return headers


class WebhookRunner:
    """Sends fires as HTTP requests over one pooled, SSRF-guarded HTTP/1.1 client."""

    def __init__(
        self,
        *,
        policy: AddressPolicy | None = None,
        secrets: Sequence[str] = (),
        clock: Clock | None = None,
        max_connections: int = 256,
        resolve: Resolve | None = None,
        tenant_lists: TenantLists | None = None,
        ca_bundle: str | None = None,
        proxies: ProxyRoutes | None = None,
    ) -> None:
        """`resolve` replaces the system's name lookup (tests check the guard with a stub).
        `tenant_lists`: the tenants' destination lists (None: no tenant has any).
        `ca_bundle`: a PEM file of CAs trusted besides the system's; `proxies`: the outbound
        proxy of each target (default: none)."""
        self._tenant_lists = tenant_lists
        self._ca_bundle = ca_bundle
        self._proxies = proxies
        self._policy = policy or AddressPolicy()
        self._secrets = tuple(secrets)
        self._clock = clock or SystemClock()
        self._max_connections = max_connections
        self._resolve = resolve
        self._http: Http1Client | None = None
        self._prepared: dict[int, _Request] = {}  # run id -> its request, built ahead

    async def __aenter__(self) -> WebhookRunner:
        self._http = Http1Client(
            self._policy,
            max_connections=self._max_connections,
            resolve=self._resolve,
            clock=self._clock,
            ca_bundle=self._ca_bundle,
            proxies=self._proxies,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def signing_for(self, fire: Fire) -> tuple[SigningSource, tuple[str, ...]]:
        """Which secrets sign requests for `fire`'s job (its own, its tenant's, ours, none)."""
        target = fire.target
        if isinstance(target, WebhookTarget) and not target.signed:
            return SigningSource.NONE, ()  # the job opted out of signing
        return resolve_secrets(
            job=target.secrets if isinstance(target, WebhookTarget) else (),
            tenant=fire.tenant_secrets,
            process=self._secrets,
        )

    async def tenant_refusal(self, fire: Fire, url: str) -> Attempt | None:
        """The failed attempt to record when the lists of `fire`'s tenant refuse `url`, or
        None when they let it through."""
        if self._tenant_lists is None:
            return None
        try:
            reason = await self._tenant_lists.refusal(fire.job_id, url)
        except Exception as exc:  # the store did not answer: the next attempt may find it
            error = f"could not read the tenant's destination lists: {type(exc).__name__}: {exc}"
            return Attempt(ok=False, error=error[:ERROR_EXCERPT_CHARS], retryable=True)
        if reason is None:
            return None
        # The lists will refuse it again until an admin changes them: not retried.
        return Attempt(ok=False, error=f"refused by the tenant's destination lists: {reason}")

    def prepare(self, fire: Fire) -> None:
        """Build `fire`'s request ahead of its instant, so that the instant only writes it.

        At the top of a second 1,000 webhooks can be due at once in one process, and they
        start one after another on its event loop: each one's headers, signature and bytes,
        built at its start, were about a third of what delayed the ones after it (ADR 0027).
        The executor calls this for fires that are not due yet. The request is kept for this
        run at this fence; its signature's timestamp is the time of preparing, and one older
        than `PREPARED_FRESH_S` when the fire starts (a fire held back by a cap) is signed
        anew. A request that cannot be built is left to the start, which reports why."""
        target = fire.target
        if not isinstance(target, WebhookTarget) or self._http is None:
            return
        try:
            request = self._build(fire, target)
        except (EgressRefused, ValueError):
            return
        if len(self._prepared) >= PREPARED_KEPT:
            self._prepared.clear()  # fires that never started (stopped, shut down): let go
        self._prepared[fire.run_id] = request

    async def __call__(self, fire: Fire) -> Attempt:
        target = fire.target
        if not isinstance(target, WebhookTarget):
            raise TypeError("WebhookRunner runs webhook targets only")
        refused = await self.tenant_refusal(fire, target.url)
        if refused is not None:
            return refused
        request = self._prepared.pop(fire.run_id, None)
        if (
            request is None
            or request.fence != fire.fence_token
            or self._clock.now().timestamp() - request.signed_at > PREPARED_FRESH_S
        ):
            try:
                request = self._build(fire, target)
            except Exception as exc:
                return self._failed(exc, target.timeout_s)
        return await self._deliver(request.request, target.timeout_s)

    def _build(self, fire: Fire, target: WebhookTarget) -> _Request:
        headers = {**target.headers, **fire_headers(fire)}
        data: bytes | None = None
        if target.body is not None:
            data = json.dumps(target.body).encode()
            headers.setdefault("content-type", "application/json")
        _, secrets = self.signing_for(fire)
        timestamp = self._sign_into(headers, headers["webhook-id"], data, secrets)
        http = self._client()
        request = http.prepare(target.method, target.url, headers=headers, body=data)
        return _Request(request, fire.fence_token, timestamp)

    async def send(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        data: bytes | None,
        msg_id: str,
        secrets: Sequence[str],
        timeout_s: float,
    ) -> Attempt:
        """One request through the guarded client, signed with `secrets` (if any)."""
        # The signature covers this id, so the header is always the id that was signed.
        headers = {**headers, "webhook-id": msg_id}
        self._sign_into(headers, msg_id, data, secrets)
        try:
            request = self._client().prepare(method, url, headers=headers, body=data)
        except Exception as exc:
            return self._failed(exc, timeout_s)
        return await self._deliver(request, timeout_s)

    def _client(self) -> Http1Client:
        if self._http is None:
            raise RuntimeError("WebhookRunner used outside `async with`")
        return self._http

    def _sign_into(
        self, headers: dict[str, str], msg_id: str, data: bytes | None, secrets: Sequence[str]
    ) -> int:
        """Add the signature headers (if there are secrets); returns the timestamp signed."""
        timestamp = int(self._clock.now().timestamp())
        if secrets:
            headers["webhook-timestamp"] = str(timestamp)
            headers["webhook-signature"] = sign(
                msg_id=msg_id, timestamp=timestamp, body=data or b"", secrets=secrets
            )
        return timestamp

    async def _deliver(self, request: Prepared, timeout_s: float) -> Attempt:
        try:
            # Redirects are never followed: a redirect could point anywhere; the job names
            # its URL.
            response = await self._client().send(request, timeout_s)
        except Exception as exc:
            return self._failed(exc, timeout_s)
        return self._judge(response.status, response.headers.get("retry-after"))

    def _failed(self, exc: Exception, timeout_s: float) -> Attempt:
        """The attempt a request that raised `exc` (building or sending it) makes."""
        if isinstance(exc, TimeoutError):
            return Attempt(ok=False, error=f"timed out after {timeout_s:g} s", retryable=True)
        if isinstance(exc, EgressRefused):  # asking again would be refused again: not retryable
            hint = "allow it with TICKWORK_WEBHOOK_ALLOW if this target is intended"
            return Attempt(ok=False, error=f"refused by the SSRF guard: {exc}; {hint}")
        if isinstance(exc, ssl.SSLCertVerificationError):
            # Checked before ValueError, which it also is. Not retried: a certificate is fixed
            # by a person (renewed, or its CA added), not by asking again within seconds; the
            # job's next occurrence tries anew.
            error = (
                f"TLS certificate verification failed: {exc.verify_message or exc}; if the"
                " target's CA is private, add it with TICKWORK_WEBHOOK_CA_BUNDLE"
            )
            return Attempt(ok=False, error=error[:ERROR_EXCERPT_CHARS])
        if isinstance(exc, ValueError):  # a header that cannot be sent: fix the job, not a retry
            return Attempt(ok=False, error=str(exc)[:ERROR_EXCERPT_CHARS])
        if isinstance(exc, ProxyFailed):
            error = str(exc)[:ERROR_EXCERPT_CHARS]
            return Attempt(ok=False, error=error, retryable=exc.retryable)
        if isinstance(exc, OSError):
            error = f"{type(exc).__name__}: {exc}"[:ERROR_EXCERPT_CHARS]
            return Attempt(ok=False, error=error, retryable=True)
        raise exc

    def _judge(self, status: int, retry_after: str | None) -> Attempt:
        if http_succeeded(status):
            return Attempt(ok=True, http_status=status)
        return Attempt(
            ok=False,
            http_status=status,
            error=f"HTTP {status}",
            retryable=classify_http(status),
            retry_after_ms=parse_retry_after(retry_after, self._clock.now()),
        )
