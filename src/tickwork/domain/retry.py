"""Retry rules for failed attempts: pure functions, no I/O, no clock, no hidden randomness.

Attempts are numbered from 1. After attempt `n` fails, `decide` says whether to try again and
after how long. The caller supplies everything that varies: the current instant (to read a
Retry-After date) and a uniform random float in [0, 1) (for the jitter), so a decision can be
replayed exactly.

Rules (docs/webhooks.md has the user-facing version):

- Backoff uses FULL jitter: the delay after attempt `n` is uniform in
  `[0, min(max_delay_ms, base_delay_ms * multiplier ** (n - 1))]`. Full jitter spreads the retries
  of many jobs that failed together (one receiver outage) instead of moving the herd in lockstep.
- Statuses: 2xx is success and never reaches these rules. 408, 425, 429 and every 5xx are
  retryable. Every other status is a permanent failure, including 3xx: tickwork does not follow
  redirects (a redirect could point anywhere, see the SSRF guard), so asking again would get the
  same redirect. Network errors and timeouts are retryable; an SSRF refusal is not.
- A non-retryable failure is dead-lettered at once; a retryable one is dead-lettered when it was
  the policy's last attempt.
- Retry-After (delta-seconds or an HTTP-date) is honoured as a lower bound on the delay, and may
  exceed `max_delay_ms`: the server said when it can take the request, and an earlier retry would
  only burn an attempt and add load to a server that is shedding it. It is capped at
  `RETRY_AFTER_MAX_MS` (1 hour) so that a buggy or hostile answer cannot park a job for days.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

RETRY_AFTER_MAX_MS = 3_600_000

RETRYABLE_STATUSES = frozenset({408, 425, 429})


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    max_attempts: int = 5  # total attempts, the first one included
    base_delay_ms: int = 1_000
    max_delay_ms: int = 300_000
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts: must be at least 1, got {self.max_attempts}")
        if self.base_delay_ms < 0:
            raise ValueError(f"base_delay_ms: must be 0 or more, got {self.base_delay_ms}")
        if self.max_delay_ms < self.base_delay_ms:
            raise ValueError(
                f"max_delay_ms: must be at least base_delay_ms ({self.base_delay_ms}),"
                f" got {self.max_delay_ms}"
            )
        if not (math.isfinite(self.multiplier) and self.multiplier >= 1.0):
            raise ValueError(f"multiplier: must be a finite number >= 1, got {self.multiplier}")


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryDecision:
    retry: bool
    delay_ms: int  # wait this long before the next attempt; 0 when not retrying
    dead_letter: bool  # the occurrence is finished as failed; never both retry and dead_letter
    reason: str  # stable slug for logs: "retry", "not_retryable", "attempts_exhausted"


def backoff_cap_ms(policy: RetryPolicy, attempt: int) -> int:
    """The upper bound of the jittered delay after `attempt` failed; grows, then stays at max."""
    _check_attempt(attempt)
    if policy.base_delay_ms == 0:  # 0 * inf below would be nan, not 0
        return 0
    try:
        raw = policy.base_delay_ms * policy.multiplier ** (attempt - 1)
    except OverflowError:  # a very late attempt: the exponent is far past the cap anyway
        raw = math.inf
    return int(min(float(policy.max_delay_ms), raw))


def backoff_ms(policy: RetryPolicy, attempt: int, rand: float) -> int:
    """Full-jitter delay after `attempt` failed: uniform over the integers in [0, cap]."""
    if not 0.0 <= rand < 1.0:
        raise ValueError(f"rand: must be in [0, 1), got {rand}")
    cap = backoff_cap_ms(policy, attempt)
    # cap + 1 buckets so that cap itself is reachable; rand < 1 keeps the result <= cap.
    return min(cap, int(rand * (cap + 1)))


def http_succeeded(status: int) -> bool:
    return 200 <= status < 300


def classify_http(status: int) -> bool:
    """Whether a failed attempt that got `status` may be retried (see the module docstring)."""
    if not 100 <= status <= 599:
        raise ValueError(f"status: not an HTTP status code: {status}")
    if http_succeeded(status):
        raise ValueError(f"status: {status} is a success, not a failure to classify")
    return status in RETRYABLE_STATUSES or status >= 500


def parse_retry_after(value: str | None, now: datetime) -> int | None:
    """Retry-After (RFC 9110 §10.2.3) in ms from `now`, capped at RETRY_AFTER_MAX_MS.

    None for a missing or unreadable value, so the caller falls back to plain backoff. An
    HTTP-date in the past means "now" (0).
    """
    if now.tzinfo is None:
        raise ValueError("now: naive datetime; pass an aware instant")
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # delay-seconds = 1*DIGIT: no sign, no fraction
        # Past 9 digits (31 years) the cap applies anyway; skipping int() also keeps a
        # megabyte of digits from costing a big-integer conversion.
        if len(text) > 9:
            return RETRY_AFTER_MAX_MS
        return min(int(text) * 1000, RETRY_AFTER_MAX_MS)
    when = _parse_http_date(text)
    if when is None:
        return None
    delta_ms = math.ceil((when - now).total_seconds() * 1000)
    return min(max(delta_ms, 0), RETRY_AFTER_MAX_MS)


def decide(
    *,
    policy: RetryPolicy,
    attempt: int,
    retryable: bool,
    retry_after_ms: int | None,
    rand: float,
) -> RetryDecision:
    """What to do after attempt number `attempt` failed."""
    _check_attempt(attempt)
    if retry_after_ms is not None and retry_after_ms < 0:
        raise ValueError(f"retry_after_ms: must be 0 or more, got {retry_after_ms}")
    if not retryable:
        return RetryDecision(retry=False, delay_ms=0, dead_letter=True, reason="not_retryable")
    if attempt >= policy.max_attempts:
        return RetryDecision(retry=False, delay_ms=0, dead_letter=True, reason="attempts_exhausted")
    delay_ms = backoff_ms(policy, attempt, rand)
    if retry_after_ms is not None:
        delay_ms = max(delay_ms, min(retry_after_ms, RETRY_AFTER_MAX_MS))
    return RetryDecision(retry=True, delay_ms=delay_ms, dead_letter=False, reason="retry")


def _check_attempt(attempt: int) -> None:
    if attempt < 1:
        raise ValueError(f"attempt: attempts are numbered from 1, got {attempt}")


def _parse_http_date(text: str) -> datetime | None:
    # email.utils reads all three HTTP-date forms RFC 9110 §5.6.7 makes recipients accept
    # (IMF-fixdate, RFC 850, asctime), without strptime's dependence on the process locale.
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    # HTTP-dates are always GMT; email.utils returns a naive datetime for asctime and "-0000".
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when
