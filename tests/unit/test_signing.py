"""Standard Webhooks signing and verification (tickwork.webhooks)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.errors import TickworkError
from tickwork.webhooks import (
    MemorySeenKeys,
    Verified,
    WebhookVerificationError,
    fenced_id,
    generate_secret,
    parse_secret,
    parse_webhook_id,
    sign,
    signature_headers,
    verify,
)

# The example published with the Standard Webhooks spec (and used by the svix libraries).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TS = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

OLD = "whsec_" + base64.b64encode(bytes(range(32))).decode()
NEW = "whsec_" + base64.b64encode(bytes(range(100, 132))).decode()
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TS = int(NOW.timestamp())
OCCURRENCE = "job-7:1772366400000"
MSG_ID = f"{OCCURRENCE}@f41"  # what tickwork sends: the occurrence key and the lease's fence
BODY = b'{"report": "daily"}'


def request(
    *, secrets: list[str] | None = None, ts: int = TS, msg_id: str = MSG_ID, body: bytes = BODY
) -> dict[str, str]:
    headers = signature_headers(msg_id=msg_id, timestamp=ts, body=body, secrets=secrets or [OLD])
    _, fence = parse_webhook_id(msg_id)
    return {
        **headers,
        "tickwork-job-id": "job-7",
        "tickwork-scheduled-for": "2026-03-01T12:00:00Z",
        "tickwork-attempt": "2",
        **({"tickwork-fence": str(fence)} if fence is not None else {}),
    }


def check(
    headers: dict[str, str], *, body: bytes = BODY, secrets: list[str] | None = None
) -> Verified:
    return verify(headers=headers, body=body, secrets=secrets or [OLD], now=NOW)


# -- secrets ------------------------------------------------------------------------------------


def test_generated_secrets_are_prefixed_random_and_parse() -> None:
    a, b = generate_secret(), generate_secret()
    assert a.startswith("whsec_")
    assert a != b
    assert len(parse_secret(a)) == 32


def test_parse_secret_accepts_the_bare_base64_form() -> None:
    assert parse_secret(SPEC_SECRET) == parse_secret(SPEC_SECRET.removeprefix("whsec_"))


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("whsec_not base64!", "expected 'whsec_' followed by base64"),
        ("whsec_", "decodes to 0 bytes"),
        ("whsec_" + base64.b64encode(b"short").decode(), "decodes to 5 bytes"),
        ("whsec_ÄÖÜ", "expected 'whsec_'"),
    ],
)
def test_parse_secret_rejects_bad_secrets_clearly(secret: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_secret(secret)


# -- signing ------------------------------------------------------------------------------------


def test_spec_example_signature() -> None:
    got = sign(msg_id=SPEC_ID, timestamp=SPEC_TS, body=SPEC_BODY, secrets=[SPEC_SECRET])
    assert got == SPEC_SIGNATURE


def test_signature_format_computed_by_hand() -> None:
    key = bytes(range(32))
    mac = hmac.new(key, f"{MSG_ID}.{TS}.".encode() + BODY, hashlib.sha256).digest()
    expected = "v1," + base64.b64encode(mac).decode()
    assert sign(msg_id=MSG_ID, timestamp=TS, body=BODY, secrets=[OLD]) == expected


def test_signature_headers() -> None:
    headers = signature_headers(msg_id=MSG_ID, timestamp=TS, body=BODY, secrets=[OLD])
    assert headers == {
        "webhook-id": MSG_ID,
        "webhook-timestamp": str(TS),
        "webhook-signature": sign(msg_id=MSG_ID, timestamp=TS, body=BODY, secrets=[OLD]),
    }


def test_rotation_signs_with_both_secrets_space_separated() -> None:
    both = sign(msg_id=MSG_ID, timestamp=TS, body=BODY, secrets=[OLD, NEW])
    old = sign(msg_id=MSG_ID, timestamp=TS, body=BODY, secrets=[OLD])
    new = sign(msg_id=MSG_ID, timestamp=TS, body=BODY, secrets=[NEW])
    assert both == f"{old} {new}"


@pytest.mark.parametrize(
    ("secrets", "error", "message"),
    [
        ([], ValueError, "at least one secret"),
        ([OLD, NEW, generate_secret()], ValueError, "at most 2"),
        (OLD, TypeError, "pass a list"),
    ],
)
def test_sign_rejects_bad_secret_lists(
    secrets: list[str], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        sign(msg_id=MSG_ID, timestamp=TS, body=BODY, secrets=secrets)


# -- verification: the happy path ---------------------------------------------------------------


def test_verify_returns_the_request_identity() -> None:
    assert check(request()) == Verified(
        msg_id=MSG_ID,
        occurrence=OCCURRENCE,
        timestamp=TS,
        job_id="job-7",
        scheduled_for=datetime(2026, 3, 1, 12, 0, tzinfo=UTC),
        planned_for=None,
        attempt=2,
        fence=41,
        duplicate=False,
    )


def test_verify_without_tickwork_headers() -> None:
    headers = signature_headers(
        msg_id=SPEC_ID, timestamp=SPEC_TS, body=SPEC_BODY, secrets=[SPEC_SECRET]
    )
    got = verify(
        headers=headers,
        body=SPEC_BODY,
        secrets=[SPEC_SECRET],
        now=datetime.fromtimestamp(SPEC_TS, UTC),
    )
    assert (got.job_id, got.scheduled_for, got.attempt, got.fence) == (None, None, None, None)


def test_header_names_are_case_insensitive() -> None:
    headers = {name.title(): value for name, value in request().items()}
    assert check(headers).msg_id == MSG_ID


def test_verify_uses_the_system_clock_by_default() -> None:
    now = int(datetime.now(UTC).timestamp())
    headers = request(ts=now)
    assert verify(headers=headers, body=BODY, secrets=[OLD]).timestamp == now


@pytest.mark.parametrize(
    ("signed_with", "verified_with"),
    [([OLD, NEW], [OLD]), ([OLD, NEW], [NEW]), ([OLD], [NEW, OLD]), ([NEW], [OLD, NEW])],
)
def test_rotation_either_secret_verifies(signed_with: list[str], verified_with: list[str]) -> None:
    assert check(request(secrets=signed_with), secrets=verified_with).msg_id == MSG_ID


def test_unknown_signature_versions_are_skipped() -> None:
    headers = request()
    headers["webhook-signature"] = "v1a,AAAA v2,BBBB " + headers["webhook-signature"]
    assert check(headers).msg_id == MSG_ID


@given(
    body=st.binary(max_size=256),
    msg_id=st.text(min_size=1, max_size=40).map(str.strip).filter(bool),
)
def test_sign_then_verify_round_trips(body: bytes, msg_id: str) -> None:
    headers = signature_headers(msg_id=msg_id, timestamp=TS, body=body, secrets=[OLD])
    assert verify(headers=headers, body=body, secrets=[OLD], now=NOW).msg_id == msg_id


# -- the fence in the signed id ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("msg_id", "parsed"),
    [
        ("0192f3c1:1772366400000@f41", ("0192f3c1:1772366400000", 41)),
        ("0192f3c1:1772366400000:manual@f0", ("0192f3c1:1772366400000:manual", 0)),
        ("0192f3c1:1772366400000:dead_letter", ("0192f3c1:1772366400000:dead_letter", None)),
        ("0192f3c1:1772366400000", ("0192f3c1:1772366400000", None)),  # an older sender
        ("a@fb@f7", ("a@fb", 7)),  # the last separator starts the fence
        ("k@f", ("k@f", None)),
        ("k@f-1", ("k@f-1", None)),
        ("k@f4.5", ("k@f4.5", None)),
        ("k@f\u0661\u0662", ("k@f\u0661\u0662", None)),  # Arabic-Indic digits: no fence
        ("@f5", ("@f5", None)),  # no occurrence before it
        ("k@f" + "9" * 20, ("k@f" + "9" * 20, None)),  # more than a BIGINT
        ("msg_p5jXN8AQM9LWM0D4loKWxJek", ("msg_p5jXN8AQM9LWM0D4loKWxJek", None)),
    ],
)
def test_parse_webhook_id(msg_id: str, parsed: tuple[str, int | None]) -> None:
    assert parse_webhook_id(msg_id) == parsed


def test_parse_webhook_id_wants_text() -> None:
    with pytest.raises(TypeError, match="msg_id: pass the webhook-id header as str"):
        parse_webhook_id(b"k@f1")  # type: ignore[arg-type]


@given(
    key=st.text(min_size=1, max_size=40).filter(lambda k: "@" not in k),
    fence=st.integers(min_value=0, max_value=2**63 - 1),
)
def test_fenced_id_round_trips(key: str, fence: int) -> None:
    assert parse_webhook_id(fenced_id(key, fence)) == (key, fence)


def test_fenced_id_refuses_a_negative_fence() -> None:
    with pytest.raises(ValueError, match="fence: must be >= 0"):
        fenced_id("k:1", -1)


def test_the_fence_comes_from_the_signed_id() -> None:
    got = check(request(msg_id=f"{OCCURRENCE}@f7"))
    assert (got.occurrence, got.fence) == (OCCURRENCE, 7)


@pytest.mark.parametrize("forged", ["40", "42", "0", "999999"])
def test_a_fence_header_that_disagrees_with_the_signed_id_is_rejected(forged: str) -> None:
    headers = request()
    headers["tickwork-fence"] = forged
    reason = rejected(headers)
    assert f"tickwork-fence is {int(forged)} but the signed webhook-id carries fence 41" in reason


def test_without_a_signed_fence_the_header_is_not_trusted() -> None:
    # An older sender (or a forger replaying its request) puts a fence in the unsigned header
    # only: it must not become the fence a guard compares.
    headers = request(msg_id=OCCURRENCE)
    headers["tickwork-fence"] = "99"
    got = check(headers)
    assert (got.msg_id, got.occurrence, got.fence) == (OCCURRENCE, OCCURRENCE, None)


# -- verification: rejections -------------------------------------------------------------------


def rejected(
    headers: dict[str, str], *, body: bytes = BODY, secrets: list[str] | None = None
) -> str:
    with pytest.raises(WebhookVerificationError) as info:
        check(headers, body=body, secrets=secrets)
    assert isinstance(info.value, TickworkError)
    assert str(info.value) == info.value.reason
    return info.value.reason


def test_tampered_body_is_rejected() -> None:
    assert "no signature" in rejected(request(), body=BODY + b" ")


def test_tampered_id_is_rejected() -> None:
    headers = request()
    headers["webhook-id"] = "job-7:1772366460000"
    assert "no signature" in rejected(headers)


def test_tampered_timestamp_is_rejected() -> None:
    headers = request()
    headers["webhook-timestamp"] = str(TS + 1)
    assert "no signature" in rejected(headers)


def test_wrong_secret_is_rejected() -> None:
    assert "matches any configured secret" in rejected(request(secrets=[NEW]), secrets=[OLD])


@pytest.mark.parametrize(
    ("offset_s", "accepted"),
    [(-300, True), (-301, False), (300, True), (301, False), (-86_400, False), (0, True)],
)
def test_timestamp_tolerance_both_directions(offset_s: int, accepted: bool) -> None:
    headers = request(ts=TS + offset_s)
    if accepted:
        assert check(headers).timestamp == TS + offset_s
    elif offset_s < 0:
        assert "old, more than the 300 s tolerance" in rejected(headers)
    else:
        assert "in the future, more than the 300 s tolerance" in rejected(headers)


def test_custom_tolerance() -> None:
    headers = request(ts=TS - 30)
    with pytest.raises(WebhookVerificationError, match="30 s old"):
        verify(headers=headers, body=BODY, secrets=[OLD], now=NOW, tolerance_s=10)


@pytest.mark.parametrize("name", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_missing_headers_are_named(name: str) -> None:
    headers = request()
    del headers[name]
    assert rejected(headers) == f"missing header {name}"


@pytest.mark.parametrize("name", ["webhook-id", "webhook-signature"])
def test_blank_headers_count_as_missing(name: str) -> None:
    headers = request()
    headers[name] = "  "
    assert rejected(headers) == f"missing header {name}"


@pytest.mark.parametrize("value", ["1.5", "-5", "soon", "1" * 40, "١٢٣"])
def test_malformed_timestamp(value: str) -> None:
    headers = request()
    headers["webhook-timestamp"] = value
    assert "must be whole Unix seconds" in rejected(headers)


@pytest.mark.parametrize("value", ["v1a,AAAA", "v2,abc", "garbage", "sha256=abcd"])
def test_no_v1_signature(value: str) -> None:
    headers = request()
    headers["webhook-signature"] = value
    assert "has no v1 signature" in rejected(headers)


def test_undecodable_v1_signature_does_not_match() -> None:
    headers = request()
    headers["webhook-signature"] = "v1,!!!notbase64!!!"
    assert "has no v1 signature" in rejected(headers)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("tickwork-fence", "x", "tickwork-fence must be a whole number"),
        ("tickwork-attempt", "-1", "tickwork-attempt must be a whole number"),
        ("tickwork-scheduled-for", "tomorrow", "tickwork-scheduled-for must be an ISO-8601"),
        ("tickwork-scheduled-for", "2026-03-01T12:00:00", "with a zone"),
    ],
)
def test_malformed_tickwork_headers(name: str, value: str, message: str) -> None:
    headers = request()
    headers[name] = value
    assert message in rejected(headers)


def test_configuration_mistakes_are_value_errors_not_rejections() -> None:
    with pytest.raises(ValueError, match="at least one secret"):
        verify(headers=request(), body=BODY, secrets=[], now=NOW)
    with pytest.raises(ValueError, match="tolerance_s"):
        verify(headers=request(), body=BODY, secrets=[OLD], now=NOW, tolerance_s=0)
    with pytest.raises(ValueError, match="naive"):
        verify(headers=request(), body=BODY, secrets=[OLD], now=NOW.replace(tzinfo=None))


# -- duplicates ---------------------------------------------------------------------------------


def test_duplicate_detection_on_the_occurrence() -> None:
    seen = MemorySeenKeys()
    first = verify(headers=request(), body=BODY, secrets=[OLD], now=NOW, seen=seen)
    # A retry of the same occurrence: new timestamp, new lease (fence), same occurrence.
    retry_id = f"{OCCURRENCE}@f42"
    retry = verify(
        headers=request(ts=TS + 60, msg_id=retry_id), body=BODY, secrets=[OLD], now=NOW, seen=seen
    )
    other = verify(
        headers=request(msg_id="job-7:1@f41"), body=BODY, secrets=[OLD], now=NOW, seen=seen
    )
    assert (first.duplicate, retry.duplicate, other.duplicate) == (False, True, False)


def test_forged_requests_do_not_enter_seen() -> None:
    seen = MemorySeenKeys()
    with pytest.raises(WebhookVerificationError):
        verify(headers=request(), body=b"forged", secrets=[OLD], now=NOW, seen=seen)
    assert OCCURRENCE not in seen
    assert not verify(headers=request(), body=BODY, secrets=[OLD], now=NOW, seen=seen).duplicate


def test_discard_lets_a_retry_through_after_failed_processing() -> None:
    seen = MemorySeenKeys()
    verify(headers=request(), body=BODY, secrets=[OLD], now=NOW, seen=seen)
    seen.discard(OCCURRENCE)
    assert not verify(headers=request(), body=BODY, secrets=[OLD], now=NOW, seen=seen).duplicate


def test_memory_seen_keys_is_bounded_and_evicts_least_recent() -> None:
    seen = MemorySeenKeys(max_keys=3)
    assert all(seen.add(k) for k in "abc")
    assert not seen.add("a")  # refreshes a: b is now the oldest
    assert seen.add("d")
    assert len(seen) == 3
    assert "b" not in seen
    assert "a" in seen


def test_memory_seen_keys_rejects_a_zero_bound() -> None:
    with pytest.raises(ValueError, match="max_keys"):
        MemorySeenKeys(max_keys=0)


def test_spec_vector_with_a_later_clock_is_too_old() -> None:
    headers = signature_headers(
        msg_id=SPEC_ID, timestamp=SPEC_TS, body=SPEC_BODY, secrets=[SPEC_SECRET]
    )
    later = datetime.fromtimestamp(SPEC_TS, UTC) + timedelta(minutes=10)
    with pytest.raises(WebhookVerificationError, match="old"):
        verify(headers=headers, body=SPEC_BODY, secrets=[SPEC_SECRET], now=later)
