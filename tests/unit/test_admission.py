"""The admission rule (worker/admission.py): which parked fire starts next, given the pools'
slots, the tenant and host caps and what is running."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork.worker.admission import Admission, Lane, Pool, PoolLimits, origin_of, tenant_cap

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SEC = timedelta(seconds=1)

A_SLOW = Lane(Pool.WEBHOOK, "a", "http://slow:80")
A_FAST = Lane(Pool.WEBHOOK, "a", "http://fast:80")
B_SLOW = Lane(Pool.WEBHOOK, "b", "http://slow:80")
B_FAST = Lane(Pool.WEBHOOK, "b", "http://fast:80")
A_TASK = Lane(Pool.TASK, "a")
B_TASK = Lane(Pool.TASK, "b")


def admission(
    *, slots: int = 10, tenant: int = 10, host: int | None = None, task_slots: int = 10
) -> Admission[str]:
    return Admission(
        {
            Pool.WEBHOOK: PoolLimits(slots=slots, tenant_cap=min(tenant, slots), host_cap=host),
            Pool.TASK: PoolLimits(slots=task_slots, tenant_cap=min(tenant, task_slots)),
        }
    )


def take_all(adm: Admission[str], pool: Pool = Pool.WEBHOOK) -> list[str]:
    taken = []
    while (next_one := adm.take(pool)) is not None:
        taken.append(next_one[0])
    return taken


def test_first_attempts_go_before_retries_and_the_oldest_instant_first_within_each() -> None:
    adm = admission(slots=1)
    adm.park("retry-old", A_FAST, instant=T0, retry=True)
    adm.park("first-late", A_FAST, instant=T0 + 2 * SEC, retry=False)
    adm.park("first-early", B_FAST, instant=T0 + SEC, retry=False)
    adm.park("first-early-too", A_FAST, instant=T0 + SEC, retry=False)  # parked later: after
    order = []
    while (taken := adm.take(Pool.WEBHOOK)) is not None:
        order.append(taken[0])
        adm.done(taken[1])
    assert order == ["first-early", "first-early-too", "first-late", "retry-old"]


def test_a_tenants_backlog_does_not_start_before_another_tenants_fire_due_since() -> None:
    # Caps bind on fires in flight only: a task that never suspends finishes before the next
    # take, so tenant A's parked backlog never reaches its share. Round-robin across tenants
    # starts B's fire next, although A's are older.
    adm = admission(slots=4, tenant=2)
    for n in range(5):
        adm.park(f"a{n}", A_TASK, instant=T0, retry=False)
    order = []
    taken = adm.take(Pool.TASK)
    assert taken is not None
    order.append(taken[0])
    adm.done(taken[1])
    adm.park("b", B_TASK, instant=T0 + SEC, retry=False)  # came due while A's backlog waits
    while (taken := adm.take(Pool.TASK)) is not None:
        order.append(taken[0])
        adm.done(taken[1])
    assert order == ["a0", "b", "a1", "a2", "a3", "a4"]


def test_a_full_pool_starts_nothing_until_a_slot_is_free() -> None:
    adm = admission(slots=2)
    for n, lane in enumerate([A_FAST, B_FAST, A_SLOW]):
        adm.park(f"f{n}", lane, instant=T0, retry=False)
    assert take_all(adm) == ["f0", "f1"]
    assert adm.parked == 1
    assert adm.held_by_caps() == 0  # waiting for a slot is not being held back by a cap
    adm.done(B_FAST)
    assert take_all(adm) == ["f2"]


def test_an_origin_at_its_cap_waits_while_other_origins_start() -> None:
    adm = admission(slots=10, host=2)
    for n in range(5):
        adm.park(f"slow{n}", A_SLOW, instant=T0, retry=False)
    adm.park("b-slow", B_SLOW, instant=T0, retry=False)  # same origin, other tenant: capped too
    adm.park("fast", B_FAST, instant=T0 + SEC, retry=False)
    # Round-robin across tenants: A, then B (its slow one fills the origin's cap of 2), then
    # B's other origin; A's other slow fires wait for the origin.
    assert take_all(adm) == ["slow0", "b-slow", "fast"]
    assert adm.held_by_caps() == 4
    adm.done(A_SLOW)
    assert take_all(adm) == ["slow1"]  # the origin has room for one: A's, oldest first


def test_a_tenant_at_its_share_waits_while_other_tenants_start() -> None:
    adm = admission(slots=10, tenant=3)
    for n in range(5):
        adm.park(f"a{n}", A_FAST if n % 2 else A_SLOW, instant=T0, retry=False)
    adm.park("b", B_FAST, instant=T0 + SEC, retry=False)
    # Round-robin across tenants while both have fires; A's share is 3 over both its origins.
    assert take_all(adm) == ["a0", "b", "a1", "a2"]
    assert adm.held_by_caps() == 2
    assert adm.running(Pool.WEBHOOK) == 4


def test_tasks_have_their_own_pool_tenant_caps_and_no_host_cap() -> None:
    adm = admission(slots=1, tenant=1, host=1, task_slots=4)
    adm.park("hook", A_FAST, instant=T0, retry=False)
    for n in range(3):
        adm.park(f"a-task{n}", A_TASK, instant=T0, retry=False)
    adm.park("b-task", B_TASK, instant=T0 + SEC, retry=False)
    assert take_all(adm) == ["hook"]  # the webhook pool is full; tasks are not touched
    assert take_all(adm, Pool.TASK) == ["a-task0", "b-task"]  # tenant cap 1 in the task pool
    assert adm.running(Pool.TASK) == 2
    adm.done(A_TASK)
    assert take_all(adm, Pool.TASK) == ["a-task1"]


def test_a_tenant_s_share_is_rounded_up_and_never_zero() -> None:
    assert tenant_cap(512, 0.5) == 256
    assert tenant_cap(5, 0.5) == 3
    assert tenant_cap(1, 0.01) == 1
    assert tenant_cap(10, 1.0) == 10
    for share in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="share"):
            tenant_cap(10, share)


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="tenant_cap"):
        PoolLimits(slots=4, tenant_cap=5)
    with pytest.raises(ValueError, match="host_cap"):
        PoolLimits(slots=4, tenant_cap=4, host_cap=0)


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("http://Example.COM/a?b", "http://example.com:80"),
        ("http://example.com:80/other", "http://example.com:80"),
        ("https://example.com/", "https://example.com:443"),
        ("http://127.0.0.1:8081/x", "http://127.0.0.1:8081"),
        ("http://127.0.0.1:8082/x", "http://127.0.0.1:8082"),
        ("http://[::1]:9000/", "http://::1:9000"),
        ("http://example.com:bad/", "http://example.com:80"),
    ],
)
def test_the_host_cap_is_keyed_on_the_origin(url: str, origin: str) -> None:
    assert origin_of(url) == origin


LANES = [A_SLOW, A_FAST, B_SLOW, B_FAST, A_TASK, B_TASK]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("park"), st.sampled_from(LANES), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("take"), st.sampled_from(list(Pool))),
        st.tuples(st.just("done"), st.integers(0, 50)),
    ),
    max_size=80,
)
Key = tuple[bool, datetime, int]  # (retry, instant, arrival)


class Oracle:
    """The rule written out naively: every parked fire and running lane in plain lists."""

    def __init__(self, slots: int, tenant: int, host: int) -> None:
        self.slots, self.tenant, self.host = slots, tenant, host
        self.running: list[Lane] = []
        self.parked: list[tuple[Key, Lane]] = []
        self.served: list[tuple[Pool, str]] = []  # every take's (pool, tenant), in order

    def last_served(self, lane: Lane) -> int:
        """When the lane's tenant was last served in its pool (-1: never)."""
        turns = [t for t, pt in enumerate(self.served) if pt == (lane.pool, lane.tenant)]
        return turns[-1] if turns else -1

    def fits(self, lane: Lane) -> bool:
        same_tenant = [r for r in self.running if (r.pool, r.tenant) == (lane.pool, lane.tenant)]
        same_host = [r for r in self.running if lane.host is not None and r.host == lane.host]
        return len(same_tenant) < self.tenant and len(same_host) < self.host

    def take(self, pool: Pool) -> tuple[Key, Lane] | None:
        if sum(1 for r in self.running if r.pool is pool) >= self.slots:
            return None
        startable = [(key, lane) for key, lane in self.parked if lane.pool is pool]
        startable = [(key, lane) for key, lane in startable if self.fits(lane)]
        if not startable:
            return None
        # retries last; then the tenant served least recently; then the oldest, first parked
        best = min(
            startable,
            key=lambda pair: (pair[0][0], self.last_served(pair[1]), pair[0][1], pair[0][2]),
        )
        self.parked.remove(best)
        self.running.append(best[1])
        self.served.append((best[1].pool, best[1].tenant))
        return best


