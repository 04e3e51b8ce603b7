"""The three stores, driven through the same random operations, must show the same state.

A hypothesis state machine applies every operation to MemoryStore, SqliteStore and
PostgresStore in turn and compares what each returns (values, counts, and the type of any
exception it raised); after every step it compares everything a caller can observe: jobs,
runs, attempts, dead letters (all, and each tenant's), tenants, API keys and the table queue's
figures. The memory store is the
contract in its plainest form, so a failure names the SQL backend that differs from it; which
one is right is for store/base.py's docstrings to say.

What legitimately differs is mapped, not compared: run ids come from each backend's own
sequence (PostgreSQL's skips the values an `ON CONFLICT DO NOTHING` consumed), so runs are
named by their occurrence key, which all three derive the same way, and attempt ids are left
out; where one claim inserted several runs, which gets the lower id is each backend's own, so
lists of several jobs' runs in id order are checked for that order per backend and compared by
key. Calls whose result the contract leaves open are not generated: a lease or prune `limit`
that would have to choose between equally old rows; two plans for one job in one claim batch
(the scheduler reads each due job once); and one lease named twice in a `finish_runs` or
`extend_leases` batch (PostgreSQL applies or counts it once, the others once per entry; no
caller sends that).

Time is a manual `now` that a rule advances; nothing reads the wall clock. The stores run on
one event loop that lives as long as the test; each example starts from empty tables (and a
MemoryStore without its `default` tenant; every example creates `default` on all three first,
as the migration does).
"""

from __future__ import annotations

import asyncio
import base64
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tickwork.clock import ManualClock
from tickwork.domain.jobs import (
    AlertTarget,
    AtTrigger,
    CronTrigger,
    EveryTrigger,
    Job,
    JobState,
    MisfirePolicy,
    Schedule,
    Target,
    TaskTarget,
    WebhookTarget,
)
from tickwork.domain.keys import ApiKey, Role, hash_key
from tickwork.domain.occurrences import LedgerRange
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import AttemptRecord, Envelope, Fire, Run, RunOutcome, RunStatus
from tickwork.errors import InvalidInput, TickworkError
from tickwork.scheduler.planning import plan_claim
from tickwork.services.jobs import JobService
from tickwork.store.base import Applied, ClaimPlan, DueJob, JobQuery, ScheduleStore
from tickwork.store.memory import MemoryStore
from tickwork.store.postgres import PostgresStore, asyncpg_dsn
from tickwork.store.postgres.statements import SQL as PG_SQL
from tickwork.store.sqlite import SqliteStore
from tickwork.timing.triggers import first_occurrence, validate_schedule

BACKENDS = ("memory", "sqlite", "postgres")
# Half an hour before Europe/Berlin's spring-forward (01:00 UTC), with a fraction of a second.
T0 = datetime(2026, 3, 29, 0, 30, 0, 250_000, tzinfo=UTC)
SEC = timedelta(seconds=1)
DAY = timedelta(days=1)
MS = timedelta(milliseconds=1)
US = timedelta(microseconds=1)
BIG = 10_000  # a limit no example reaches: which rows a smaller one picks is left open
GONE_RUN_ID = 987_654_321  # no backend hands out this id within an example

CRONS = [
    ("*/20 * * * * *", "UTC"),
    ("*/15 * * * *", "Europe/Berlin"),
    ("0 2 * * *", "Europe/Berlin"),  # in the gap the clock change leaves tonight
    ("30 * * * *", "America/New_York"),
]
TENANTS = ("default", "acme", "globex")
OWNERS = ("w1", "w2")
SECRETS = tuple("whsec_" + base64.b64encode(bytes([n]) * 32).decode() for n in range(1, 4))
RETRY = RetryPolicy(max_attempts=3, base_delay_ms=250, max_delay_ms=1000, multiplier=3.0)
ALERT = AlertTarget(url="http://127.0.0.1:9/alert", headers={"x-pager": "ops"})
RESET_SQL = (
    "tw_attempts",
    "tw_runs",
    "tw_occurrences",
    "tw_jobs",
    "tw_tenants",
    "tw_api_keys",
)
KEY_IDS = tuple(f"key-{n}" for n in range(1, 5))  # create_key draws from these: some collide
KEY_HASHES = tuple(hash_key(f"tw_0000000{n}_secret") for n in range(1, 5))


@dataclass(frozen=True, kw_only=True, slots=True)
class Raised:
    """What a store call raised, by type: messages may name backend-specific ids."""

    kind: str


