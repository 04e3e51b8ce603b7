"""Fixtures that build every ScheduleStore backend, so one suite runs against all of them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tickwork.store.base import ScheduleStore
from tickwork.store.memory import MemoryStore
from tickwork.store.postgres import PostgresStore
from tickwork.store.sqlite import SqliteStore

BACKENDS = ["memory", "sqlite", "postgres"]

StoreFactory = Callable[[], ScheduleStore]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """Builds stores that share one database (each like a separate process); memory shares one."""
    if backend == "memory":
        shared = MemoryStore()
        return lambda: shared
    if backend == "sqlite":
        path = tmp_path / "tickwork.db"
        return lambda: SqliteStore(path)
    dsn = request.getfixturevalue("pg_dsn")
    return lambda: PostgresStore(dsn)


@pytest.fixture
async def opened(make_store: StoreFactory) -> AsyncIterator[list[ScheduleStore]]:
    stores: list[ScheduleStore] = []
    yield stores
    for store in stores:
        await store.close()


@pytest.fixture
async def store(make_store: StoreFactory, opened: list[ScheduleStore]) -> ScheduleStore:
    return await open_store(make_store, opened)


async def open_store(make_store: StoreFactory, opened: list[ScheduleStore]) -> ScheduleStore:
    store = make_store()
    await store.open()
    opened.append(store)
    return store
