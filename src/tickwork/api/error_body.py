"""The one shape of every error the HTTP servers answer: `{"error": {"code", "message",
"field"}}` (api/errors.py maps exceptions to it).

Apart from api/errors.py so that the light ops server of scheduler and worker processes
(api/ops_app.py) can answer in the same shape without importing FastAPI.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.responses import JSONResponse

__all__ = ["error_response"]


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "field": field}}
    return JSONResponse(body, status_code=status, headers=headers)
