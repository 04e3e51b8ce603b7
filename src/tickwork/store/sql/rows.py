"""Mapping between domain records and table rows (instants as epoch microseconds)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from tickwork.clock import from_us, to_us
from tickwork.domain.audit import AuditEntry
from tickwork.domain.concurrency import caps_of
from tickwork.domain.egress import EgressRules, rules_from_json, rules_to_json
from tickwork.domain.jobs import (
    AlertTarget,
    AtTrigger,
    CronTrigger,
    DstGap,
    DstRepeat,
    EveryTrigger,
    Job,
    JobState,
    MisfirePolicy,
    OverlapPolicy,
    Schedule,
    Target,
    TaskTarget,
    WebhookTarget,
)
from tickwork.domain.keys import ApiKey, Role
from tickwork.domain.occurrences import LedgerRange, LedgerReason
from tickwork.domain.partitions import DueHead, Node, PartitionLease, partition_of
from tickwork.domain.retry import RetryPolicy
from tickwork.domain.runs import (
    AttemptRecord,
    AttemptStatus,
    Envelope,
    Fire,
    Run,
    RunOrigin,
    RunOutcome,
    RunStatus,
)
from tickwork.domain.tenant_limits import TenantLimits, limits_from_json, limits_to_json
from tickwork.domain.tenants import Tenant
from tickwork.sealing import SealedSecretError
from tickwork.store.base import DueJob, NodeAnnouncement
from tickwork.store.sql.sealed import SealedColumns

DEFAULT_RETRY = RetryPolicy()


class Row(Protocol):
    """Anything indexable by column name: sqlite3.Row, asyncpg.Record, a dict."""

    def __getitem__(self, key: str, /) -> Any: ...


def us_or_none(when: datetime | None) -> int | None:
    return None if when is None else to_us(when)


def dt_or_none(us: int | None) -> datetime | None:
    return None if us is None else from_us(us)


def schedule_params(schedule: Schedule) -> dict[str, Any]:
    trigger = schedule.trigger
    params: dict[str, Any] = {
        "schedule_kind": None,
        "cron_expr": None,
        "timezone": None,
        "every_ms": None,
        "anchor_us": None,
        "at_us": None,
        "start_us": us_or_none(schedule.start_at),
        "end_us": us_or_none(schedule.end_at),
        "misfire": schedule.misfire.value,
        "misfire_grace_ms": schedule.misfire_grace_ms,
        "overlap": schedule.overlap.value,
        "max_runs": schedule.max_runs,
        # NULL for Debian cron's rule, as every row written before these columns holds.
        "dst_gap": None if schedule.dst_gap is DstGap.CRON else schedule.dst_gap.value,
        "dst_repeat": None if schedule.dst_repeat is DstRepeat.CRON else schedule.dst_repeat.value,
        "catchup_window_ms": schedule.catchup_window_ms,
        "jitter_ms": schedule.jitter_ms,
        "window_ms": schedule.window_ms,
    }
    if isinstance(trigger, CronTrigger):
        params.update(schedule_kind="cron", cron_expr=trigger.expr, timezone=trigger.timezone)
    elif isinstance(trigger, EveryTrigger):
        params.update(
            schedule_kind="every", every_ms=trigger.interval_ms, anchor_us=to_us(trigger.anchor)
        )
    else:
        params.update(schedule_kind="at", at_us=to_us(trigger.at))
    return params


def job_params(job: Job, *, partitions: int, sealed: SealedColumns) -> dict[str, Any]:
    """The job's columns; its partition is computed from its id and P (`partitions`)."""
    return {
        "id": job.id,
        "partition": partition_of(job.id, partitions),
        "tenant": job.tenant,
        "name": job.name,
        "state": job.state.value,
        **schedule_params(job.schedule),
        "target": sealed.write_target(job.target),
        "next_run_us": us_or_none(job.next_run_at),
        "fence_token": job.fence_token,
        "last_fired_us": us_or_none(job.last_fired_at),
        "created_us": to_us(job.created_at),
        "updated_us": to_us(job.updated_at),
        "retry_policy": retry_json(job.retry),
        "webhook_secrets": sealed.write_secrets(
            job.target.secrets if isinstance(job.target, WebhookTarget) else ()
        ),
        "on_failure": sealed.write_alert(job.on_failure),
        "fired_count": job.fired_count,
        "pause_note": job.pause_note,
        "paused_us": us_or_none(job.paused_at),
        "priority": job.priority,
    }


