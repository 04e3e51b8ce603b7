"""Every error the API returns has one shape: `{"error": {"code", "message", "field"}}`.

Which exception becomes which response (tickwork's own errors: `ERROR_MAP`, first match wins):

    exception                          status  code
    Unauthenticated                    401     "unauthenticated", with WWW-Authenticate
    Forbidden                          403     "forbidden"
    RateLimited                        429     "rate_limited", with Retry-After (its own wait)
                                               and, for a tenant's limit, field
                                               "limits.max_api_rps"
    InvalidInput                       422     its own (default "invalid"), with its field
                                       (or its own status: 400 for a bad cursor)
    NotFound / unknown route           404     "not_found"
      ... NotDeadLettered              404     "not_dead_lettered"
    Conflict, StaleJob                 409     "conflict"
      ... TenantExists, TenantHasJobs  409     their own ("tenant_exists", "tenant_has_jobs")
      ... QuotaExceeded                409     "quota_exceeded", field "limits.max_jobs"
    StoreError, StoreUnavailable       503     "store_unavailable", with Retry-After
    QueueError, QueueUnavailable       503     its own ("queue_error", "queue_unavailable"),
                                               with Retry-After
    SealedSecretError                  503     "secret_unreadable" (this process lacks the key
                                               a stored secret was encrypted with)
    pydantic validation of the request 422     "invalid", "unknown_field", "missing"
      ... of a body that is not JSON   400     "malformed_json"
      ... sent without a JSON type     415     "unsupported_media_type"
    a JSON body that is not strict     400     "malformed_json" (not UTF-8, not JSON)
      JSON (api.strict_json, run by    422     "invalid_number" (NaN, Infinity, 1e999, an
      api.middleware)                          integer of 1,000+ digits), "duplicate_key",
                                               "invalid_character" (NUL, lone surrogate)
    NUL in a path or query parameter   422     "invalid_character" (routes.clean_parameters)
    a list cursor no page gave         400     "invalid_cursor" (an InvalidInput with status)
    body over settings.max_body_bytes  413     "body_too_large"   (api.middleware; closes the
                                               connection)
    more than 100 request headers      431     "too_many_headers" (api.middleware)
    a request head over 32 KiB         431     "request_headers_too_large" (api.http_server,
                                               before the app: `tickwork up`'s server)
    wrong method                       405     "method_not_allowed"
    anything else                      500     "internal_error"   (api.middleware; logged)

"Anything else" includes a TickworkError missing from ERROR_MAP: the API never guesses a status
for an error nobody mapped (EgressRefused and WebhookVerificationError are raised on the worker
and in users' receivers, never while serving a request).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from tickwork.api.error_body import error_response
from tickwork.api.schemas import CODED_ERRORS, AlertIn, JobCreate, RetryIn, ScheduleIn, TargetIn
from tickwork.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    StoreError,
    TickworkError,
    Unauthenticated,
)
from tickwork.queue.errors import QueueError
from tickwork.sealing import SealedSecretError
from tickwork.timing.rate_limit import retry_after_header

# A store or queue that failed is usually back within seconds (a restart, a failover).
RETRY_AFTER_S = 1
_REQUEST_PARTS = ("body", "query", "path", "header", "cookie")
# The job bodies' field names by parent path, for "did you mean" on unknown fields.
_JOB_FIELDS = {
    (): list(JobCreate.model_fields),
    ("schedule",): list(ScheduleIn.model_fields),
    ("target",): list(TargetIn.model_fields),
    ("retry",): list(RetryIn.model_fields),
    ("on_failure",): list(AlertIn.model_fields),
}
_ALIASES = {
    "tz": "timezone",
    "zone": "timezone",
    "interval": "every",
    "uri": "url",
    "retries": "max_attempts",
    "max_retries": "max_attempts",
    "attempts": "max_attempts",
    "delay": "backoff",
    "base_delay": "backoff",
    "max_delay": "max_backoff",
    "secret": "secrets",
    "signing_secrets": "secrets",
}
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_HTTP_CODES = {
    400: "malformed_json",  # FastAPI's only 400: a body it could not parse
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(InvalidInput, _invalid_input)  # type: ignore[arg-type]
    app.add_exception_handler(TickworkError, _tickwork_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]


async def _invalid_input(request: Request, exc: InvalidInput) -> JSONResponse:
    return error_response(exc.status, exc.code, exc.message, exc.field)


@dataclass(frozen=True, kw_only=True, slots=True)
class Mapped:
    """How the API answers one kind of tickwork error."""

    status: int
    code: str | None = None  # None: the exception's own `code`
    prefix: str = ""  # put before the exception's message
    retry_after_s: int | None = None  # sent as Retry-After: the condition is temporary
    headers: Mapping[str, str] | None = None  # sent with the answer


# Read top down, first match wins (subclasses before their bases). InvalidInput has its own
# handler, for its field.
ERROR_MAP: tuple[tuple[type[TickworkError], Mapped], ...] = (
    (
        Unauthenticated,
        Mapped(status=401, headers={"WWW-Authenticate": 'Bearer realm="tickwork"'}),
    ),
    (Forbidden, Mapped(status=403)),
    (RateLimited, Mapped(status=429)),
    (NotFound, Mapped(status=404)),
    (Conflict, Mapped(status=409)),
    (
        StoreError,
        Mapped(
            status=503,
            code="store_unavailable",
            prefix="the schedule store failed: ",
            retry_after_s=RETRY_AFTER_S,
        ),
    ),
    (QueueError, Mapped(status=503, prefix="the queue failed: ", retry_after_s=RETRY_AFTER_S)),
    # A stored secret this API process cannot decrypt: its keys are misconfigured. Not the
    # caller's fault and not temporary; the message names the key id, never the value.
    (SealedSecretError, Mapped(status=503, prefix="this API process's secret keys: ")),
)


def mapping_for(exc: TickworkError) -> Mapped | None:
    """How the API answers `exc`; None: nobody mapped it (the middleware answers 500)."""
    for kind, mapped in ERROR_MAP:
        if isinstance(exc, kind):
            return mapped
    return None


async def _tickwork_error(request: Request, exc: TickworkError) -> JSONResponse:
    mapped = mapping_for(exc)
    if mapped is None:
        raise exc  # to the middleware's logged 500: an unmapped error is a bug, not a 400
    headers = dict(mapped.headers or {})
    if mapped.retry_after_s is not None:
        headers["Retry-After"] = str(mapped.retry_after_s)
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = retry_after_header(exc.retry_after_s)
    code = mapped.code or exc.code
    # Errors about one setting (a tenant's quota or rate) name it, as InvalidInput does.
    field = getattr(exc, "field", None)
    return error_response(
        mapped.status, code, f"{mapped.prefix}{exc}", field, headers=headers or None
    )


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    if exc.status_code == 404 and exc.detail == "Not Found":
        message = f"no such route: {request.method} {request.url.path} (see /docs)"
    elif exc.status_code == 405:
        allow = _allowed_methods(request)
        message = f"{request.method} is not allowed on {request.url.path}; use {allow}"
        return error_response(405, code, message, headers={"Allow": allow})
    elif exc.status_code == 400:
        message = "the body could not be parsed as JSON"
    else:
        message = str(exc.detail)
    return error_response(exc.status_code, code, message, headers=exc.headers)


def _allowed_methods(request: Request) -> str:
    # Starlette's own Allow header names only the first route that matched the path, so ask
    # every route about every method (routers nest, so probing beats walking their insides).
    allowed = [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in request.app.router.routes
        )
    ]
    return ", ".join(allowed)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if not errors:
        return error_response(422, "invalid", "the request is invalid")
    return describe_validation_error(errors[0])


def describe_validation_error(error: Mapping[str, Any]) -> JSONResponse:
    """Turn pydantic's first error into our shape, with the field as a dotted path."""
    kind = str(error.get("type", ""))
    loc: Sequence[Any] = error.get("loc", ())
    field = dotted(loc)
    if kind == "json_invalid":
        detail = (error.get("ctx") or {}).get("error", "syntax error")
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        return error_response(
            400, "malformed_json", f"the body is not valid JSON: {detail}{where}", None
        )
    if tuple(loc) == ("body",) and isinstance(error.get("input"), bytes):
        return error_response(
            415,
            "unsupported_media_type",
            "send the body as JSON with Content-Type: application/json",
        )
    if kind == "extra_forbidden":
        return error_response(422, "unknown_field", _unknown_field_message(loc), field)
    if kind == "missing":
        if field is None:
            return error_response(422, "missing", "a JSON object is required as the request body")
        return error_response(422, "missing", f"{field} is required", field)
    code = kind if kind in CODED_ERRORS else "invalid"
    return error_response(422, code, _message(kind, error), field)


