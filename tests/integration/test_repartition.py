"""P is set when the database is created and changed later by `tickwork db repartition`."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tickwork.cli import run
from tickwork.domain.jobs import EveryTrigger, Job, JobState, Schedule, WebhookTarget
from tickwork.domain.partitions import partition_of
from tickwork.errors import Conflict, InvalidInput
from tickwork.runtime.factory import store_for_url
from tickwork.store.base import NodeAnnouncement, ScheduleStore
from tickwork.store.migrate import upgrade
from tickwork.store.repartition import repartition

T0 = datetime(2026, 7, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path) -> str:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/p.db"
    return str(request.getfixturevalue("pg_dsn"))


async def opened(url: str) -> ScheduleStore:
    store = store_for_url(url)
    await store.open()
    return store


@pytest.fixture
async def jobs(url: str) -> list[str]:
    """A database with 40 jobs (ids like tickwork's, and two that are not hex), closed again."""
    store = await opened(url)
    ids = [f"{0x19BC186DE0082A21D32FAC4694830BD + n:032x}" for n in range(38)] + ["job-a", "job-b"]
    for job_id in ids:
        await store.create_job(
            Job(
                id=job_id,
                name=job_id,
                schedule=Schedule(trigger=EveryTrigger(interval_ms=60_000, anchor=T0)),
                target=WebhookTarget(url="http://127.0.0.1:9/"),
                state=JobState.SCHEDULED,
                next_run_at=T0,
                created_at=T0,
                updated_at=T0,
            )
        )
    await store.update_partition_leases("s", renew={}, release=(), acquire=[1, 2], ttl_ms=0)
    await store.close()
    return ids


async def test_repartitioning_moves_every_job_and_keeps_epochs_rising(
    url: str, jobs: list[str]
) -> None:
    done = await repartition(url, 16)
    assert (done.before, done.after, done.jobs, done.epoch) == (64, 16, 40, 1)
    store = await opened(url)
    try:
        assert store.partition_count() == 16
        due = await store.due_jobs(T0, 100)
        assert {d.job_id: d.partition for d in due} == {i: partition_of(i, 16) for i in jobs}
        view = await store.partition_leases()
        assert [(le.partition, le.owner, le.epoch) for le in view.leases] == [
            (p, None, 1) for p in range(16)
        ]
        held = await store.update_partition_leases(
            "s2", renew={}, release=(), acquire=[1], ttl_ms=60_000
        )
        assert next(le.epoch for le in held.leases if le.partition == 1) == 2  # above any old
    finally:
        await store.close()


async def test_repartitioning_is_refused_while_a_process_is_announced(
    url: str, jobs: list[str]
) -> None:
    store = await opened(url)
    try:
        announced = NodeAnnouncement(
            id="w1", role="worker", host="h", pid=1, version="t", started_at=T0, info={}
        )
        await store.heartbeat_node(announced, ttl_ms=60_000)
    finally:
        await store.close()
    with pytest.raises(Conflict, match="still running \\(worker w1\\)"):
        await repartition(url, 8)
    with pytest.raises(InvalidInput, match="partitions must be from 1 to 1024"):
        await repartition(url, 0)


async def test_a_new_database_takes_its_p_from_the_upgrade(tmp_path) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path}/new.db"
    await upgrade(url, partitions=8)
    store = await opened(url)
    try:
        assert store.partition_count() == 8
        assert len((await store.partition_leases()).leases) == 8
    finally:
        await store.close()


def test_the_cli_says_what_is_wrong_with_a_count(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path}/cli.db"
    assert run(["db", "upgrade", "--db", url, "--partitions", "2000"]) == 2
    assert "partitions must be from 1 to 1024" in capsys.readouterr().err
    assert run(["db", "upgrade", "--db", url, "--partitions", "4"]) == 0
    assert run(["db", "repartition", "--db", url, "--partitions", "12"]) == 0
    assert "0 jobs repartitioned from 4 to 12 partitions" in capsys.readouterr().out