def retry_json(policy: RetryPolicy) -> str | None:
    """None for the default policy, so most rows store nothing."""
    if policy == DEFAULT_RETRY:
        return None
    return json.dumps(
        {
            "max_attempts": policy.max_attempts,
            "base_delay_ms": policy.base_delay_ms,
            "max_delay_ms": policy.max_delay_ms,
            "multiplier": policy.multiplier,
        },
        separators=(",", ":"),
    )


def retry_from_json(text: str | None) -> RetryPolicy:
    return DEFAULT_RETRY if text is None else RetryPolicy(**json.loads(text))


def schedule_from_row(row: Row) -> Schedule:
    """The schedule stored in a job row; rows with the same schedule share one object (each
    due scan reads up to a batch of jobs, most of them with schedules seen before)."""
    return _schedule_from_columns(
        row["schedule_kind"],
        row["cron_expr"],
        row["timezone"],
        row["every_ms"],
        row["anchor_us"],
        row["at_us"],
        row["start_us"],
        row["end_us"],
        row["misfire"],
        row["misfire_grace_ms"],
        row["overlap"],
        row["max_runs"],
        row["dst_gap"],
        row["dst_repeat"],
        row["catchup_window_ms"],
        row["jitter_ms"],
        row["window_ms"],
    )


@functools.lru_cache(maxsize=4096)
def _schedule_from_columns(
    kind: str,
    cron_expr: str | None,
    timezone: str | None,
    every_ms: int | None,
    anchor_us: int | None,
    at_us: int | None,
    start_us: int | None,
    end_us: int | None,
    misfire: str,
    misfire_grace_ms: int,
    overlap: str,
    max_runs: int | None,
    dst_gap: str | None,
    dst_repeat: str | None,
    catchup_window_ms: int,
    jitter_ms: int,
    window_ms: int,
) -> Schedule:
    trigger: CronTrigger | EveryTrigger | AtTrigger
    if kind == "cron":
        assert cron_expr is not None
        assert timezone is not None
        trigger = CronTrigger(expr=cron_expr, timezone=timezone)
    elif kind == "every":
        assert every_ms is not None
        assert anchor_us is not None
        trigger = EveryTrigger(interval_ms=every_ms, anchor=from_us(anchor_us))
    else:
        assert at_us is not None
        trigger = AtTrigger(at=from_us(at_us))
    return Schedule(
        trigger=trigger,
        start_at=dt_or_none(start_us),
        end_at=dt_or_none(end_us),
        misfire=MisfirePolicy(misfire),
        misfire_grace_ms=misfire_grace_ms,
        overlap=OverlapPolicy(overlap),
        max_runs=max_runs,
        dst_gap=DstGap(dst_gap or DstGap.CRON),
        dst_repeat=DstRepeat(dst_repeat or DstRepeat.CRON),
        catchup_window_ms=catchup_window_ms,
        jitter_ms=jitter_ms,
        window_ms=window_ms,
    )


def job_from_row(row: Row, sealed: SealedColumns) -> Job:
    return Job(
        id=row["id"],
        tenant=row["tenant"],
        name=row["name"],
        state=JobState(row["state"]),
        schedule=schedule_from_row(row),
        target=sealed.read_target(row["target"], row["webhook_secrets"]),
        next_run_at=dt_or_none(row["next_run_us"]),
        fence_token=row["fence_token"],
        last_fired_at=dt_or_none(row["last_fired_us"]),
        created_at=from_us(row["created_us"]),
        updated_at=from_us(row["updated_us"]),
        retry=retry_from_json(row["retry_policy"]),
        on_failure=sealed.read_alert(row["on_failure"]),
        fired_count=row["fired_count"],
        pause_note=row["pause_note"],
        paused_at=dt_or_none(row["paused_us"]),
        priority=row["priority"],
    )


