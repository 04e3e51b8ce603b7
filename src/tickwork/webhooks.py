"""Standard Webhooks signatures (https://www.standardwebhooks.com) for tickwork's requests.

Public: receivers use `verify` to check that a request came from their tickwork and is fresh,
then `FenceGuard` / `AsyncFenceGuard` (from `tickwork.fence_guard`) to apply each occurrence
once and refuse superseded leases; tickwork's executor uses `sign` / `signature_headers` and
`fenced_id` to produce the headers.

What is signed is exactly what the standard signs: `{webhook-id}.{webhook-timestamp}.{body}`
with HMAC-SHA256, sent as `webhook-signature: v1,<base64>`; several signatures are separated by
spaces so a secret can be rotated without downtime (sign with old and new, verify with either).
The `tickwork-*` headers (job id, scheduled instant, attempt, fence) are NOT covered by the
signature; `verify` parses them for convenience. The fence that matters is the one inside the
signed `webhook-id` (`<occurrence key>@f<fence>`, see `fenced_id`); `FenceGuard` uses only that.

Exceptions:

TickworkError
 +-- WebhookVerificationError   the request is not authentic or not fresh; `reason` says why
ValueError                      a configuration mistake: a malformed secret, no secrets at all
 +-- UnfencedDeliveryError     a FenceGuard was given a delivery whose id carries no fence
TypeError                       a call mistake: `body` that is not the raw body (None, a dict
                                parsed from JSON), secrets as one string
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from secrets import token_bytes
from typing import Protocol

from tickwork.errors import TickworkError
from tickwork.fence_guard import (
    AiosqliteFenceStore,
    AsyncFenceGuard,
    AsyncMemoryFenceStore,
    AsyncpgFenceStore,
    Decision,
    FenceGuard,
    MemoryFenceStore,
    SqliteFenceStore,
    UnfencedDeliveryError,
)

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "AiosqliteFenceStore",
    "AsyncFenceGuard",
    "AsyncMemoryFenceStore",
    "AsyncpgFenceStore",
    "Decision",
    "FenceGuard",
    "MemoryFenceStore",
    "MemorySeenKeys",
    "SeenKeys",
    "SqliteFenceStore",
    "UnfencedDeliveryError",
    "Verified",
    "WebhookVerificationError",
    "fenced_id",
    "fingerprint",
    "generate_secret",
    "parse_secret",
    "parse_webhook_id",
    "sign",
    "signature_headers",
    "verify",
]

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the standard asks for 24 to 64 random bytes
MIN_SECRET_BYTES = 24
MAX_SIGNING_SECRETS = 2  # current + next during a rotation; more is a forgotten cleanup
DEFAULT_TOLERANCE_S = 300  # what the reference libraries (standardwebhooks, svix, Stripe) use
SIGNATURE_VERSION = "v1"

ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
FENCE_HEADER = "tickwork-fence"

# Between the occurrence key and the fence in a webhook-id. An occurrence key is
# `<job id>:<epoch ms>[:manual]` (job ids are 32 hex digits) and never contains '@', so the last
# '@f' in an id always starts the fence, whatever the key looks like.
FENCE_SEPARATOR = "@f"
MAX_FENCE_DIGITS = 19  # fences are BIGINTs: at most 19 digits


class WebhookVerificationError(TickworkError):
    """The request failed verification; answer it with 400/401 and do not act on it."""

    code = "webhook_unverified"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SeenKeys(Protocol):
    """Remembers webhook ids, for duplicate detection."""

    def add(self, key: str) -> bool:
        """Record `key`; True if it is new, False if it was already present."""
        ...


class MemorySeenKeys:
    """In-process `SeenKeys` holding the `max_keys` most recently seen ids (LRU eviction).

    A fast path only: it forgets on restart and across processes. The durable check is a unique
    key on `webhook-id` in the receiver's own database, written with the effect.
    """

    def __init__(self, max_keys: int = 100_000) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys: must be at least 1, got {max_keys}")
        self._max_keys = max_keys
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str) -> bool:
        if key in self._keys:
            # Refresh: an id that keeps coming back (a retrying sender) stays remembered.
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self._max_keys:
            self._keys.popitem(last=False)
        return True

    def discard(self, key: str) -> None:
        """Forget `key`; call it when processing failed, so the retry is not a duplicate."""
        self._keys.pop(key, None)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __len__(self) -> int:
        return len(self._keys)


@dataclass(frozen=True, kw_only=True, slots=True)
class Verified:
    """A request that passed `verify`. Only msg_id, timestamp and the body are signed, so
    `occurrence` and `fence` (parsed from msg_id) are authentic; the other fields are not."""

    msg_id: str  # webhook-id: `<occurrence>@f<fence>`, new whenever a new lease sends it
    occurrence: str  # msg_id without its fence: the same for every attempt of one occurrence
    fence: int | None  # from the signed msg_id; None when it carries none (an alert, old sender)
    timestamp: int  # webhook-timestamp, Unix seconds, new for every attempt
    job_id: str | None  # tickwork-job-id
    scheduled_for: datetime | None  # tickwork-scheduled-for, the occurrence's nominal instant
    # tickwork-planned-for: sent only for a jittered or windowed occurrence
    planned_for: datetime | None
    attempt: int | None  # tickwork-attempt, from 1
    duplicate: bool  # `seen` already had the occurrence (False when no `seen` was given)


def fenced_id(key: str, fence: int) -> str:
    """The `webhook-id` tickwork sends: the occurrence key, '@f', then the lease's fence token.

    Signing the fence inside the id is what makes it trustworthy: the standard signs only the
    id, the timestamp and the body.
    """
    if fence < 0:
        raise ValueError(f"fence: must be >= 0, got {fence}")
    return f"{key}{FENCE_SEPARATOR}{fence}"


def parse_webhook_id(msg_id: str) -> tuple[str, int | None]:
    """Split a `webhook-id` into (occurrence, fence); fence is None when the id carries none.

    An id without a well-formed `@f<digits>` tail (a dead-letter alert's, a tickwork older than
    the fenced ids, another sender's) is an occurrence of its own with no fence.
    """
    if not isinstance(msg_id, str):
        raise TypeError(f"msg_id: pass the webhook-id header as str, not {type(msg_id).__name__}")
    occurrence, separator, digits = msg_id.rpartition(FENCE_SEPARATOR)
    if (
        separator
        and occurrence
        and digits.isascii()
        and digits.isdigit()
        and len(digits) <= MAX_FENCE_DIGITS
    ):
        return occurrence, int(digits)
    return msg_id, None


def generate_secret() -> str:
    """A new signing secret, `whsec_` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(token_bytes(SECRET_BYTES)).decode("ascii")


def parse_secret(secret: str) -> bytes:
    """The HMAC key inside a `whsec_<base64>` secret (the prefix is optional)."""
    text = secret.strip()
    encoded = text.removeprefix(SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(
            "secret: expected 'whsec_' followed by base64 (generate one with"
            " tickwork.webhooks.generate_secret())"
        ) from None
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(
            f"secret: decodes to {len(key)} bytes; use at least {MIN_SECRET_BYTES}"
            " random bytes (generate one with tickwork.webhooks.generate_secret())"
        )
    return key


def fingerprint(secret: str) -> str:
    """A short, non-reversible tag of a secret: the first 8 hex digits of SHA-256 of its key.

    tickwork shows these instead of secrets (which it never shows), so an operator can tell
    which secrets are configured, e.g. whether a rotation has happened; compute the same on
    your side with this function. 32 bits identify a secret among a handful; they say
    nothing usable about a 24+ byte random key.
    """
    return hashlib.sha256(parse_secret(secret)).hexdigest()[:8]


def sign(*, msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str]) -> str:
    """The `webhook-signature` value: one `v1,<base64>` per secret, separated by spaces."""
    keys = _keys(secrets)
    if len(keys) > MAX_SIGNING_SECRETS:
        raise ValueError(
            f"secrets: sign with at most {MAX_SIGNING_SECRETS} (the current and the next one"
            f" during a rotation), got {len(keys)}"
        )
    if timestamp < 0:
        raise ValueError(f"timestamp: must be Unix seconds >= 0, got {timestamp}")
    content = _signed_content(msg_id, timestamp, body)
    return " ".join(_signature(key, content) for key in keys)


def signature_headers(
    *, msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str]
) -> dict[str, str]:
    """The three Standard Webhooks headers for one request."""
    return {
        ID_HEADER: msg_id,
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(msg_id=msg_id, timestamp=timestamp, body=body, secrets=secrets),
    }


