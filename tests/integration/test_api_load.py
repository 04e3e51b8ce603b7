"""GET /v1/load: the fires the scheduled jobs plan per bucket in a window, per tenant."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.test_api import NOW, Api, create, error_of, serve
from tickwork.clock import utc_iso
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key

MINUTE = timedelta(minutes=1)


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        yield served


async def load(api: Api, **params: Any) -> dict[str, Any]:
    response = await api.client.get("/v1/load", params=params)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def every_minute(**fields: Any) -> dict[str, Any]:
    return {"schedule": {"every": "PT1M", "start_at": utc_iso(NOW + MINUTE)}, **fields}


async def test_a_herd_at_the_top_of_the_minute_shows_as_the_peak(api: Api) -> None:
    for n in range(5):
        await create(api, name=f"herd-{n}", **every_minute())
    await create(api, name="loner", schedule={"at": utc_iso(NOW + 90 * timedelta(seconds=1))})
    found = await load(api, **{"from": utc_iso(NOW), "to": utc_iso(NOW + 3 * MINUTE)})
    # Each every-minute job fires at +1 and +2 min (the window ends before +3); the one-shot at
    # +90 s. The answer lists only buckets with a fire.
    assert [(b["start"], b["fires"]) for b in found["buckets"]] == [
        (utc_iso(NOW + MINUTE), 5),
        (utc_iso(NOW + 90 * timedelta(seconds=1)), 1),
        (utc_iso(NOW + 2 * MINUTE), 5),
    ]
    assert (found["total"], found["peak"], found["jobs"], found["truncated"]) == (11, 5, 6, False)
    assert [b["fires"] for b in found["busiest"]] == [5, 5, 1]
    assert found["busiest"][0]["start"] == utc_iso(NOW + MINUTE)  # ties: earliest first
    assert found["tenants"]["default"]["total"] == 11


async def test_buckets_paused_jobs_max_runs_and_tenants(api: Api) -> None:
    await create(api, name="a", max_runs=1, **every_minute())
    paused = await create(api, name="p", **every_minute())
    pause = await api.client.post(f"/v1/jobs/{paused['id']}/pause", json={})
    assert pause.status_code == 200, pause.text
    await create(api, name="b", tenant="acme", **every_minute())
    window = {"from": utc_iso(NOW), "to": utc_iso(NOW + 10 * MINUTE), "bucket": 300}
    found = await load(api, **window)
    # a: one fire (max_runs 1); p: none (paused); b: +1..+9 min = 9 fires. Buckets of 5 min.
    assert [(b["start"], b["fires"]) for b in found["buckets"]] == [
        (utc_iso(NOW), 5),
        (utc_iso(NOW + 5 * MINUTE), 5),
    ]
    assert {n: t["total"] for n, t in found["tenants"].items()} == {"acme": 9, "default": 1}
    only_acme = await load(api, **window, tenant="acme")
    assert (only_acme["total"], list(only_acme["tenants"])) == (9, ["acme"])


async def test_a_tenant_key_sees_its_own_tenant_only(api: Api) -> None:
    await create(api, name="mine", tenant="acme", **every_minute())
    await create(api, name="theirs", **every_minute())
    key = await mint_key(api.store, role="tenant-read", tenant="acme", clock=api.clock)
    window = {"from": utc_iso(NOW), "to": utc_iso(NOW + 2 * MINUTE)}
    async with api.client_with(key) as reader:
        own = await reader.get("/v1/load", params=window)
        assert own.status_code == 200, own.text
        assert (own.json()["total"], list(own.json()["tenants"])) == (1, ["acme"])
        other = await reader.get("/v1/load", params={**window, "tenant": "default"})
        assert error_of(other, 404)


async def test_an_overdue_job_counts_from_the_window_on(api: Api) -> None:
    await create(api, name="late", **every_minute())
    api.clock.advance(10 * MINUTE + timedelta(seconds=30))  # next_run_at (+1 min) long past
    now = NOW + 10 * MINUTE + timedelta(seconds=30)
    found = await load(api, **{"from": utc_iso(now), "to": utc_iso(now + 2 * MINUTE)})
    assert [b["start"] for b in found["buckets"]] == [
        utc_iso(NOW + 11 * MINUTE),
        utc_iso(NOW + 12 * MINUTE),
    ]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": utc_iso(NOW), "to": utc_iso(NOW)}, "to"),
        ({"from": utc_iso(NOW), "to": utc_iso(NOW + timedelta(days=8))}, "to"),
        ({"from": utc_iso(NOW), "to": utc_iso(NOW + timedelta(days=2)), "bucket": 1}, "bucket"),
        ({"bucket": 0}, "bucket"),
    ],
)
async def test_bad_windows_are_refused_naming_the_field(
    api: Api, params: dict[str, Any], field: str
) -> None:
    error = error_of(await api.client.get("/v1/load", params=params), 422)
    assert field in str(error)


async def test_the_walk_is_bounded_and_says_so() -> None:
    from tickwork.services.load import planned_load

    store = MemoryStore()
    async for api in serve(store):
        for n in range(3):
            await create(api, name=f"j{n}", **every_minute())
        found = await planned_load(
            store, start=NOW, end=NOW + 10 * MINUTE, bucket_s=60, tenant=None, max_planned=20
        )
        assert (found.truncated, found.forecast.overall.total) == (True, 20)