def tenant_from_row(row: Row, sealed: SealedColumns) -> Tenant:
    return Tenant(
        tenant=row["tenant"],
        webhook_secrets=sealed.read_tenant_secrets(row["webhook_secrets"]),
        created_at=from_us(row["created_us"]),
        updated_at=from_us(row["updated_us"]),
        egress=egress_from_text(row["egress"]),
        limits=limits_from_text(row["limits"]),
    )


def egress_text(egress: EgressRules) -> str | None:
    """A tenant's destination lists as stored: JSON, or NULL when it has none."""
    return None if egress.empty else json.dumps(rules_to_json(egress), separators=(",", ":"))


def egress_from_text(text: str | None) -> EgressRules:
    return EgressRules() if text is None else rules_from_json(json.loads(text))


def limits_text(limits: TenantLimits) -> str | None:
    """A tenant's limits as stored: JSON of the limits that are set, or NULL when none is."""
    return None if limits.empty else json.dumps(limits_to_json(limits), separators=(",", ":"))


def tenant_limits_params(
    tenant: str, limits: TenantLimits, now: datetime, expected_updated_at: datetime | None
) -> dict[str, Any]:
    """The parameters of set_tenant_limits (a compare-and-set on updated_us when expected)."""
    return {
        "tenant": tenant,
        "limits": limits_text(limits),
        "now": to_us(now),
        "expected_us": us_or_none(expected_updated_at),
    }


def limits_from_text(text: str | None) -> TenantLimits:
    return TenantLimits() if text is None else limits_from_json(json.loads(text))


def run_caps_from_rows(found: Iterable[Row]) -> dict[str, int]:
    """{tenant: max_concurrent_runs} from tenants_with_limits' rows (domain/concurrency.py)."""
    return caps_of((row["tenant"], limits_from_text(row["limits"])) for row in found)


def key_params(key: ApiKey) -> dict[str, Any]:
    """The key's columns (`insert_key`)."""
    return {
        "id": key.id,
        "name": key.name,
        "role": key.role.value,
        "tenant": key.tenant,
        "prefix": key.prefix,
        "secret_hash": key.secret_hash,
        "created_us": to_us(key.created_at),
        "expires_us": us_or_none(key.expires_at),
        "revoked_us": us_or_none(key.revoked_at),
        "last_used_us": us_or_none(key.last_used_at),
    }


def key_from_row(row: Row) -> ApiKey:
    return ApiKey(
        id=row["id"],
        name=row["name"],
        role=Role(row["role"]),
        tenant=row["tenant"],
        prefix=row["prefix"],
        secret_hash=row["secret_hash"],
        created_at=from_us(row["created_us"]),
        expires_at=dt_or_none(row["expires_us"]),
        revoked_at=dt_or_none(row["revoked_us"]),
        last_used_at=dt_or_none(row["last_used_us"]),
    )


def audit_params(entry: AuditEntry) -> dict[str, Any]:
    """The entry's columns but its id, which the database assigns (`insert_audit`)."""
    return {
        "at_us": to_us(entry.at),
        "key_id": entry.key_id,
        "key_prefix": entry.key_prefix,
        "role": entry.role,
        "actor_tenant": entry.actor_tenant,
        "action": entry.action,
        "resource": entry.resource,
        "tenant": entry.tenant,
        "status": entry.status,
        "client": entry.client,
    }


def audit_from_row(row: Row) -> AuditEntry:
    return AuditEntry(
        id=row["id"],
        at=from_us(row["at_us"]),
        key_id=row["key_id"],
        key_prefix=row["key_prefix"],
        role=row["role"],
        actor_tenant=row["actor_tenant"],
        action=row["action"],
        resource=row["resource"],
        tenant=row["tenant"],
        status=row["status"],
        client=row["client"],
    )


