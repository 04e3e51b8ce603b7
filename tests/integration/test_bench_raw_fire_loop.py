"""The benchmark's bare-SQL fire loop (the end-to-end ceiling): it must do the work it stands for.

A ceiling that skipped fires, ran some twice or ran them early would flatter every ratio the
report draws from it, so its scheduler and worker loops run here on a real PostgreSQL database.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path

import asyncpg
from bench import raw_fire_loop


async def test_runs_each_due_one_shot_once_not_before_its_instant_and_nothing_else(
    pg_dsn: str,
) -> None:
    t_us = int((time.time() + 0.5) * 1e6)
    await raw_fire_loop.seed(pg_dsn, due=100, t_us=t_us, total=1000)
    start, deadline = time.time(), time.time() + 30
    sched, work = await asyncio.gather(
        raw_fire_loop.scheduler(pg_dsn, jobs=100, start_s=start, deadline_s=deadline),
        raw_fire_loop.worker(pg_dsn, jobs=100, start_s=start, deadline_s=deadline),
    )
    done = work["done"]
    assert sched["fired"] == 100
    assert sorted(job for job, _, _ in done) == list(range(10, 1001, 10))  # every 10th id
    assert min(instant for _, _, instant in done) >= t_us / 1e6
    found = raw_fire_loop.analyse([list(d) for d in done], t_us, 100)
    assert (found["missing"], found["duplicates"]) == (0, 0)
    assert found["fires_per_s"] > 0
    conn = await asyncpg.connect(pg_dsn)
    try:
        runs = await conn.fetchval("SELECT count(*) FROM raw_runs")
        acked = await conn.fetchval("SELECT count(*) FROM raw_jobs WHERE acked_us IS NOT NULL")
        left = await conn.fetchval("SELECT count(*) FROM raw_queue")
        done_state = await conn.fetchval("SELECT count(*) FROM raw_jobs WHERE state = 'done'")
    finally:
        await conn.close()
    assert (runs, acked, left, done_state) == (100, 100, 0, 100)


async def test_a_run_recorded_twice_is_dropped_by_the_ledger(pg_dsn: str) -> None:
    t_us = int(time.time() * 1e6)
    await raw_fire_loop.seed(pg_dsn, due=10, t_us=t_us, total=100)
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval(raw_fire_loop.CLAIM, t_us, 1000) == 10
        # The same queue rows delivered twice (a redelivery): the second record is dropped.
        rows = await conn.fetch("SELECT job_id, fence, scheduled_us FROM raw_queue")
        for _ in range(2):
            await raw_fire_loop._run_batch(conn, rows, [])
        assert await conn.fetchval("SELECT count(*) FROM raw_runs") == 10
    finally:
        await conn.close()


async def test_the_webhook_model_posts_each_fire_once_to_the_receiver(
    pg_dsn: str, tmp_path: Path
) -> None:
    # The webhook ceiling: the same loop, each fire one bare POST to a real receiver process.
    out = tmp_path / "arrivals.json"
    receiver = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.receiver", "--out", str(out), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert receiver.stdout is not None
        port = (await receiver.stdout.readline()).decode().split()[-1]
        t_us = int((time.time() + 0.5) * 1e6)
        await raw_fire_loop.seed(pg_dsn, due=100, t_us=t_us, total=1000)
        start, deadline = time.time(), time.time() + 30
        hook = f"http://127.0.0.1:{port}/hook"
        sched, work = await asyncio.gather(
            raw_fire_loop.scheduler(pg_dsn, jobs=100, start_s=start, deadline_s=deadline),
            raw_fire_loop.worker(pg_dsn, jobs=100, start_s=start, deadline_s=deadline, hook=hook),
        )
    finally:
        receiver.send_signal(signal.SIGTERM)
        await asyncio.wait_for(receiver.wait(), 10)
    arrivals = json.loads(out.read_text())
    keys = sorted(key for _, _, key in arrivals)
    # one request per fire, keyed by its job and fence, none before its instant
    assert keys == sorted(f"{job}-1" for job in range(10, 1001, 10))
    assert min(instant for _, _, instant in work["done"]) >= t_us / 1e6
    assert sched["fired"] == 100
