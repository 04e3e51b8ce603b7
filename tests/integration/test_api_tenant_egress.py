"""A tenant's destination lists through the HTTP API: set by an admin with PATCH
/v1/tenants/{name}, shown by GET, and applied when a job's URLs are created or changed
(422 `tenant_egress_refused` naming the field, the host and the list)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tickwork.store.memory import MemoryStore

from .test_api import Api, error_of, job_body, serve
from .test_api_auth import as_tenant

LISTS = {"allow": ["*.example.com", "api.partner.io"], "deny": ["internal.example.com"]}


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async for served in serve(MemoryStore()):
        made = await served.client.post("/v1/tenants", json={"name": "acme"})
        assert made.status_code == 201
        yield served


async def set_lists(api: Api, egress: Any, tenant: str = "acme") -> dict[str, Any]:
    response = await api.client.patch(f"/v1/tenants/{tenant}", json={"egress": egress})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def webhook(url: str) -> dict[str, Any]:
    return {"type": "webhook", "url": url}


async def test_an_admin_sets_shows_and_clears_the_lists(api: Api) -> None:
    fresh = (await api.client.get("/v1/tenants/acme")).json()
    assert fresh["egress"] == {"allow": [], "deny": []}
    changed = await set_lists(api, {"allow": ["API.Partner.io.", "*.example.com"]})
    # normalised, and a list left out of the object is empty
    assert changed["egress"] == {"allow": ["api.partner.io", "*.example.com"], "deny": []}
    assert (await api.client.get("/v1/tenants/acme")).json() == changed
    listed = (await api.client.get("/v1/tenants")).json()["tenants"]
    assert [t["egress"] for t in listed if t["name"] == "acme"] == [changed["egress"]]
    # a body without `egress` changes nothing; `null` clears the lists
    same = await api.client.patch("/v1/tenants/acme", json={})
    assert same.json()["egress"] == changed["egress"]
    assert (await set_lists(api, None))["egress"] == {"allow": [], "deny": []}


async def test_a_tenant_key_reads_the_lists_but_cannot_change_them(api: Api) -> None:
    await set_lists(api, LISTS)
    async with await as_tenant(api, "acme") as writer:
        shown = (await writer.get("/v1/tenants/acme")).json()
        assert shown["egress"] == LISTS
        refused = await writer.patch("/v1/tenants/acme", json={"egress": None})
        assert error_of(refused, 403)["code"] == "forbidden"
    assert (await api.client.get("/v1/tenants/acme")).json()["egress"] == LISTS


async def test_an_unknown_tenant_is_404(api: Api) -> None:
    response = await api.client.patch("/v1/tenants/nobody", json={"egress": LISTS})
    assert error_of(response, 404)["code"] == "not_found"
    assert await api.store.get_tenant("nobody") is None


@pytest.mark.parametrize(
    ("egress", "field", "says"),
    [
        ({"allow": ["ok.example.com", "a.*.example.com"]}, "egress.allow[1]", "may only start"),
        ({"deny": ["https://x.io/"]}, "egress.deny[0]", "not an IP address or network"),
        ({"deny": ["*.com"]}, "egress.deny[0]", "top-level domain"),
        ({"allow": ["10.0.0.0/40"]}, "egress.allow[0]", "api.partner.io"),
        ({"allow": "x.io"}, "egress.allow", ""),
        ({"allow": [f"h{i}.io" for i in range(101)]}, "egress.allow", ""),
        ({"block": ["x.io"]}, "egress.block", ""),
    ],
)
async def test_bad_lists_are_422_naming_the_entry(
    api: Api, egress: dict[str, Any], field: str, says: str
) -> None:
    response = await api.client.patch("/v1/tenants/acme", json={"egress": egress})
    error = error_of(response, 422)
    assert error["field"] == field
    assert says in error["message"]
    assert (await api.client.get("/v1/tenants/acme")).json()["egress"] == {"allow": [], "deny": []}


async def test_jobs_outside_the_lists_are_refused_when_created(api: Api) -> None:
    await set_lists(api, LISTS)
    for url in ("https://hooks.example.com/x", "https://api.partner.io/"):
        body = job_body(tenant="acme", target=webhook(url))
        assert (await api.client.post("/v1/jobs", json=body)).status_code == 201, url
    cases = [
        (webhook("https://other.io/"), None, "target.url", "'other.io' is not on the allow list"),
        (
            webhook("https://internal.example.com/"),
            None,
            "target.url",
            "'internal.example.com' matches 'internal.example.com' on the deny list",
        ),
        (
            webhook("https://a.example.com/"),
            {"url": "https://alerts.other.io/"},
            "on_failure.url",
            "'alerts.other.io' is not on the allow list",
        ),
    ]
    for target, alert, field, says in cases:
        body = job_body(tenant="acme", target=target)
        if alert is not None:
            body["on_failure"] = alert
        error = error_of(await api.client.post("/v1/jobs", json=body), 422)
        assert (error["code"], error["field"]) == ("tenant_egress_refused", field)
        assert says in error["message"]
        assert "of tenant 'acme'" in error["message"]
    # a tenant key is held to the same lists
    async with await as_tenant(api, "acme") as writer:
        body = job_body(target=webhook("https://other.io/"))
        assert error_of(await writer.post("/v1/jobs", json=body), 422)["field"] == "target.url"


async def test_jobs_are_checked_when_a_url_or_the_tenant_changes(api: Api) -> None:
    job = (await api.client.post("/v1/jobs", json=job_body(tenant="acme"))).json()
    await set_lists(api, {"allow": ["api.partner.io"]})
    path = f"/v1/jobs/{job['id']}"
    # The lists narrowed after the job was made: editing something else still works...
    assert (await api.client.patch(path, json={"name": "renamed"})).status_code == 200
    # ...but a new URL must fit them.
    moved = await api.client.patch(path, json={"target": webhook("https://other.io/")})
    assert error_of(moved, 422)["field"] == "target.url"
    fits = await api.client.patch(path, json={"target": webhook("https://api.partner.io/")})
    assert fits.status_code == 200
    # Moving a job to a tenant whose lists refuse its URL is refused too.
    await api.client.post("/v1/tenants", json={"name": "strict"})
    await set_lists(api, {"deny": ["api.partner.io"]}, tenant="strict")
    error = error_of(await api.client.patch(path, json={"tenant": "strict"}), 422)
    assert error["field"] == "target.url"
    assert "of tenant 'strict'" in error["message"]


async def test_the_lists_never_widen_the_ssrf_guard(api: Api) -> None:
    await set_lists(api, {"allow": ["127.0.0.1", "localhost"]})
    for url in ("http://127.0.0.1/", "http://localhost/"):
        body = job_body(tenant="acme", target=webhook(url))
        error = error_of(await api.client.post("/v1/jobs", json=body), 422)
        assert error["code"] == "forbidden_address", url
