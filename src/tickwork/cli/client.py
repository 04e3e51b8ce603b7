"""The HTTP client the API commands talk through.

Synchronous on purpose: a command makes one call (a few for `dlq redrive RUN_ID...`) and
exits. Every HTTP failure becomes a `CliFailure` already worded for the command line: an
unreachable API or a 5xx exits 1, a 4xx exits 2 with the API's message, its field named by
the flag that set it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from tickwork.cli.app import EXIT_BAD_INPUT, EXIT_FAILURE, CliFailure, Session, field_message
from tickwork.runtime.access import ADMIN_KEY_FILE
from tickwork.settings import Settings, data_dir

if TYPE_CHECKING:
    import httpx

__all__ = ["ApiClient", "api_client", "present"]

TIMEOUT_S: Final = 30.0
DEFAULT_KEY_HINT: Final = f".tickwork/{ADMIN_KEY_FILE}"


class ApiClient:
    """A thin synchronous client; turns HTTP failures into `CliFailure`s."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        # Imported here, not at the top: every process starts through this CLI, and httpx (57 ms
        # to import on its own) would delay a restarted scheduler's or worker's first fire.
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            with httpx.Client(base_url=self.base_url, timeout=TIMEOUT_S, headers=headers) as client:
                response = client.request(method, path, **kwargs)
        except httpx.TransportError:
            raise CliFailure(
                f"cannot reach the tickwork API at {self.base_url} (is `tickwork up` running?)",
                EXIT_FAILURE,
            ) from None
        except httpx.InvalidURL as exc:
            raise CliFailure(f"--api: {self.base_url!r} is not a usable URL ({exc})") from None
        if response.is_success:
            return response.json() if response.content else None
        raise self._failure(response)

    def _failure(self, response: httpx.Response) -> CliFailure:
        try:
            error = response.json()["error"]
            message = field_message(error.get("field"), str(error["message"]))
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code}: {response.text[:200]}"
        if response.status_code == 401 and not self.api_key:
            message += (
                " (no API key found: pass --api-key, set TICKWORK_API_KEY, or run where "
                f"`tickwork up` wrote {DEFAULT_KEY_HINT})"
            )
        if response.is_client_error:
            return CliFailure(message, EXIT_BAD_INPUT)
        return CliFailure(f"the API failed: {message}", EXIT_FAILURE)


def api_client(api: str | None) -> ApiClient:
    """The client for `--api`, else TICKWORK_API_URL, else the default local API, with the
    key of `--api-key`, else TICKWORK_API_KEY, else the data directory's admin.key."""
    settings = Settings()
    return ApiClient(api or settings.api_url, find_api_key(settings))


def find_api_key(settings: Settings) -> str | None:
    if Session.api_key:
        return Session.api_key
    if settings.api_key:
        return settings.api_key
    path = data_dir(settings) / ADMIN_KEY_FILE
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def present(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values that were given: a flag left out sends no parameter, not a null."""
    return {k: v for k, v in values.items() if v is not None}
