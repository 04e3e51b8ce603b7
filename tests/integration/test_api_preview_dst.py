"""GET /v1/preview with a job's DST choices (`dst_gap`, `dst_repeat`), and bad choices named."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.test_api import Api, error_of, serve
from tickwork.store.memory import MemoryStore


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


async def preview(api: Api, **params: Any) -> list[dict[str, Any]]:
    response = await api.client.get("/v1/preview", params=params)
    assert response.status_code == 200, response.text
    fires: list[dict[str, Any]] = response.json()["fires"]
    return fires


async def test_repeat_second_fires_at_the_second_and_says_so(api: Api) -> None:
    fires = await preview(
        api,
        cron="30 1 * * *",
        timezone="America/New_York",
        after="2026-10-31T12:00:00Z",
        count=2,
        dst_repeat="second",
    )
    assert [f["utc"] for f in fires] == ["2026-11-01T06:30:00Z", "2026-11-02T06:30:00Z"]
    assert fires[0]["local"] == "2026-11-01T01:30:00-05:00"
    assert fires[0]["note"].endswith("fires at the second (EDT->EST), as dst repeat: second")


async def test_gap_skip_drops_the_missing_time_and_says_so(api: Api) -> None:
    fires = await preview(
        api,
        cron="30 2 * * *",
        timezone="Europe/Berlin",
        after="2026-03-28T12:00:00Z",
        count=1,
        dst_gap="skip",
    )
    assert [f["utc"] for f in fires] == ["2026-03-30T00:30:00Z"]
    assert fires[0]["note"].endswith("skipped (dst gap: skip)")


async def test_default_choices_are_debian_cron(api: Api) -> None:
    params = {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "after": "2026-03-28T12:00:00Z"}
    assert await preview(api, **params) == await preview(
        api, **params, dst_gap="cron", dst_repeat="cron"
    )


@pytest.mark.parametrize(
    ("params", "field"),
    [({"dst_gap": "later"}, "dst_gap"), ({"dst_repeat": "twice"}, "dst_repeat")],
)
async def test_an_unknown_choice_is_named(api: Api, params: dict[str, str], field: str) -> None:
    response = await api.client.get("/v1/preview", params={"cron": "0 2 * * *", **params})
    error = error_of(response, 422)
    assert error["field"] == field