# -- the stores, opened once per test -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Backends:
    """The SQL stores and their loop; every example gets a fresh MemoryStore and empty tables."""

    runner: asyncio.Runner
    sqlite: SqliteStore
    postgres: PostgresStore
    pg_admin: asyncpg.Connection

    def fresh(self) -> dict[str, ScheduleStore]:
        with closing(sqlite3.connect(self.sqlite.path)) as conn, conn:
            for table in RESET_SQL:
                conn.execute(f"DELETE FROM {table}")
        # tw_queue: PostgreSQL's pending runs (ADR 0030); SQLite has no such table.
        self.runner.run(self.pg_admin.execute(f"TRUNCATE {', '.join(RESET_SQL)}, tw_queue"))
        memory = MemoryStore()
        self.runner.run(memory.delete_tenant("default", now=T0))  # empty, like the tables
        return {"memory": memory, "sqlite": self.sqlite, "postgres": self.postgres}


@contextmanager
def opened_backends(pg_dsn: str, directory: Path) -> Iterator[Backends]:
    with asyncio.Runner() as runner, ExitStack() as cleanup:
        sqlite = SqliteStore(directory / "stateful.db")
        runner.run(sqlite.open())
        cleanup.callback(lambda: runner.run(sqlite.close()))
        postgres = PostgresStore(pg_dsn)
        runner.run(postgres.open())
        cleanup.callback(lambda: runner.run(postgres.close()))
        admin = runner.run(asyncpg.connect(asyncpg_dsn(pg_dsn)))
        cleanup.callback(lambda: runner.run(admin.close()))
        yield Backends(runner=runner, sqlite=sqlite, postgres=postgres, pg_admin=admin)


# -- what the rules generate ----------------------------------------------------------------------


@st.composite
def schedules(draw: st.DrawFn, now: datetime) -> Schedule:
    kind = draw(st.sampled_from(["cron", "every", "at"]))
    trigger: CronTrigger | EveryTrigger | AtTrigger
    if kind == "cron":
        expr, zone = draw(st.sampled_from(CRONS))
        trigger = CronTrigger(expr=expr, timezone=zone)
    elif kind == "every":
        # Anchored close to now and short, so that most jobs come due within a few steps.
        anchor = now + draw(st.integers(-10_000_000, 10_000_000)) * US  # to the microsecond
        interval_ms = draw(st.sampled_from([1_000, 5_000, 60_000]))
        trigger = EveryTrigger(interval_ms=interval_ms, anchor=anchor)
    else:
        trigger = AtTrigger(at=now + draw(st.integers(-5_000_000, 30_000_000)) * US)  # late: fires
    start_at = draw(st.none() | st.integers(-10, 60).map(lambda s: now + s * SEC))
    length = draw(st.none() | st.integers(5, 600).map(lambda s: s * SEC))
    schedule = Schedule(
        trigger=trigger,
        start_at=start_at,
        end_at=None if length is None else (start_at or now) + length,
        misfire=draw(st.sampled_from(MisfirePolicy)),
        misfire_grace_ms=draw(st.sampled_from([0, 1_000, 60_000])),
    )
    try:
        validate_schedule(schedule)
    except InvalidInput:  # no occurrence inside the window: drop the window
        return replace(schedule, start_at=None, end_at=None)
    return schedule


@st.composite
def targets(draw: st.DrawFn, n: int) -> Target:
    if draw(st.booleans()):
        return TaskTarget(name="sample.noop", args={"n": n, "tags": ["a"]}, timeout_s=5.0)
    secrets = draw(st.lists(st.sampled_from(SECRETS), max_size=2, unique=True))
    return WebhookTarget(
        url=f"http://127.0.0.1:9/hook/{n}",
        method=draw(st.sampled_from(["POST", "PUT"])),
        headers={"x-n": str(n)},
        body={"n": n, "tags": ["a", "b"]},
        timeout_s=2.5,
        secrets=tuple(secrets),
    )


def armed(job: Job, schedule: Schedule, now: datetime) -> Job:
    """The job on `schedule` from `now` on, as the job service arms a new or edited schedule."""
    next_run_at = first_occurrence(schedule, now)
    if next_run_at is None:
        return replace(job, schedule=schedule, next_run_at=None, state=JobState.COMPLETED)
    state = JobState.SCHEDULED if job.state is JobState.COMPLETED else job.state
    return replace(job, schedule=schedule, next_run_at=next_run_at, state=state)


def job_of(key: str) -> str:
    return key.split(":", 1)[0]


# -- the machine ----------------------------------------------------------------------------------