def verify(
    *,
    headers: Mapping[str, str] | Mapping[bytes, bytes],
    body: bytes | bytearray | memoryview | str,
    secrets: Sequence[str],
    now: datetime | None = None,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    seen: SeenKeys | None = None,
) -> Verified:
    """Check a request's signature and freshness; raise WebhookVerificationError if it fails.

    `body` must be the raw body received, before any JSON parsing: bytes (`b""` for a request
    without one, such as a GET webhook), or that text decoded as UTF-8. Anything else, None
    included, is a TypeError saying so; parse the JSON only after `verify` returned. `headers`
    may have str or bytes names and values (bytes as in ASGI, read as Latin-1). `now` defaults
    to the system clock (this helper runs in the user's receiver; tickwork's own code passes an
    instant from its Clock). `seen` records the occurrence (every attempt of one occurrence is
    a duplicate of the first), and only after the signature checked out, so forged requests
    cannot fill it. A `tickwork-fence` header that disagrees with the fence signed in the id
    was altered on the way: that is a verification failure.
    """
    raw = _raw_body(body)
    keys = _keys(secrets)
    if tolerance_s <= 0:
        raise ValueError(f"tolerance_s: must be positive, got {tolerance_s}")
    fields = _header_fields(headers)
    msg_id = _required(fields, ID_HEADER)
    timestamp = _parse_timestamp(_required(fields, TIMESTAMP_HEADER))
    signatures = _required(fields, SIGNATURE_HEADER)
    _check_fresh(timestamp, now if now is not None else datetime.now(UTC), tolerance_s)
    try:
        content = _signed_content(msg_id, timestamp, raw)
    except UnicodeEncodeError:
        raise WebhookVerificationError(f"{ID_HEADER} is not valid text") from None
    _check_signatures(signatures, keys, content)
    occurrence, fence = parse_webhook_id(msg_id)
    _check_fence_header(_optional_int(fields, FENCE_HEADER), fence)
    return Verified(
        msg_id=msg_id,
        occurrence=occurrence,
        fence=fence,
        timestamp=timestamp,
        job_id=fields.get("tickwork-job-id"),
        scheduled_for=_optional_instant(fields, "tickwork-scheduled-for"),
        planned_for=_optional_instant(fields, "tickwork-planned-for"),
        attempt=_optional_int(fields, "tickwork-attempt"),
        duplicate=seen is not None and not seen.add(occurrence),
    )