def due_from_row(row: Row) -> DueJob:
    return DueJob(
        job_id=row["id"],
        fence_token=row["fence_token"],
        next_run_at=from_us(row["next_run_us"]),
        schedule=schedule_from_row(row),
        partition=row["partition"],
        fired_count=row["fired_count"],
        tenant=row["tenant"],
        priority=row["priority"],
    )


def heads_from_rows(found: Any) -> dict[int, DueHead]:
    """partition_heads' rows (partition, id, next_run_us) by partition."""
    return {
        r["partition"]: DueHead(job_id=r["id"], due_at=from_us(r["next_run_us"])) for r in found
    }


def lease_from_row(row: Row) -> PartitionLease:
    return PartitionLease(
        partition=row["partition"],
        owner=row["owner"],
        epoch=row["epoch"],
        expires_at=from_us(row["expires_us"]),
        renewed_at=dt_or_none(row["renewed_us"]),
    )


def node_from_row(row: Row) -> Node:
    return Node(
        id=row["id"],
        role=row["role"],
        host=row["host"],
        pid=row["pid"],
        version=row["version"],
        started_at=from_us(row["started_us"]),
        heartbeat_at=from_us(row["heartbeat_us"]),
        expires_at=from_us(row["expires_us"]),
        info=json.loads(row["info"]),
    )


def node_params(node: NodeAnnouncement, ttl_ms: int) -> dict[str, Any]:
    return {
        "id": node.id,
        "role": node.role,
        "host": node.host,
        "pid": node.pid,
        "version": node.version,
        "started_us": to_us(node.started_at),
        "info": json.dumps(node.info, separators=(",", ":"), default=str),
        "ttl_us": ttl_ms * 1000,
    }


def run_from_row(row: Row) -> Run:
    started_us = row["started_us"]
    if started_us is None and row["lease_owner"] is not None:
        # Leased at its claim (an in-process fire), which sets no started_us: the claim
        # inserted the run at the lease's instant, and its attempt starts then, or at the
        # run's own instant if it was claimed ahead of it.
        started_us = max(row["created_us"], row["planned_us"] or row["scheduled_us"])
    return Run(
        id=row["id"],
        job_id=row["job_id"],
        key=row["key"],
        origin=RunOrigin(row["origin"]),
        scheduled_for=from_us(row["scheduled_us"]),
        status=RunStatus(row["status"]),
        attempt=row["attempt"],
        fence_token=row["fence_token"],
        coalesced=row["coalesced"],
        created_at=from_us(row["created_us"]),
        started_at=dt_or_none(started_us),
        finished_at=dt_or_none(row["finished_us"]),
        http_status=row["http_status"],
        error=row["error"],
        dead_lettered_at=dt_or_none(row["dead_lettered_us"]),
        last_error=row["last_error"],
        claim_epoch=row["claim_epoch"],
        lease_owner=row["lease_owner"],
        lease_until=dt_or_none(row["lease_until_us"]),
        planned_for=dt_or_none(row["planned_us"]),
        throttled_ms=row["throttled_ms"],
    )


def attempt_from_row(row: Row) -> AttemptRecord:
    return AttemptRecord(
        id=row["id"],
        run_id=row["run_id"],
        job_id=row["job_id"],
        attempt=row["attempt"],
        fence_token=row["fence_token"],
        worker=row["worker"],
        started_at=from_us(row["started_us"]),
        finished_at=from_us(row["finished_us"]),
        status=AttemptStatus(row["status"]),
        http_status=row["http_status"],
        error=row["error"],
    )


# A burst leases thousands of runs whose jobs share a handful of distinct target, retry and
# alert texts; parsing each text once instead of once per fire was ~15 % of a worker's CPU in
# a no-op task burst (py-spy). The parsed objects are frozen and only read on the fire path;
# a task's `args`, the one part user code may mutate, is copied into each TaskContext. The
# secret-bearing texts are cached by `SealedColumns`, which also opens them.
_FIRE_PART_CACHE = 4096
UNREADABLE_TARGET = TaskTarget(name="(unreadable: see the attempt's error)")
_cached_retry = functools.lru_cache(maxsize=_FIRE_PART_CACHE)(retry_from_json)


