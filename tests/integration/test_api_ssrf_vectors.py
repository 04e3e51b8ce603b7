"""The SSRF vector table (tests/support/ssrf_vectors.py) at the API's create-time check.

What the check can decide from the URL alone is refused when the job is created (422
`forbidden_address`, or `invalid_url` for what is not an http(s) URL), under the same allow-list
the vector is fired with; a name passes, because only its answer at fire time can tell, and the
URL the API stored is then refused by the worker's guard when it fires
(tests/integration/test_ssrf_vectors.py proves every vector there, against counting servers).
"""

from __future__ import annotations

import httpx
import pytest

from tickwork.settings import Settings

from ..support.ssrf_harness import (
    StubResolver,
    Tripwire,
    assert_refused_by_guard,
    fire_once,
    install_tripwire,
)
from ..support.ssrf_vectors import VECTORS, Vector
from .test_api import error_of
from .test_api_egress import _client, webhook

PORT = 8080  # nothing listens there, and the tripwire refuses any connection anyway


@pytest.fixture
async def tripwire(monkeypatch: pytest.MonkeyPatch) -> Tripwire:
    return install_tripwire(monkeypatch)


async def _create(vector: Vector, url: str) -> httpx.Response:
    async with await _client(Settings(webhook_allow=list(vector.allow))) as client:
        return await client.post("/v1/jobs", json=webhook(url))


@pytest.mark.parametrize("vector", VECTORS, ids=[v.id for v in VECTORS])
async def test_each_vector_at_create_and_if_accepted_at_fire(
    vector: Vector, tripwire: Tripwire
) -> None:
    url = vector.url.format(port=PORT)
    response = await _create(vector, url)
    if vector.at_create != "accepted":
        error = error_of(response, 422)
        assert (error["code"], error["field"]) == (vector.at_create, "target.url")
        return
    assert response.status_code == 201, response.text
    stored = response.json()["target"]["url"]
    attempt = await fire_once(stored, allow=vector.allow, resolve=StubResolver(vector.names))
    assert_refused_by_guard(attempt, vector.refusal)
    assert tripwire.connects == []


@pytest.mark.parametrize(
    "name",
    [" Host", "Host ", "Host\t", "Host:", "X-A\r\nHost", "\u0130ost", ""],
    ids=["leading-space", "trailing-space", "trailing-tab", "colon", "crlf", "non-ascii", "empty"],
)
async def test_a_header_name_that_could_rewrite_the_request_head_is_refused_at_create(
    name: str,
) -> None:
    body = webhook("https://example.com/hook")
    body["target"]["headers"] = {name: f"127.0.0.1:{PORT}"}
    async with await _client(Settings()) as client:
        error = error_of(await client.post("/v1/jobs", json=body), 422)
    assert error["field"] is not None
    assert error["field"].startswith("target.headers"), error
    assert "token" in error["message"]
