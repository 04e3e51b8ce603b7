"""The installed version of tickwork (the API's OpenAPI document and every node's heartbeat)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def tickwork_version() -> str:
    try:
        return version("tickwork")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0+unknown"