FireParts = tuple[Target, tuple[str, ...], AlertTarget | None, str | None]


def fire_parts(sealed: SealedColumns, row: Row) -> FireParts:
    """The secret-bearing parts of a fire (target, tenant secrets, alert), decrypted; when this
    process lacks a key, placeholders and the reason (`Fire.unreadable`), so one unreadable
    job fails its own attempt instead of the claim or lease of every fire with it."""
    try:
        return (
            sealed.cached_target(row["target"], row["webhook_secrets"]),
            sealed.cached_tenant_secrets(row["tenant_secrets"]),
            sealed.cached_alert(row["on_failure"]),
            None,
        )
    except SealedSecretError as exc:
        return UNREADABLE_TARGET, (), None, str(exc)


def fire_from_row(row: Row, lease_until: datetime, sealed: SealedColumns) -> Fire:
    """A leased run joined with its job and tenant (the columns of the `fire_returning` and
    `fire_join_returning` fragments, and of the claims' RETURNING lists). A job whose secrets
    this process cannot decrypt gives a fire marked `unreadable`, so that it fails with the
    reason rather than failing every other fire leased with it."""
    target, tenant_secrets, on_failure, unreadable = fire_parts(sealed, row)
    return Fire(
        run_id=row["id"],
        job_id=row["job_id"],
        key=row["key"],
        scheduled_for=from_us(row["scheduled_us"]),
        fence_token=row["fence_token"],
        attempt=row["attempt"],
        target=target,
        lease_until=lease_until,
        retry=_cached_retry(row["retry_policy"]),
        tenant_secrets=tenant_secrets,
        on_failure=on_failure,
        tenant=row["tenant"],
        unreadable=unreadable,
        planned_for=dt_or_none(row["planned_us"]),
    )


def envelope_from_row(row: Row) -> Envelope:
    """A handed-off run, as a hand-off claim returns it (the run's own columns only)."""
    return Envelope(
        run_id=row["id"],
        job_id=row["job_id"],
        key=row["key"],
        scheduled_for=from_us(row["scheduled_us"]),
        fence_token=row["fence_token"],
        attempt=row["attempt"],
    )


def outcome_params(outcome: RunOutcome) -> dict[str, Any]:
    """Parameters of `finish_run` / `insert_attempt` (and finish_runs' arrays) for one outcome."""
    failed = outcome.status is RunStatus.FAILED
    return {
        "id": outcome.run_id,
        "run_id": outcome.run_id,
        "job_id": outcome.job_id,
        "attempt": outcome.attempt,
        "fence": outcome.fence_token,
        "worker": outcome.worker,
        "status": outcome.status.value,
        "started_us": to_us(outcome.started_at),
        "finished_us": to_us(outcome.finished_at),
        "http_status": outcome.http_status,
        "error": outcome.error,
        "dead_us": to_us(outcome.finished_at) if failed else None,
        "retry_us": us_or_none(outcome.retry_at),
    }


def ledger_from_row(row: Row) -> LedgerRange:
    return LedgerRange(
        id=row["id"],
        job_id=row["job_id"],
        first=from_us(row["first_us"]),
        last=from_us(row["last_us"]),
        count=row["count"],
        reason=LedgerReason(row["reason"]),
        run_id=row["run_id"],
        recorded_at=from_us(row["recorded_us"]),
    )


def ledger_params(entry: LedgerRange) -> dict[str, Any]:
    return {
        "job_id": entry.job_id,
        "first_us": to_us(entry.first),
        "last_us": to_us(entry.last),
        "count": entry.count,
        "reason": entry.reason.value,
        "run_id": entry.run_id,
        "recorded_us": to_us(entry.recorded_at),
    }
