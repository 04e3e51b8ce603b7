"""The ScheduleStore contract for a tenant's destination lists (`set_tenant_egress`), on every
backend (memory, SQLite, PostgreSQL): replaced whole, kept apart from the secrets, shown by
every tenant read, refused for a tenant that does not exist."""

from __future__ import annotations

import pytest

from tickwork.domain.egress import EgressRules, parse_rules
from tickwork.errors import NotFound
from tickwork.store.base import ScheduleStore

from .store_helpers import SEC, SECRET_A, T0

LISTS = parse_rules(["*.example.com", "api.partner.io", "203.0.113.0/24"], ["bad.example.com"])


async def test_a_new_tenant_has_no_lists(store: ScheduleStore) -> None:
    created = await store.create_tenant("acme", now=T0)
    assert created.egress == EgressRules()
    assert created.egress.empty


async def test_lists_are_stored_whole_and_shown_by_every_read(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0)
    stored = await store.set_tenant_egress("acme", LISTS, now=T0 + SEC)
    assert stored.egress == LISTS
    assert (stored.created_at, stored.updated_at) == (T0, T0 + SEC)
    assert await store.get_tenant("acme") == stored
    listed = {t.tenant: t for t in await store.list_tenants()}
    assert listed["acme"] == stored
    assert listed["default"].egress.empty  # another tenant is untouched


async def test_lists_are_replaced_and_cleared(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0)
    await store.set_tenant_egress("acme", LISTS, now=T0 + SEC)
    narrower = parse_rules([], ["*.internal.example.com"])
    assert (await store.set_tenant_egress("acme", narrower, now=T0 + 2 * SEC)).egress == narrower
    cleared = await store.set_tenant_egress("acme", EgressRules(), now=T0 + 3 * SEC)
    assert cleared.egress.empty
    found = await store.get_tenant("acme")
    assert found is not None
    assert found.egress == EgressRules()


async def test_lists_and_secrets_do_not_overwrite_each_other(store: ScheduleStore) -> None:
    await store.create_tenant("acme", now=T0)
    await store.set_tenant_secrets("acme", [SECRET_A], now=T0 + SEC)
    with_lists = await store.set_tenant_egress("acme", LISTS, now=T0 + 2 * SEC)
    assert with_lists.webhook_secrets == (SECRET_A,)
    without_secrets = await store.set_tenant_secrets("acme", [], now=T0 + 3 * SEC)
    assert without_secrets.egress == LISTS


async def test_an_unknown_tenant_is_not_created(store: ScheduleStore) -> None:
    with pytest.raises(NotFound) as caught:
        await store.set_tenant_egress("nobody", LISTS, now=T0)
    assert "nobody" in str(caught.value)
    assert await store.get_tenant("nobody") is None
