"""Fuzzing the parsers that read user input: arbitrary input gives the documented, clear error
and never another exception.

- the cron parser (`CronExpression.parse`, and the preview built on it): InvalidInput naming
  schedule.cron or schedule.timezone, with one of its codes;
- the duration parser (`parse_duration_ms`): InvalidInput naming the field, with one of its
  codes, whatever the value's type or size;
- the webhook verifier (`tickwork.webhooks.verify`): WebhookVerificationError for anything a
  request can carry; TypeError with a message saying what to pass for a body that is not the
  raw body (None, a parsed dict) and no JSON decode error ever.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tickwork.errors import InvalidInput
from tickwork.timing.cron import ZONE_NAMES, CronExpression
from tickwork.timing.durations import parse_duration_ms
from tickwork.timing.preview import preview_cron
from tickwork.webhooks import (
    WebhookVerificationError,
    generate_secret,
    signature_headers,
    verify,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
SECRET = generate_secret()

# Every character, lone surrogates and NUL included: what a JSON string can carry.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=80)

# -- cron ---------------------------------------------------------------------------------------

CRON_CODES = {"invalid_cron", "never_fires", "unknown_timezone"}
CRON_FIELDS = {"schedule.cron", "schedule.timezone"}
cron_atoms = st.sampled_from(
    ["*", "?", "L", "W", "LW", "#", "/", "-", ",", "0", "1", "5", "7", "12", "13", "29", "30",
     "31", "59", "60", "99", "JAN", "FEB", "DEC", "MON", "FRI", "SUN", "5L", "MON#2", "MON#6",
     "@daily", "@hourly", "@reboot", "L-3", "15W", "*/0", "0-0", "3-1", "1-31/7", "\t", " "]
)  # fmt: skip
cron_fields = st.lists(cron_atoms, min_size=1, max_size=4).map("".join)
cron_like = st.lists(cron_fields, min_size=0, max_size=8).map(" ".join)
zones = (
    st.sampled_from(ZONE_NAMES)
    | any_text
    | st.sampled_from(
        [
            "",
            " ",
            "UTC",
            "utc",
            "posix/Europe/Berlin",
            "../../etc/passwd",
            "/etc/localtime",
            "Europe/",
        ]
    )
)


def assert_clear(error: InvalidInput, codes: set[str], fields: set[str]) -> None:
    assert error.code in codes, error
    assert error.field in fields, error
    assert error.message.strip(), error


@FUZZ
@given(expr=cron_like | any_text, zone=zones)
def test_the_cron_parser_raises_only_invalid_input(expr: str, zone: str) -> None:
    try:
        cron = CronExpression.parse(expr, zone)
    except InvalidInput as error:
        assert_clear(error, CRON_CODES, CRON_FIELDS)
        return
    assert cron.next_after(NOW) is None or cron.next_after(NOW) > NOW  # type: ignore[operator]


@FUZZ
@given(expr=cron_like, zone=st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]))
def test_the_preview_raises_only_invalid_input(expr: str, zone: str) -> None:
    try:
        fires = preview_cron(expr, zone, NOW, 5)
    except InvalidInput as error:
        assert_clear(error, CRON_CODES, CRON_FIELDS)
        return
    assert all(fire.utc > NOW for fire in fires)


@pytest.mark.parametrize("bad", [None, 5, 5.0, b"* * * * *", ["*"] * 5])
def test_a_cron_that_is_not_text_is_invalid_input(bad: Any) -> None:
    with pytest.raises(InvalidInput) as raised:
        CronExpression.parse(bad)
    assert_clear(raised.value, CRON_CODES, CRON_FIELDS)


# -- durations ----------------------------------------------------------------------------------

DURATION_CODES = {"invalid_duration", "interval_too_short", "interval_too_long"}
iso_like = st.lists(
    st.sampled_from(["P", "T", "W", "D", "H", "M", "S", "Y", "1", "0", "99", ".", ",", "5", "-",
                     "+", " ", "e9", "1" * 30]),
    max_size=12,
).map("".join)  # fmt: skip
durations = (
    iso_like
    | any_text
    | st.integers()
    | st.integers(min_value=10**300, max_value=10**5000)  # past int()'s 4300-digit str limit
    | st.integers(max_value=-(10**300), min_value=-(10**5000))
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.booleans()
    | st.none()
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)


@FUZZ
@given(value=durations)
def test_the_duration_parser_raises_only_invalid_input(value: Any) -> None:
    try:
        ms = parse_duration_ms(value, field="schedule.every")
    except InvalidInput as error:
        assert_clear(error, DURATION_CODES, {"schedule.every"})
        return
    assert 1 <= ms <= 366 * 86_400_000


@pytest.mark.parametrize(
    "value", [10**5000, -(10**5000), 10**4300 + 1], ids=["5001 digits", "minus", "4301 digits"]
)
def test_a_huge_integer_duration_is_too_long_not_a_crash(value: int) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_duration_ms(value)
    assert raised.value.code in ("interval_too_long", "interval_too_short")


# -- the webhook verifier -----------------------------------------------------------------------

header_names = st.sampled_from(
    ["webhook-id", "webhook-timestamp", "webhook-signature", "Webhook-Signature",
     "tickwork-attempt", "tickwork-fence", "tickwork-scheduled-for", "x-other"]
)  # fmt: skip
header_values = any_text | st.sampled_from(
    ["v1,", "v1,AAAA", "v1,!!!", "v2,abc v1,", str(int(NOW.timestamp())), "-1", "1e9",
     "99999999999999999999", "2026-06-01T12:00:00", "2026-06-01T12:00:00Z", " ", ""]
)  # fmt: skip
request_headers = st.dictionaries(header_names, header_values, max_size=8)
bodies = st.binary(max_size=200) | st.just(b"")


@FUZZ
@given(headers=request_headers, body=bodies)
def test_verify_raises_only_verification_errors_for_any_request(
    headers: dict[str, str], body: bytes
) -> None:
    with pytest.raises(WebhookVerificationError) as raised:
        verify(headers=headers, body=body, secrets=[SECRET], now=NOW)
    assert raised.value.reason.strip()


@FUZZ
@given(
    msg_id=st.text(st.characters(codec="utf-8"), min_size=1, max_size=40).filter(str.strip),
    body=bodies,
    extra=st.dictionaries(st.sampled_from(["tickwork-job-id", "x-a"]), any_text, max_size=2),
)
def test_a_signed_request_verifies_and_a_changed_body_does_not(
    msg_id: str, body: bytes, extra: dict[str, str]
) -> None:
    msg_id = msg_id.strip()
    timestamp = int(NOW.timestamp())
    signed = signature_headers(msg_id=msg_id, timestamp=timestamp, body=body, secrets=[SECRET])
    headers = {**extra, **signed}
    assert verify(headers=headers, body=body, secrets=[SECRET], now=NOW).msg_id == msg_id
    with pytest.raises(WebhookVerificationError):
        verify(headers=headers, body=body + b"x", secrets=[SECRET], now=NOW)


def signed_headers(body: bytes) -> dict[str, str]:
    return signature_headers(
        msg_id="msg_1", timestamp=int(NOW.timestamp()), body=body, secrets=[SECRET]
    )


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (None, "b'' for a request without a body"),
        ({"a": 1}, "not a dict"),
        ([1], "not a list"),
        (42, "not a int"),
    ],
)
def test_verify_with_a_body_that_is_not_the_raw_body_says_what_to_pass(
    body: Any, says: str
) -> None:
    with pytest.raises(TypeError, match=r"^body: pass the raw request body") as raised:
        verify(headers=signed_headers(b"{}"), body=body, secrets=[SECRET], now=NOW)
    assert says in str(raised.value)
    assert "JSON decode" not in str(raised.value)


def test_verify_a_bodyless_request() -> None:
    # a GET webhook has no body: b"" (what frameworks give for one) verifies
    verified = verify(headers=signed_headers(b""), body=b"", secrets=[SECRET], now=NOW)
    assert verified.msg_id == "msg_1"


@pytest.mark.parametrize("as_type", [bytes, bytearray, memoryview, lambda b: b.decode()])
def test_verify_takes_the_body_as_bytes_or_its_text(as_type: Any) -> None:
    body = '{"job": "é"}'.encode()
    verified = verify(headers=signed_headers(body), body=as_type(body), secrets=[SECRET], now=NOW)
    assert verified.msg_id == "msg_1"


def test_verify_takes_asgi_style_bytes_headers() -> None:
    headers = {k.encode(): v.encode() for k, v in signed_headers(b"x").items()}
    assert verify(headers=headers, body=b"x", secrets=[SECRET], now=NOW).msg_id == "msg_1"


def test_text_with_a_lone_surrogate_is_not_a_body_that_was_signed() -> None:
    with pytest.raises(WebhookVerificationError, match="not valid Unicode"):
        verify(headers=signed_headers(b"x"), body="\ud800", secrets=[SECRET], now=NOW)


def test_a_tampered_signature_of_the_right_length_is_refused() -> None:
    headers = signed_headers(b"x")
    digest = base64.b64decode(headers["webhook-signature"].removeprefix("v1,"))
    flipped = bytes([digest[0] ^ 1]) + digest[1:]
    headers["webhook-signature"] = "v1," + base64.b64encode(flipped).decode()
    with pytest.raises(WebhookVerificationError, match="no signature"):
        verify(headers=headers, body=b"x", secrets=[SECRET], now=NOW + timedelta(seconds=1))
