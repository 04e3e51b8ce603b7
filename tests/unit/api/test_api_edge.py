"""The API's edge pieces on their own: URL rule, job ids, error translation, body guard."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from tickwork.api.errors import describe_validation_error, dotted
from tickwork.api.middleware import EdgeMiddleware
from tickwork.services.rules import check_webhook_url, new_job_id

# -- webhook URLs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/hook",
        "https://example.com:8443/a?b=c",
        "HTTPS://EXAMPLE.COM",
        "http://127.0.0.1:9000/",
        "http://[::1]:8080/x",
    ],
)
def test_http_urls_with_a_host_are_accepted(url: str) -> None:
    check_webhook_url(url)


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("file:///etc/passwd", "file: URLs are not allowed"),
        ("ftp://example.com/x", "ftp: URLs are not allowed"),
        ("javascript:alert(1)", "javascript: URLs are not allowed"),
        ("gopher://example.com", "gopher: URLs are not allowed"),
        ("example.com/hook", "no scheme"),
        ("http://", "no host"),
        ("https:///path-only", "no host"),
        ("http://example.com:99999/", "malformed URL"),
        ("http://exa mple.com/", "whitespace"),
        ("http://example.com/" + "a" * 3000, "longer than"),
    ],
)
def test_other_urls_are_refused_with_the_reason(url: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=re.escape(complaint)):
        check_webhook_url(url)


# -- job ids ----------------------------------------------------------------------------------


def test_job_ids_are_32_hex_chars_led_by_the_millisecond_timestamp() -> None:
    when = datetime(2026, 1, 15, 12, 0, 0, 123_000, tzinfo=UTC)
    job_id = new_job_id(when + timedelta(days=3650))  # far ahead of any id made before
    assert re.fullmatch(r"[0-9a-f]{32}", job_id)
    assert int(job_id[:12], 16) == int((when + timedelta(days=3650)).timestamp() * 1000)


def test_job_ids_increase_even_when_the_clock_stands_still_or_steps_back() -> None:
    base = datetime(2030, 1, 1, tzinfo=UTC)
    times = [base] * 50 + [base - timedelta(seconds=5)] * 5 + [base + timedelta(milliseconds=1)]
    ids = [new_job_id(t) for t in times]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


# -- translating pydantic errors --------------------------------------------------------------


@pytest.mark.parametrize(
    ("loc", "expected"),
    [
        (("body", "schedule", "cron"), "schedule.cron"),
        (("query", "limit"), "limit"),
        (("body",), None),
        (("target", "headers", "X-A"), "target.headers.X-A"),
    ],
)
def test_dotted_drops_the_request_part(loc: tuple[Any, ...], expected: str | None) -> None:
    assert dotted(loc) == expected


def _body(response: Any) -> dict[str, Any]:
    import json

    data: dict[str, Any] = json.loads(response.body)["error"]
    return data


def test_unknown_field_is_named() -> None:
    response = describe_validation_error(
        {"type": "extra_forbidden", "loc": ("body", "target", "colour"), "msg": "Extra inputs"}
    )
    assert response.status_code == 422
    error = _body(response)
    assert error["code"] == "unknown_field"
    assert error["field"] == "target.colour"
    assert "'colour'" in error["message"]


def test_naive_datetime_message_says_how_to_fix_it() -> None:
    response = describe_validation_error(
        {"type": "timezone_aware", "loc": ("body", "schedule", "at"), "msg": "needs tz"}
    )
    error = _body(response)
    assert (response.status_code, error["field"]) == (422, "schedule.at")
    assert "add Z or an offset" in error["message"]


def test_value_error_prefix_is_dropped() -> None:
    response = describe_validation_error(
        {"type": "value_error", "loc": ("body", "schedule"), "msg": "Value error, give one"}
    )
    assert _body(response) == {"code": "invalid", "message": "give one", "field": "schedule"}


# -- the body guard ---------------------------------------------------------------------------


async def _echo_length(scope: Scope, receive: Receive, send: Send) -> None:
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


async def _explode(scope: Scope, receive: Receive, send: Send) -> None:
    raise RuntimeError("boom")


def _client(app: Any) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://edge.test")


async def test_body_at_the_limit_passes_through_whole() -> None:
    async with _client(EdgeMiddleware(_echo_length, max_body_bytes=1024)) as client:
        response = await client.post("/", content=b"x" * 1024)
    assert (response.status_code, response.text) == (200, "1024")


async def test_declared_length_over_the_limit_is_refused() -> None:
    async with _client(EdgeMiddleware(_echo_length, max_body_bytes=1024)) as client:
        response = await client.post("/", content=b"x" * 1025)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "body_too_large"


async def test_streamed_body_over_the_limit_is_refused() -> None:
    async def chunks() -> Any:
        for _ in range(10):
            yield b"y" * 300

    async with _client(EdgeMiddleware(_echo_length, max_body_bytes=1024)) as client:
        response = await client.post("/", content=chunks())
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert "1024-byte limit" in response.json()["error"]["message"]


async def test_unhandled_exception_becomes_a_500_in_the_error_shape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with _client(EdgeMiddleware(_explode, max_body_bytes=1024)) as client:
        response = await client.get("/")
    assert response.status_code == 500
    assert response.json() == {
        "error": {
            "code": "internal_error",
            "message": "internal error; the server log has the details",
            "field": None,
        }
    }
    record = next(r for r in caplog.records if getattr(r, "action", "") == "api.unhandled_error")
    assert record.exc_info is not None


@pytest.mark.parametrize(
    ("loc", "hint"),
    [
        (("body", "schedule", "tz"), "did you mean 'timezone'?"),
        (("body", "target", "methd"), "did you mean 'method'?"),
        (("body", "colour"), "the fields are: name, tenant, schedule, target"),
    ],
)
def test_unknown_field_message_points_at_the_right_one(loc: tuple[str, ...], hint: str) -> None:
    response = describe_validation_error({"type": "extra_forbidden", "loc": loc, "msg": "x"})
    assert hint in _body(response)["message"]