class StoresAgree(RuleBasedStateMachine):
    def __init__(self, backends: Backends) -> None:
        super().__init__()
        self.backends = backends
        self.stores = backends.fresh()
        self.clock = ManualClock(T0)
        self.services = {name: JobService(store, self.clock) for name, store in self.stores.items()}
        self.job_ids: list[str] = []  # every job created, deleted ones too (they must stay gone)
        self.last_seen: dict[str, Job] = {}  # each job as last read, to edit it once deleted
        self.ids: dict[str, dict[str, int]] = {}  # occurrence key -> backend -> run id
        self.keys: dict[str, dict[int, str]] = {name: {} for name in BACKENDS}
        # A manual run's key ends in a random tag, different on each backend: each backend's
        # key maps to one name shared by all (what the views compare).
        self.manual_keys: dict[str, dict[str, str]] = {name: {} for name in BACKENDS}
        self.old_plans: list[ClaimPlan] = []

    @property
    def now(self) -> datetime:
        return self.clock.now()

    # -- running one call on every backend and comparing ------------------------------------

    def each(self, call: Callable[[str, ScheduleStore], Awaitable[Any]]) -> dict[str, Any]:
        async def run_all() -> dict[str, Any]:
            results: dict[str, Any] = {}
            for name, store in self.stores.items():
                try:
                    results[name] = await call(name, store)
                except TickworkError as exc:
                    results[name] = Raised(kind=type(exc).__name__)
            return results

        return self.backends.runner.run(run_all())

    def agree(
        self, what: str, results: dict[str, Any], view: Callable[[str, Any], Any] | None = None
    ) -> Any:
        """Assert every backend's result looks like memory's; returns memory's raw result."""
        seen = {
            name: value if view is None or isinstance(value, Raised) else view(name, value)
            for name, value in results.items()
        }
        for name in BACKENDS[1:]:
            assert seen[name] == seen["memory"], (
                f"{what}: {name} disagrees with memory\n"
                f"  memory:   {seen['memory']!r}\n  {name + ':':<9} {seen[name]!r}"
            )
        return results["memory"]

    def shared_key(self, name: str, key: str) -> str:
        return self.manual_keys[name].get(key, key)

    def learn(self, name: str, run_id: int, key: str) -> None:
        key = self.shared_key(name, key)
        self.ids.setdefault(key, {})[name] = run_id
        self.keys[name][run_id] = key

    def run_id(self, name: str, key: str) -> int:
        return self.ids.get(key, {}).get(name, GONE_RUN_ID)

    def key(self, name: str, run_id: int) -> str:
        return self.keys[name].get(run_id, f"unknown run {run_id}")

    # views: results with backend-generated ids replaced by occurrence keys

    def canon(self, key: str) -> str:
        return self.aliases.get(key, key)

    def fire_view(self, name: str, fires: list[Fire]) -> list[Fire]:
        for fire in fires:
            self.learn(name, fire.run_id, fire.key)
        shared = (replace(f, run_id=0, key=self.shared_key(name, f.key)) for f in fires)
        return sorted(shared, key=lambda f: f.key)

    def envelope_view(self, name: str, envelopes: list[Envelope]) -> list[Envelope]:
        for envelope in envelopes:
            self.learn(name, envelope.run_id, envelope.key)
        shared = (replace(e, run_id=0, key=self.shared_key(name, e.key)) for e in envelopes)
        return sorted(shared, key=lambda e: e.key)

    def run_view(self, name: str, run: Run) -> Run:
        self.learn(name, run.id, run.key)
        return replace(run, id=0, key=self.shared_key(name, run.key))

    def runs_view(self, name: str, runs: list[Run]) -> list[Run]:
        return [self.run_view(name, run) for run in runs]  # order kept: it is specified

    def newest_first_view(self, name: str, runs: list[Run]) -> list[Run]:
        """A list of several jobs' runs, newest id first (the dead-letter queue): each backend
        must list its own ids in that order, but which of the runs one claim inserts gets the
        lower id is each backend's (PostgreSQL numbers them in job id order, memory in plan
        order), so the runs themselves are compared by key."""
        ids = [run.id for run in runs]
        assert ids == sorted(ids, reverse=True), f"{name} did not list newest id first: {ids}"
        return sorted(self.runs_view(name, runs), key=lambda run: run.key)

    def attempts_view(self, name: str, attempts: list[AttemptRecord]) -> list[tuple[str, Any]]:
        return [(self.key(name, a.run_id), replace(a, id=0, run_id=0)) for a in attempts]

    def applied_view(self, name: str, applied: Applied) -> tuple[int, list[str]]:
        return int(applied), sorted(self.key(name, run_id) for run_id in applied.run_ids)

    # -- reading the reference to pick arguments --------------------------------------------

    def memory_run(self, key: str) -> Run | None:
        run_id = self.run_id("memory", key)
        store = self.stores["memory"]
        try:
            return self.backends.runner.run(store.get_run(run_id))
        except TickworkError:
            return None

    def fenced(self, data: st.DataObject, keys: list[str]) -> list[tuple[str, int]]:
        """(key, fence) pairs for these runs: the current fence, or one a lease moved past."""
        pairs = []
        for key in keys:
            run = self.memory_run(key)
            current = 1 if run is None else run.fence_token
            pairs.append(
                (key, current + data.draw(st.sampled_from([0, 0, 0, -1, 1]), label="fence"))
            )
        return pairs

    def some_keys(
        self,
        data: st.DataObject,
        max_size: int = 3,
        prefer: Callable[[Run], bool] = lambda run: run.status is RunStatus.PENDING,
    ) -> list[str]:
        """Runs to act on: often ones `prefer` picks (where the call has an effect), else any."""
        every = sorted(self.ids)
        preferred = [key for key in every if (run := self.memory_run(key)) and prefer(run)]
        use_preferred = bool(preferred) and data.draw(st.booleans(), label="preferred")
        among = preferred if use_preferred else every
        return data.draw(
            st.lists(st.sampled_from(among), min_size=1, max_size=max_size, unique=True),
            label="runs",
        )

    # -- jobs --------------------------------------------------------------------------------

    @initialize(data=st.data(), count=st.integers(1, 4))
    def some_jobs(self, data: st.DataObject, count: int) -> None:
        for _ in range(count):
            self.create_job(data)

    @rule(data=st.data())
    def create_job(self, data: st.DataObject) -> None:
        n = len(self.job_ids) + 1
        schedule = data.draw(schedules(self.now), label="schedule")
        template = Job(
            id=f"{n:032x}",
            name=f"{type(schedule.trigger).__name__.lower()}-{n}",
            tenant=data.draw(st.sampled_from(TENANTS), label="tenant"),
            schedule=schedule,
            target=data.draw(targets(n), label="target"),
            state=JobState.SCHEDULED,
            next_run_at=None,
            created_at=self.now,
            updated_at=self.now,
            retry=data.draw(st.sampled_from([RetryPolicy(), RETRY]), label="retry"),
            on_failure=data.draw(st.sampled_from([None, ALERT]), label="on_failure"),
        )
        job = armed(template, schedule, self.now)
        self.job_ids.append(job.id)
        self.agree("create_job", self.each(lambda _, s: s.create_job(job)))

    @precondition(lambda self: self.job_ids)
    @rule(data=st.data())
    def update_job(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.job_ids), label="job")
        current = self.last_seen[job_id]
        change = data.draw(
            st.sampled_from(["rename", "tenant", "schedule", "target", "rearm", "created_at"]),
            label="change",
        )
        edited = replace(current, updated_at=self.now)
        if change == "rename":
            edited = replace(edited, name=current.name + "+")
        elif change == "tenant":
            edited = replace(edited, tenant=data.draw(st.sampled_from(TENANTS)))
        elif change == "schedule":
            edited = armed(edited, data.draw(schedules(self.now)), self.now)
        elif change == "target":
            edited = replace(
                edited,
                target=data.draw(targets(len(self.job_ids) + 100)),
                retry=RETRY if current.retry == RetryPolicy() else RetryPolicy(),
                on_failure=None if current.on_failure else ALERT,
            )
        elif change == "rearm" and current.last_fired_at is not None:
            # An edit that moves the job back onto an occurrence it already fired.
            edited = replace(edited, next_run_at=current.last_fired_at, state=JobState.SCHEDULED)
        elif change == "created_at":
            # Not an editable field: a caller that sends another value must not change it.
            edited = replace(edited, created_at=self.now + SEC)
        if data.draw(st.booleans(), label="stale"):
            fence = current.fence_token
            edited = replace(edited, fence_token=fence - 1 if fence else fence + 1)
        self.agree("update_job", self.each(lambda _, s: s.update_job(edited)))

    @precondition(lambda self: self.job_ids)
    @rule(data=st.data(), pause=st.booleans())
    def pause_or_resume(self, data: st.DataObject, pause: bool) -> None:
        job_id = data.draw(st.sampled_from(self.job_ids), label="job")
        if pause:
            results = self.each(lambda name, _: self.services[name].pause(job_id))
        else:
            results = self.each(lambda name, _: self.services[name].resume(job_id))
        self.agree("pause" if pause else "resume", results)

    @precondition(lambda self: self.job_ids)
    @rule(data=st.data())
    def delete_job(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.job_ids), label="job")
        self.agree("delete_job", self.each(lambda _, s: s.delete_job(job_id)))

    @precondition(lambda self: self.job_ids)
    @rule(data=st.data())
    def list_jobs(self, data: st.DataObject) -> None:
        """A filtered page of jobs (the full list is compared after every step)."""
        query = JobQuery(
            state=data.draw(st.none() | st.sampled_from(JobState), label="state"),
            tenant=data.draw(st.none() | st.sampled_from(TENANTS), label="tenant"),
            name_prefix=data.draw(st.none() | st.sampled_from(["cron", "every", "at"])),
            after_id=data.draw(st.none() | st.sampled_from(self.job_ids), label="after_id"),
            limit=data.draw(st.integers(1, 4), label="limit"),
        )
        self.agree(f"list_jobs({query})", self.each(lambda _, s: s.list_jobs(query)))

    @rule(tenant=st.sampled_from(TENANTS), secrets=st.lists(st.sampled_from(SECRETS), max_size=2))
    def set_tenant_secrets(self, tenant: str, secrets: list[str]) -> None:
        now = self.now
        self.agree(
            "set_tenant_secrets",
            self.each(lambda _, s: s.set_tenant_secrets(tenant, secrets, now=now)),
        )

    # -- tenants and API keys ------------------------------------------------------------------

    @initialize()
    def default_tenant(self) -> None:
        """Every database starts with `default` (migration 0006)."""
        now = self.now
        self.agree(
            "create_tenant(default)", self.each(lambda _, s: s.create_tenant("default", now=now))
        )

    @rule(tenant=st.sampled_from(TENANTS))
    def create_tenant(self, tenant: str) -> None:
        now = self.now
        self.agree(
            f"create_tenant({tenant})", self.each(lambda _, s: s.create_tenant(tenant, now=now))
        )

    @rule(tenant=st.sampled_from(TENANTS))
    def delete_tenant(self, tenant: str) -> None:
        now = self.now
        self.agree(
            f"delete_tenant({tenant})", self.each(lambda _, s: s.delete_tenant(tenant, now=now))
        )

    @rule(data=st.data())
    def create_key(self, data: st.DataObject) -> None:
        role = data.draw(st.sampled_from(Role), label="role")
        key = ApiKey(
            id=data.draw(st.sampled_from(KEY_IDS), label="key id"),
            name="a key",
            role=role,
            tenant=None
            if role is Role.ADMIN
            else data.draw(st.sampled_from(TENANTS), label="tenant"),
            prefix="tw_00000000",
            secret_hash=data.draw(st.sampled_from(KEY_HASHES), label="hash"),
            created_at=self.now,
            expires_at=data.draw(st.sampled_from([None, self.now + 3600 * SEC]), label="expires"),
        )
        self.agree(f"create_key({key})", self.each(lambda _, s: s.create_key(key)))

    @rule(key_id=st.sampled_from(KEY_IDS))
    def revoke_key(self, key_id: str) -> None:
        now = self.now
        self.agree(f"revoke_key({key_id})", self.each(lambda _, s: s.revoke_key(key_id, now=now)))

    @rule(data=st.data())
    def touch_keys(self, data: st.DataObject) -> None:
        """What the API reports after a while: when each key was last used (an older instant
        than the stored one must not move it back)."""
        ids = data.draw(st.lists(st.sampled_from(KEY_IDS), max_size=3, unique=True), label="ids")
        ago = st.sampled_from([0, 1, 1_000_000])
        used = {key_id: self.now - data.draw(ago, label="us ago") * US for key_id in ids}
        self.agree(f"touch_keys({used})", self.each(lambda _, s: s.touch_keys(used)))

    # Reads by key and by tenant: rules rather than part of the check after every step (the
    # full lists are compared there), which stays about as fast as before keys existed.

    @rule(n=st.integers(0, len(KEY_IDS) - 1))
    def read_key(self, n: int) -> None:
        key_id, secret_hash = KEY_IDS[n], KEY_HASHES[n]
        self.agree(f"get_key({key_id})", self.each(lambda _, s: s.get_key(key_id)))
        self.agree("key_by_hash", self.each(lambda _, s: s.key_by_hash(secret_hash)))

    @rule(tenant=st.sampled_from(TENANTS))
    def read_tenants_share(self, tenant: str) -> None:
        """What a tenant-scoped key sees: its tenant's keys and dead letters."""
        self.agree(f"list_keys({tenant})", self.each(lambda _, s: s.list_keys(tenant=tenant)))
        self.agree(
            f"list_dead_letters({tenant})",
            self.each(lambda _, s: s.list_dead_letters(limit=BIG, tenant=tenant)),
            self.newest_first_view,
        )

    # -- the fire path -----------------------------------------------------------------------

    # The tick is the heart of the fire path: two rules (in process and handed off) make
    # hypothesis, which picks among the enabled rules, choose it about twice as often.

    @rule(data=st.data())
    def tick(self, data: st.DataObject) -> None:
        """A scheduler tick that leases its runs to its own executor (`claim`)."""
        self.scheduler_tick(data, hand_off=False)

    @rule(data=st.data())
    def tick_handing_off(self, data: st.DataObject) -> None:
        """A scheduler tick that leaves its runs to workers elsewhere (`claim_hand_off`)."""
        self.scheduler_tick(data, hand_off=True)

    def scheduler_tick(self, data: st.DataObject, *, hand_off: bool) -> None:
        """A little later: the due scan, plans from scheduler.planning, then the claim."""
        # Drawn here, not as rule arguments: hypothesis picks rules with many arguments last.
        later_ms = data.draw(st.sampled_from([0, 500, 1_000, 5_000, 61_000]), label="later ms")
        lookahead = data.draw(st.sampled_from([0, 200, 5_000]), label="look-ahead ms")
        ttl_s = data.draw(st.sampled_from([1, 30]), label="lease ttl s")
        self.clock.advance(later_ms * MS)
        now, horizon = self.now, self.now + lookahead * MS
        # The bound below which an earlier tick settled everything (scheduler.planning's
        # settled_bound); a job left below it is simply not scanned.
        settled_s = data.draw(st.none() | st.sampled_from([1, 3600]), label="settled s ago")
        not_before = None if settled_s is None else now - settled_s * SEC

        def by_instant(_: str, due: list[DueJob]) -> list[DueJob]:
            return sorted(due, key=lambda d: (d.next_run_at, d.job_id))  # ties: any order

        due = self.agree(
            "due_jobs",
            self.each(lambda _, s: s.due_jobs(horizon, BIG, not_before=not_before)),
            by_instant,
        )
        plans = [plan_claim(d, now) for d in by_instant("memory", due)]
        planned = {plan.job_id for plan in plans}
        # Plans from earlier ticks, replayed as a slower scheduler would send them: they claim
        # only a job that is still exactly as they read it.
        replays = [p for p in self.old_plans if p.job_id not in planned]
        replayed = data.draw(
            st.lists(st.sampled_from(replays), max_size=2) if replays else st.just([]),
            label="replays",
        )
        for plan in replayed:
            if plan.job_id not in planned:
                plans.append(plan)
                planned.add(plan.job_id)
        if hand_off:
            results = self.each(lambda _, s: s.claim_hand_off(plans, owner="sched", now=now))
            self.agree("claim_hand_off", results, self.envelope_view)
        else:
            lease_until = now + ttl_s * SEC
            results = self.each(
                lambda _, s: s.claim(plans, owner="w1", lease_until=lease_until, now=now)
            )
            self.agree("claim", results, self.fire_view)
        self.old_plans = (self.old_plans + plans)[-8:]

    @precondition(lambda self: self.job_ids)
    @rule(data=st.data())
    def add_manual_run(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.job_ids), label="job")
        now = self.now
        results = self.each(lambda _, s: s.add_manual_run(job_id, now=now))
        shared = f"{job_id}:manual#{sum(len(keys) for keys in self.manual_keys.values())}"
        for name, run in results.items():
            if isinstance(run, Run):
                self.manual_keys[name][run.key] = shared
        self.agree("add_manual_run", results, self.run_view)

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), owner=st.sampled_from(OWNERS))
    def lease_runs(self, data: st.DataObject, owner: str) -> None:
        ttl_s = data.draw(st.sampled_from([1, 30]), label="lease ttl s")
        # Behind an external queue, never-leased hand-offs wait this much longer (None: the
        # table queue's single horizon).
        backstop_s = data.draw(st.sampled_from([None, 0, 1, 10]), label="backstop s")
        now, until = self.now, self.now + ttl_s * SEC
        hand_offs_by = None if backstop_s is None else now - backstop_s * SEC
        results = self.each(
            lambda _, s: s.lease_runs(
                now=now, hand_offs_by=hand_offs_by, owner=owner, lease_until=until, limit=BIG
            )
        )
        self.agree(f"lease_runs(hand_offs_by={hand_offs_by})", results, self.fire_view)

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), owner=st.sampled_from(OWNERS), ttl_s=st.sampled_from([1, 30]))
    def lease_fenced_runs(self, data: st.DataObject, owner: str, ttl_s: int) -> None:
        pairs = self.fenced(data, self.some_keys(data, max_size=4))
        if data.draw(st.booleans(), label="repeat one"):
            pairs.append(pairs[0])  # a message delivered twice in one fetch
        now, until = self.now, self.now + ttl_s * SEC

        def lease(name: str, store: ScheduleStore) -> Awaitable[list[Fire]]:
            leases = [(self.run_id(name, key), fence) for key, fence in pairs]
            return store.lease_fenced_runs(leases, owner=owner, lease_until=until, now=now)

        self.agree(f"lease_fenced_runs({pairs})", self.each(lease), self.fire_view)

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), owner=st.sampled_from(OWNERS))
    def take_back_own_leases(self, data: st.DataObject, owner: str) -> None:
        holding = data.draw(
            st.lists(st.sampled_from(sorted(self.ids)), max_size=3), label="holding"
        )
        now, until = self.now, self.now + 30 * SEC

        def take_back(name: str, store: ScheduleStore) -> Awaitable[list[Fire]]:
            held = [self.run_id(name, key) for key in holding]
            return store.take_back_own_leases(
                owner=owner, holding=held, now=now, lease_until=until, limit=BIG
            )

        self.agree("take_back_own_leases", self.each(take_back), self.fire_view)

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), ttl_s=st.sampled_from([10, 60]))
    def extend_leases(self, data: st.DataObject, ttl_s: int) -> None:
        pairs = self.fenced(data, self.some_keys(data))
        until = self.now + ttl_s * SEC

        def extend(name: str, store: ScheduleStore) -> Awaitable[int]:
            leases = [(self.run_id(name, key), fence) for key, fence in pairs]
            return store.extend_leases(leases, lease_until=until)

        self.agree(f"extend_leases({pairs})", self.each(extend))

    # One rule per outcome an attempt can end with; a batch (what an executor flushes) may
    # still mix them, but each rule makes its own ending likely.

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def succeed(self, data: st.DataObject) -> None:
        self.finish_runs(data, RunStatus.SUCCEEDED)

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def retry_later(self, data: st.DataObject) -> None:
        self.finish_runs(data, RunStatus.PENDING)

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def dead_letter(self, data: st.DataObject) -> None:
        self.finish_runs(data, RunStatus.FAILED)

    def finish_runs(self, data: st.DataObject, status: RunStatus) -> None:
        """Outcomes for 1-3 runs: success, a retry (PENDING + retry_at) or a dead letter."""
        pairs = self.fenced(data, self.some_keys(data))
        others = st.sampled_from([RunStatus.SUCCEEDED, RunStatus.PENDING, RunStatus.FAILED])
        kinds = [status, *(data.draw(st.just(status) | others) for _ in pairs[1:])]
        retry_in = data.draw(st.sampled_from([0, 1_000, 30_000]), label="retry in ms")
        now = self.now
        attempts = {key: getattr(self.memory_run(key), "attempt", 1) for key, _ in pairs}

        def outcome(name: str, key: str, fence: int, status: RunStatus) -> RunOutcome:
            failed = status is not RunStatus.SUCCEEDED
            return RunOutcome(
                run_id=self.run_id(name, key),
                job_id=job_of(key),
                attempt=attempts[key],
                fence_token=fence,
                status=status,
                started_at=now,
                finished_at=now + 5 * MS,
                http_status=503 if failed else 200,
                error="HTTP 503" if failed else None,
                retry_at=now + retry_in * MS if status is RunStatus.PENDING else None,
                worker="w1",
            )

        def finish(name: str, store: ScheduleStore) -> Awaitable[Applied]:
            outcomes = [outcome(name, k, f, s) for (k, f), s in zip(pairs, kinds, strict=True)]
            return store.finish_runs(outcomes)

        self.agree(f"finish_runs({pairs}, {kinds})", self.each(finish), self.applied_view)

    # -- dead letters and history --------------------------------------------------------------

    def some_dead_letters(self, data: st.DataObject) -> list[str] | None:
        if data.draw(st.booleans(), label="all"):
            return None
        return self.some_keys(data, prefer=lambda run: run.dead_lettered_at is not None)

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def redrive(self, data: st.DataObject) -> None:
        keys, now = self.some_dead_letters(data), self.now

        def redrive(name: str, store: ScheduleStore) -> Awaitable[int]:
            ids = None if keys is None else [self.run_id(name, key) for key in keys]
            return store.redrive(ids, now=now)

        self.agree(f"redrive({keys})", self.each(redrive))

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def purge_dead_letters(self, data: st.DataObject) -> None:
        keys = self.some_dead_letters(data)

        def purge(name: str, store: ScheduleStore) -> Awaitable[int]:
            ids = None if keys is None else [self.run_id(name, key) for key in keys]
            return store.purge_dead_letters(ids)

        self.agree(f"purge_dead_letters({keys})", self.each(purge))

    @precondition(lambda self: self.ids)
    @rule(age_s=st.sampled_from([0, 1, 60, 3600]))
    def prune_history(self, age_s: int) -> None:
        cutoff = self.now - age_s * SEC
        self.agree(
            "prune_history",
            self.each(lambda _, s: s.prune_history(finished_before=cutoff, limit=BIG)),
        )

    @rule(step_s=st.sampled_from([0.000_001, 0.001, 1, 61, 600, 3600, 86_400]))
    def advance_time(self, step_s: float) -> None:
        """Time passes with no tick: a scheduler that is down, or between two ticks."""
        self.clock.advance(timedelta(seconds=step_s))

    # -- after every step: everything observable ------------------------------------------------

    @invariant()
    def everything_observable_agrees(self) -> None:
        now = self.now
        self.agree("list_jobs", self.each(lambda _, s: s.list_jobs(JobQuery(limit=BIG))))
        for job_id in self.job_ids:
            self.check_job(job_id)
        for key in sorted(self.ids):
            self.check_run(key)
        self.agree(
            "list_dead_letters",
            self.each(lambda _, s: s.list_dead_letters(limit=BIG)),
            self.newest_first_view,
        )
        for tenant in TENANTS:
            self.check_tenant(tenant)
        self.agree("list_tenants", self.each(lambda _, s: s.list_tenants()))
        self.agree("list_keys", self.each(lambda _, s: s.list_keys()))
        self.agree("stats", self.each(lambda _, s: s.stats()))
        self.agree("next_due_at", self.each(lambda _, s: s.next_due_at()))
        self.agree("next_due_at(now)", self.each(lambda _, s: s.next_due_at(not_before=now)))
        self.agree("next_lease_at", self.each(lambda _, s: s.next_lease_at()))
        self.agree("next_lease_at(now)", self.each(lambda _, s: s.next_lease_at(after=now)))
        self.agree("leasable_runs", self.each(lambda _, s: s.leasable_runs(now)))
        # Not observable through the store, but what every lease relies on: PostgreSQL's queue
        # has one row per pending run, with the run's lease end (ADR 0030).
        backends = self.backends
        mismatches = backends.runner.run(backends.pg_admin.fetch(PG_SQL.queue_mismatches.text))
        assert not mismatches, [dict(r) for r in mismatches]

    def check_job(self, job_id: str) -> None:
        job = self.agree(f"get_job({job_id})", self.each(lambda _, s: s.get_job(job_id)))
        if isinstance(job, Job):
            self.last_seen[job_id] = job
        self.agree(
            f"list_runs({job_id})",
            self.each(lambda _, s: s.list_runs(job_id, limit=BIG)),
            self.runs_view,
        )
        lo, hi = T0 - 400 * DAY, self.now + 400 * DAY
        self.agree(
            f"runs_scheduled_between({job_id})",
            self.each(lambda _, s: s.runs_scheduled_between(job_id, lo, hi, limit=BIG)),
            self.runs_view,
        )
        self.agree(
            f"list_occurrences({job_id})",
            self.each(lambda _, s: s.list_occurrences(job_id, lo, hi, limit=BIG)),
            self.ledger_view,
        )

    def ledger_view(self, name: str, ranges: list[LedgerRange]) -> list[tuple[str, Any]]:
        """Ledger ranges with their backend's ids replaced by the runs' keys."""
        return [
            (
                "" if r.run_id is None else self.key(name, r.run_id),
                replace(r, id=None, run_id=None),
            )
            for r in ranges
        ]

    def check_run(self, key: str) -> None:
        self.agree(
            f"get_run({key})",
            self.each(lambda name, s: s.get_run(self.run_id(name, key))),
            self.run_view,
        )
        self.agree(
            f"list_attempts({key})",
            self.each(lambda name, s: s.list_attempts(self.run_id(name, key))),
            self.attempts_view,
        )

    def check_tenant(self, tenant: str) -> None:
        self.agree(f"get_tenant({tenant})", self.each(lambda _, s: s.get_tenant(tenant)))


# About 30 s here (2 cores, shared): 50 sequences of up to 30 steps, each followed by the full
# comparison. A failure takes longer: hypothesis shrinks it for up to 5 minutes.
STATEFUL = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.postgres
@pytest.mark.timeout(600)  # room for hypothesis to shrink a failure (it stops after 5 minutes)
def test_the_three_stores_agree_step_by_step(pg_dsn: str, tmp_path: Path) -> None:
    with opened_backends(pg_dsn, tmp_path) as backends:

        class OnTheseStores(StoresAgree):
            def __init__(self) -> None:
                super().__init__(backends)

        run_state_machine_as_test(OnTheseStores, settings=STATEFUL)