@settings(max_examples=300, deadline=None)
@given(steps=STEPS, slots=st.integers(1, 6), tenant=st.integers(1, 6), host=st.integers(1, 6))
def test_the_admission_matches_the_rule_written_out_naively(
    steps: list[tuple[object, ...]], slots: int, tenant: int, host: int
) -> None:
    tenant = min(tenant, slots)
    adm = admission(slots=slots, tenant=tenant, host=host, task_slots=slots)
    oracle = Oracle(slots, tenant, host)
    for n, step in enumerate(steps):
        if step[0] == "park":
            _, lane, offset, retry = step
            assert isinstance(lane, Lane)
            assert isinstance(offset, int)
            instant = T0 + offset * SEC
            adm.park(f"f{n}", lane, instant=instant, retry=bool(retry))
            oracle.parked.append(((bool(retry), instant, n), lane))
        elif step[0] == "take":
            pool = step[1]
            assert isinstance(pool, Pool)
            expected = oracle.take(pool)
            taken = adm.take(pool)
            assert taken == (None if expected is None else (f"f{expected[0][2]}", expected[1]))
        elif oracle.running:
            index = step[1]
            assert isinstance(index, int)
            adm.done(oracle.running.pop(index % len(oracle.running)))
        for pool in Pool:
            assert adm.running(pool) == sum(1 for r in oracle.running if r.pool is pool)
            assert adm.running(pool) <= slots
        assert adm.parked == len(oracle.parked)
        held = sum(1 for _, lane in oracle.parked if not oracle.fits(lane))
        assert adm.held_by_caps() == held
