"""The API's error table: every tickwork error has a decided answer, and nothing is guessed."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

import tickwork
from tickwork.api.app import create_app
from tickwork.api.errors import ERROR_MAP, mapping_for
from tickwork.clock import ManualClock
from tickwork.errors import InvalidInput, StoreError, StoreUnavailable, TickworkError
from tickwork.queue.errors import QueueUnavailable
from tickwork.settings import Settings
from tickwork.store.base import JobQuery
from tickwork.store.memory import MemoryStore
from tickwork.testing import mint_key
from tickwork.webhooks import WebhookVerificationError
from tickwork.worker.executors.ssrf import EgressRefused

# Raised where no request is being served: on the worker (the SSRF guard refuses a webhook's
# destination) and in users' own receivers (tickwork.webhooks.verify).
NOT_RAISED_WHILE_SERVING = {EgressRefused, WebhookVerificationError}


def _every_tickwork_error() -> set[type[TickworkError]]:
    for module in pkgutil.walk_packages(tickwork.__path__, "tickwork."):
        if ".migrations." not in module.name and not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    found: set[type[TickworkError]] = set()
    todo: list[type[TickworkError]] = [TickworkError]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.add(sub)
            todo.append(sub)
    return found


def test_every_error_is_mapped_or_known_not_to_reach_the_api() -> None:
    unmapped = set()
    for error in _every_tickwork_error():
        if error is InvalidInput or issubclass(error, tuple(NOT_RAISED_WHILE_SERVING)):
            continue  # InvalidInput has its own handler (422 with the field)
        if not any(issubclass(error, kind) for kind, _ in ERROR_MAP):
            unmapped.add(error.__qualname__)
    assert unmapped == set(), "decide how the API answers these, in tickwork.api.errors"


def test_subclasses_come_before_their_bases_in_the_table() -> None:
    kinds = [kind for kind, _ in ERROR_MAP]
    for i, kind in enumerate(kinds):
        assert not any(issubclass(later, kind) for later in kinds[i + 1 :]), kind


def test_unavailable_stores_and_queues_say_when_to_retry() -> None:
    for error in (StoreError("x"), StoreUnavailable("x"), QueueUnavailable("x")):
        mapped = mapping_for(error)
        assert mapped is not None
        assert (mapped.status, mapped.retry_after_s) == (503, 1)


class FailingStore(MemoryStore):
    """A store whose job listing raises the error a test puts in `raising`."""

    raising: Exception = RuntimeError()

    async def list_jobs(self, query: JobQuery) -> list[Any]:
        raise self.raising


@pytest.fixture
async def failing() -> AsyncIterator[tuple[FailingStore, httpx.AsyncClient]]:
    store = FailingStore()
    await store.open()
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    key = await mint_key(store, clock=clock)
    app = create_app(store=store, clock=clock, settings=Settings())
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://t.test", headers={"Authorization": f"Bearer {key}"}
    ) as client:
        yield store, client
    await store.close()


async def test_a_store_that_cannot_be_reached_is_503_with_retry_after(
    failing: tuple[FailingStore, httpx.AsyncClient],
) -> None:
    store, client = failing
    store.raising = StoreUnavailable("lost its connection to PostgreSQL while listing")
    response = await client.get("/v1/jobs")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json()["error"] == {
        "code": "store_unavailable",
        "message": "the schedule store failed: lost its connection to PostgreSQL while listing",
        "field": None,
    }


async def test_a_tickwork_error_nobody_mapped_is_a_logged_500_not_a_guess(
    failing: tuple[FailingStore, httpx.AsyncClient], caplog: pytest.LogCaptureFixture
) -> None:
    store, client = failing
    store.raising = WebhookVerificationError("not from here")
    response = await client.get("/v1/jobs")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert any(getattr(r, "action", "") == "api.unhandled_error" for r in caplog.records)
