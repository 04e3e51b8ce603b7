"""One chaos run: start the cluster, create the load, inject the faults, drain, judge."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.chaos.cluster import Cluster, ClusterConfig, QueueKind
from bench.chaos.driver import FaultDriver, now_us
from bench.chaos.faults import Fault, FaultPlanConfig, plan_faults
from bench.chaos.load import JobPlan, build_load
from bench.chaos.oracle import expected_ms
from bench.chaos.verdict import Delivery, FaultWindow, Timing, Verdict, judge
from tickwork.sealing import generate_key_line

LEAD_S = 12.0  # from creating the jobs to the start of the load window, plus...
CREATES_PER_S = 60.0  # ...time to create them at a rate a busy 2-core machine manages
CREATE_CONCURRENCY = 16


@dataclass(frozen=True, slots=True)
class RunConfig:
    queue: QueueKind
    seed: int
    duration_s: float
    short: bool
    lease_ttl_ms: int
    backstop_ms: int
    workdir: Path
    skew_s: float = 0.0
    disk_mb: int = 0

    @property
    def drain_s(self) -> float:
        return 30.0 if self.short else 60.0


@dataclass(slots=True)
class RunResult:
    config: RunConfig
    verdict: Verdict
    planned: list[Fault]
    windows: list[FaultWindow]
    skipped: list[Fault]
    run_statuses: dict[str, int]
    restarts: dict[str, int]
    jobs: int
    wall_s: float
    notes: list[str] = field(default_factory=list)


async def chaos_run(config: RunConfig, say: Callable[[str], None]) -> RunResult:
    began = time.monotonic()
    config.workdir.mkdir(parents=True, exist_ok=True)
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    cluster = Cluster(
        ClusterConfig(
            queue=config.queue, workdir=config.workdir, secret=secret,
            secret_keys=generate_key_line("chaos"),
            lease_ttl_ms=config.lease_ttl_ms, backstop_ms=config.backstop_ms,
            skew_s=config.skew_s, disk_mb=config.disk_mb,
        )
    )  # fmt: skip
    try:
        say(
            f"[{config.queue}] starting PostgreSQL, queue, receiver, 1 api, 3 schedulers, 3 workers"
        )
        await cluster.start()
        jobs = len(build_load(config.seed, 0, int(config.duration_s * 1000)))
        lead_s = int(LEAD_S + jobs / CREATES_PER_S)
        t0_ms = (time.time_ns() // 1_000_000_000 + lead_s) * 1000
        t1_ms = t0_ms + int(config.duration_s * 1000)
        plans = build_load(config.seed, t0_ms, t1_ms)
        expected = await _create_jobs(cluster, plans, t0_ms, t1_ms)
        if time.time_ns() // 1000 > t0_ms * 1000 - 1_000_000:
            raise RuntimeError(
                "creating the jobs took longer than the lead time; lower CREATES_PER_S"
            )
        say(f"[{config.queue}] {len(plans)} jobs, {len(expected)} expected occurrences")
        faults = plan_faults(
            config.seed,
            FaultPlanConfig(
                duration_s=config.duration_s, lease_ttl_s=config.lease_ttl_ms / 1000,
                short=config.short, external_queue=config.queue != "table",
                disk_full=config.disk_mb > 0,
            ),
        )  # fmt: skip
        say(f"[{config.queue}] fault schedule (seed {config.seed}):")
        for fault in faults:
            say(f"    {fault.describe()}")
        driver = FaultDriver(cluster, say)
        t0_mono = time.monotonic() + (t0_ms * 1000 - now_us()) / 1e6
        await driver.run(faults, t0_mono)
        await _sleep_until_us(t1_ms * 1000)
        await _drain(cluster, expected, t1_ms * 1000, config.drain_s, say)
        await cluster.stop()
        successes, statuses = await cluster.ledger()
        mismatches = await cluster.queue_mismatches()
        deliveries = read_deliveries(cluster.deliveries_file)
        verdict = judge(
            expected=expected,
            deliveries=deliveries,
            successes=successes,
            faults=driver.windows,
            timing=Timing(lease_ttl_ms=config.lease_ttl_ms, backstop_ms=_backstop(config)),
            queue_mismatches=mismatches,
        )
        if verdict.duplicate_effect:  # keep the evidence: the cluster is gone after this
            rows = await cluster.attempts_of(verdict.duplicate_effect[:100])
            evidence = config.workdir / "duplicate_effect.json"
            evidence.write_text(json.dumps(rows, indent=2, default=str))
            say(f"  attempts of the keys with more than one success: {evidence}")
        return RunResult(
            config=config, verdict=verdict, planned=faults, windows=driver.windows,
            skipped=driver.skipped, run_statuses=statuses,
            restarts={m.name: m.restarts for m in cluster.members.values()},
            jobs=len(plans), wall_s=time.monotonic() - began,
        )  # fmt: skip
    finally:
        await cluster.stop()
        await cluster.cleanup()


def _backstop(config: RunConfig) -> float:
    return 0.0 if config.queue == "table" else float(config.backstop_ms)


async def _create_jobs(
    cluster: Cluster, plans: list[JobPlan], t0_ms: int, t1_ms: int
) -> dict[str, int]:
    """Create every job over the API; the expected occurrences by key (scheduled epoch µs)."""
    url = f"http://127.0.0.1:{cluster.receiver_port}/hook"
    expected: dict[str, int] = {}
    gate = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def create(client: httpx.AsyncClient, plan: JobPlan) -> None:
        body: dict[str, Any] = {
            "name": plan.name,
            "schedule": plan.schedule(t0_ms, t1_ms),
            "target": {"type": "webhook", "url": f"{url}/{plan.name}", "timeout": "PT5S"},
            "retry": {"max_attempts": 20, "backoff": "PT0.2S", "max_backoff": "PT2S"},
        }
        async with gate:
            response = await client.post("/v1/jobs", json=body)
        if response.status_code != 201:
            raise RuntimeError(f"creating {plan.name}: {response.status_code} {response.text}")
        job_id = response.json()["id"]
        for at in expected_ms(plan, t0_ms, t1_ms):
            expected[f"{job_id}:{at}"] = at * 1000

    base = f"http://127.0.0.1:{cluster.api_port}"
    headers = {"Authorization": f"Bearer {cluster.admin_key()}"}
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=headers) as client:
        # Every tenant signs with its own secret by default: the receiver checks the run's.
        signing = {"secrets": [cluster.config.secret]}
        answer = await client.put("/v1/tenants/default/webhook-secrets", json=signing)
        if answer.status_code != 200:
            raise RuntimeError(f"setting the tenant's secret: {answer.status_code} {answer.text}")
        await asyncio.gather(*(create(client, plan) for plan in plans))
    return expected


async def _sleep_until_us(instant_us: int) -> None:
    delay = (instant_us - now_us()) / 1e6
    if delay > 0:
        await asyncio.sleep(delay)


async def _drain(
    cluster: Cluster, expected: dict[str, int], t1_us: int, drain_s: float,
    say: Callable[[str], None],
) -> None:  # fmt: skip
    """Wait until every expected occurrence has arrived and no run due by the end of the
    window is still pending, or until the drain time is up (the verdict then says what is
    missing)."""
    deadline = time.monotonic() + drain_s
    missing = pending = -1
    while time.monotonic() < deadline:
        seen = {d.key for d in read_deliveries(cluster.deliveries_file)}
        missing = sum(key not in seen for key in expected)
        pending = await cluster.pending_due(t1_us)
        if missing == 0 and pending == 0:
            return
        await asyncio.sleep(1.0)
    say(f"  drain time ({drain_s:.0f}s) up: {missing} expected not delivered, {pending} pending")


def read_deliveries(path: Path) -> list[Delivery]:
    out: list[Delivery] = []
    try:
        text = path.read_text()
    except FileNotFoundError:
        return out
    for line in text.splitlines():
        if not line.endswith("}"):
            continue  # a line being written right now
        row = json.loads(line)
        out.append(Delivery(row["k"], row["t"], row["f"], row["a"], row["ok"]))
    return out