def _check_fence_header(header: int | None, signed: int | None) -> None:
    # Without a signed fence (an old sender) the header is not trusted at all: Verified.fence
    # stays None, so a forged header can neither raise nor lower what a FenceGuard compares.
    if header is not None and signed is not None and header != signed:
        raise WebhookVerificationError(
            f"{FENCE_HEADER} is {header} but the signed {ID_HEADER} carries fence {signed}"
            " (the unsigned header was altered)"
        )


def _raw_body(body: object) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        try:
            return body.encode("utf-8")
        except UnicodeEncodeError:
            raise WebhookVerificationError(
                "body: the text is not valid Unicode (a lone surrogate); pass the raw bytes"
                " received"
            ) from None
    if body is None:
        raise TypeError(
            "body: pass the raw request body as bytes (b'' for a request without a body), not None"
        )
    raise TypeError(
        f"body: pass the raw request body as bytes, as received, not a {type(body).__name__}"
        " (verify before parsing the JSON: the signature covers the exact bytes)"
    )


def _header_fields(headers: object) -> dict[str, str]:
    if not isinstance(headers, Mapping):
        raise TypeError(f"headers: pass a mapping of header names to values, not {type(headers)}")
    fields: dict[str, str] = {}
    for name, value in headers.items():
        fields[_text(name, "header name").lower()] = _text(value, f"header {name!r}")
    return fields