def _unknown_field_message(loc: Sequence[Any]) -> str:
    in_body = bool(loc) and loc[0] == "body"
    parts = [str(p) for p in loc][1:] if in_body else [str(p) for p in loc]
    name, parent = (parts[-1], tuple(parts[:-1])) if parts else ("?", ())
    message = f"unknown field {name!r}"
    known = _JOB_FIELDS.get(parent) if in_body else None
    if known is None:
        return message + "; remove it (see /docs for the accepted fields)"
    close = _ALIASES.get(name) or next(iter(difflib.get_close_matches(name, known, n=1)), None)
    if close in known:
        message += f"; did you mean {close!r}?"
    where = f" in {'.'.join(parent)}" if parent else ""
    return message + f" (the fields{where} are: {', '.join(known)})"


def dotted(loc: Sequence[Any]) -> str | None:
    parts = [str(p) for p in loc]
    if parts and parts[0] in _REQUEST_PARTS:
        parts = parts[1:]
    if parts[:2] == ["target", "body"]:
        parts = parts[:2]  # free-form JSON: the rest would be pydantic's union tags
    return ".".join(parts) or None


def _message(kind: str, error: Mapping[str, Any]) -> str:
    if kind == "timezone_aware":
        return "the time has no offset: add Z or an offset, e.g. 2026-12-24T18:00:00Z"
    if kind in ("recursion_loop", "recursion_depth_exceeded"):
        return "the value is nested too deeply"
    msg = str(error.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return msg