def _text(value: object, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("latin-1")
    raise TypeError(f"headers: {what} must be str or bytes, not {type(value).__name__}")


def _keys(secrets: Sequence[str]) -> list[bytes]:
    # A bare string is a Sequence[str] too; iterating its characters would be a silent mess.
    if isinstance(secrets, str):
        raise TypeError("secrets: pass a list of secrets, e.g. [secret]")
    if not secrets:
        raise ValueError("secrets: give at least one secret")
    return [_parsed_key(secret) for secret in secrets]


# Keys parsed from the secrets that signed lately: the same few secrets sign every request of a
# worker, and decoding one per request was a visible share of a webhook's dispatch (issue 22).
_PARSED_KEYS: dict[str, bytes] = {}
_PARSED_KEYS_KEPT = 256


def _parsed_key(secret: str) -> bytes:
    key = _PARSED_KEYS.get(secret)
    if key is None:
        key = parse_secret(secret)  # raises on a bad secret: nothing is kept for it
        if len(_PARSED_KEYS) >= _PARSED_KEYS_KEPT:
            _PARSED_KEYS.clear()
        _PARSED_KEYS[secret] = key
    return key


def _signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    return f"{msg_id}.{timestamp}.".encode() + body


# One keyed HMAC per signing key, copied per message: copying skips OpenSSL's key setup and
# digest lookup, a third of hmac.digest's time for a webhook-sized message.
_MACS: dict[bytes, hmac.HMAC] = {}


def _signature(key: bytes, content: bytes) -> str:
    keyed = _MACS.get(key)
    if keyed is None:
        if len(_MACS) >= _PARSED_KEYS_KEPT:
            _MACS.clear()
        keyed = _MACS[key] = hmac.new(key, digestmod=hashlib.sha256)
    mac = keyed.copy()
    mac.update(content)
    return f"{SIGNATURE_VERSION},{base64.b64encode(mac.digest()).decode('ascii')}"


def _required(fields: Mapping[str, str], name: str) -> str:
    value = fields.get(name, "").strip()
    if not value:
        raise WebhookVerificationError(f"missing header {name}")
    return value


def _parse_timestamp(text: str) -> int:
    # Digits only and a sane length: no sign, no fraction, no 10**4000 to convert.
    if not (text.isascii() and text.isdigit() and len(text) <= 12):
        raise WebhookVerificationError(
            f"{TIMESTAMP_HEADER} must be whole Unix seconds, got {text[:40]!r}"
        )
    return int(text)


def _check_fresh(timestamp: int, now: datetime, tolerance_s: int) -> None:
    if now.tzinfo is None:
        raise ValueError("now: naive datetime; pass an aware instant")
    skew_s = timestamp - now.timestamp()
    if skew_s < -tolerance_s:
        raise WebhookVerificationError(
            f"{TIMESTAMP_HEADER} is {-skew_s:.0f} s old, more than the {tolerance_s} s"
            " tolerance (a replayed request, or the clocks are out of sync)"
        )
    if skew_s > tolerance_s:
        raise WebhookVerificationError(
            f"{TIMESTAMP_HEADER} is {skew_s:.0f} s in the future, more than the {tolerance_s} s"
            " tolerance (the clocks are out of sync)"
        )


def _check_signatures(header: str, keys: Sequence[bytes], content: bytes) -> None:
    given = _v1_digests(header)
    if not given:
        raise WebhookVerificationError(f"{SIGNATURE_HEADER} has no {SIGNATURE_VERSION} signature")
    expected = [hmac.new(key, content, hashlib.sha256).digest() for key in keys]
    # compare_digest: the time taken must not tell an attacker how many leading bytes matched.
    if not any(hmac.compare_digest(e, g) for e in expected for g in given):
        raise WebhookVerificationError(
            f"no signature in {SIGNATURE_HEADER} matches any configured secret"
            " (wrong secret, or the id, timestamp or body was altered)"
        )


def _v1_digests(header: str) -> list[bytes]:
    digests = []
    for part in header.split():
        version, _, encoded = part.partition(",")
        if version != SIGNATURE_VERSION:
            continue  # e.g. v1a (ed25519): not ours to check, and not a failure by itself
        try:
            digests.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue
    return digests


def _optional_int(fields: Mapping[str, str], name: str) -> int | None:
    text = fields.get(name)
    if text is None:
        return None
    text = text.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        raise WebhookVerificationError(f"{name} must be a whole number, got {text[:40]!r}")
    return int(text)


def _optional_instant(fields: Mapping[str, str], name: str) -> datetime | None:
    text = fields.get(name)
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise WebhookVerificationError(
            f"{name} must be an ISO-8601 instant with a zone, got {text[:40]!r}"
        )
    return when.astimezone(UTC)
