"""The /v1 endpoints, /healthz and /metrics. Handlers translate; the job service decides."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.convertors import Convertor, register_url_convertor

import tickwork.metrics  # noqa: F401 - registers the process's collectors before /metrics reads them
from tickwork.api.audit import noted
from tickwork.api.auth import Caller, Writer, caller, job_for, tenant_scope, visible_tenant
from tickwork.api.egress import check_destination
from tickwork.api.error_body import error_response
from tickwork.api.load_schemas import LoadOut
from tickwork.api.occurrence_schemas import ExplainOut, OccurrenceList, OccurrenceOut
from tickwork.api.schemas import (
    MAX_RUN_ID,
    NOT_BLANK,
    DeadLetterList,
    ErrorOut,
    Health,
    JobCreate,
    JobList,
    JobOut,
    JobPreviewOut,
    JobUpdate,
    PauseIn,
    PreviewOut,
    PurgeOut,
    QueryInstant,
    RedriveOut,
    ResumeIn,
    RunDetailOut,
    RunList,
    RunOut,
    TenantSecretRotated,
    TenantSecretsIn,
    TenantSecretsOut,
    check_zone,
    documented,
)
from tickwork.api.strict_json import bad_character
from tickwork.clock import Clock, utc_iso
from tickwork.domain.jobs import AlertTarget, DstGap, DstRepeat, JobState, TaskTarget, WebhookTarget
from tickwork.domain.keys import Principal
from tickwork.domain.runs import Run
from tickwork.errors import InvalidInput, NotFound
from tickwork.services.dead_letters import DeadLetterService, NotDeadLettered
from tickwork.services.job_preview import preview_job
from tickwork.services.jobs import KEEP, JobService, unknown_tenant
from tickwork.services.load import planned_load
from tickwork.services.occurrences import MAX_ENTRIES, OccurrenceService
from tickwork.services.rules import MAX_RUNS
from tickwork.services.tenants import TenantService
from tickwork.store.base import JobQuery, ScheduleStore
from tickwork.timing.cron import ZONE_NAMES
from tickwork.timing.preview import preview_schedule
from tickwork.timing.preview_query import preview_query_schedule
from tickwork.worker.executors.ssrf import AddressPolicy

log = logging.getLogger("tickwork.api")

JOB_ID_PATTERN = "^[0-9a-f]{32}$"  # `rules.new_job_id`
_JOB_ID = re.compile(JOB_ID_PATTERN)


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiContext:
    """What the handlers need, kept on `app.state.tickwork` by `create_app`."""

    jobs: JobService
    dead_letters: DeadLetterService
    tenants: TenantService
    store: ScheduleStore
    clock: Clock
    egress: AddressPolicy  # the workers' SSRF policy, to refuse what it surely would


def _context(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.tickwork
    return ctx


Ctx = Annotated[ApiContext, Depends(_context)]
RunId = Annotated[int, Path(ge=1, le=MAX_RUN_ID, description="a run's id")]
Limit = Annotated[int, Query(ge=1, le=1000, description="page size")]
Before = Annotated[
    int | None, Query(ge=1, le=MAX_RUN_ID, description="next_before of the previous page")
]
JobFilter = Annotated[str | None, Query(max_length=64, description="only this job's")]
TenantName = Annotated[str, Path(min_length=1, max_length=100, description="the tenant")]
MaxRunsQuery = Annotated[
    int | None, Query(ge=1, le=MAX_RUNS, description="stop after this many fires")
]

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description}
    for status, description in {
        400: "Malformed JSON",
        401: "No usable API key (missing, unknown, revoked or expired)",
        403: "The key's role does not allow this",
        429: "Too many requests with this key; Retry-After says when to come back",
        404: "No such job or run (or one of another tenant)",
        409: "Conflicts with the job's state",
        413: "Body over the size limit",
        422: "Invalid input; `field` names it",
    }.items()
}


class _DeadLetterId(Convertor[str]):
    """A `{run_id}` segment under /v1/dead-letters that is not the word `redrive`: otherwise
    `DELETE /v1/dead-letters/redrive` is taken for run "redrive" (a 422 about an integer)
    instead of a 405 naming POST. Only the route's matching changes: the value is still a
    string for FastAPI to validate as a run id, so `/v1/dead-letters/abc` stays a 422."""

    regex = "(?!redrive$)[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


register_url_convertor("dead_letter_id", _DeadLetterId())


def clean_parameters(request: Request) -> None:
    """Refuse a NUL or a lone surrogate in any path or query parameter, naming it: no job,
    tenant or filter can contain one, and PostgreSQL refuses them with a driver error."""
    params = [*request.path_params.items(), *request.query_params.multi_items()]
    for name, value in params:
        problem = bad_character(name) or bad_character(value)
        if problem is not None:
            raise InvalidInput(name, f"the parameter {problem}", code="invalid_character")


# Every /v1 route needs a key: the router itself depends on it (api/auth.py), before the
# parameters are looked at.
v1 = APIRouter(
    prefix="/v1",
    responses=ERROR_RESPONSES,
    dependencies=[Depends(caller), Depends(clean_parameters)],
)
ops = APIRouter()


@v1.post("/jobs", status_code=201, tags=["jobs"])
async def create_job(ctx: Ctx, who: Writer, body: JobCreate, response: Response) -> JobOut:
    """Create a job; it is armed at once (`next_run_at` is its first occurrence from now).
    A tenant key's job belongs to its tenant (`tenant` may be left out)."""
    spec = body.to_domain()
    if not who.is_admin and "tenant" not in body.model_fields_set:
        spec = replace(spec, tenant=str(who.tenant))
    if not who.sees(spec.tenant):
        raise unknown_tenant(spec.tenant)
    _check_egress(ctx, spec.target, spec.on_failure)
    job = await ctx.jobs.create(spec)
    noted(resource=f"job {job.id}", tenant=job.tenant)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    return JobOut.of(job)


@v1.get("/jobs", tags=["jobs"])
async def list_jobs(
    ctx: Ctx,
    who: Caller,
    state: JobState | None = None,
    name_prefix: Annotated[str | None, Query(max_length=200)] = None,
    tenant: Annotated[str | None, Query(max_length=100)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[
        str | None,
        Query(
            description="next_after of the previous page (a job id)",
            **documented(pattern=JOB_ID_PATTERN),
        ),
    ] = None,
) -> JobList:
    """Jobs in creation order, one page at a time (keyset pagination on the id); a tenant
    key's list holds its tenant's jobs only."""
    if after is not None and not _JOB_ID.fullmatch(after):
        raise InvalidInput(
            "after",
            "not a cursor: pass the next_after of the previous page (a job id, 32 hex digits)"
            " or leave it out for the first page",
            code="invalid_cursor",
            status=400,
        )
    if tenant is not None and not who.sees(tenant):
        return JobList(jobs=[], next_after=None)
    query = JobQuery(
        state=state,
        name_prefix=name_prefix,
        tenant=tenant_scope(who, tenant),
        after_id=after,
        limit=limit + 1,
    )
    jobs = await ctx.jobs.list(query)
    next_after = jobs[limit - 1].id if len(jobs) > limit else None
    return JobList(jobs=[JobOut.of(j) for j in jobs[:limit]], next_after=next_after)


@v1.get("/jobs/{job_id}", tags=["jobs"])
async def get_job(ctx: Ctx, who: Caller, job_id: str) -> JobOut:
    return JobOut.of(job_for(who, await ctx.jobs.get(job_id)))


@v1.patch("/jobs/{job_id}", tags=["jobs"])
async def update_job(ctx: Ctx, who: Writer, job_id: str, body: JobUpdate) -> JobOut:
    """Change only the fields given. A new schedule recomputes `next_run_at` from now."""
    job_for(who, await ctx.jobs.get(job_id))
    patch = body.to_domain()
    if patch.tenant is not None and not who.sees(patch.tenant):
        raise unknown_tenant(patch.tenant)
    _check_egress(ctx, patch.target, None if patch.on_failure is KEEP else patch.on_failure)
    return JobOut.of(await ctx.jobs.update(job_id, patch))


def _check_egress(
    ctx: ApiContext, target: WebhookTarget | TaskTarget | None, alert: AlertTarget | None
) -> None:
    """Refuse a webhook or alert URL the SSRF guard would refuse whatever DNS says."""
    if isinstance(target, WebhookTarget):
        check_destination("target.url", target.url, ctx.egress)
    if alert is not None:
        check_destination("on_failure.url", alert.url, ctx.egress)


@v1.delete("/jobs/{job_id}", status_code=204, tags=["jobs"])
async def delete_job(ctx: Ctx, who: Writer, job_id: str) -> Response:
    """Delete the job and its run history."""
    job_for(who, await ctx.jobs.get(job_id))
    await ctx.jobs.delete(job_id)
    return Response(status_code=204)


@v1.post("/jobs/{job_id}/pause", tags=["jobs"])
async def pause_job(
    ctx: Ctx, who: Writer, job_id: str, body: Annotated[PauseIn | None, Body()] = None
) -> JobOut:
    """Stop firing; an optional `note` says why and is kept until the job is resumed."""
    job_for(who, await ctx.jobs.get(job_id))
    return JobOut.of(await ctx.jobs.pause(job_id, None if body is None else body.note))


@v1.post("/jobs/{job_id}/resume", tags=["jobs"])
async def resume_job(
    ctx: Ctx, who: Writer, job_id: str, body: Annotated[ResumeIn | None, Body()] = None
) -> JobOut:
    """Re-arm from now (occurrences that fell while paused are skipped), or with
    `catch_up: true` from where it was paused, the misfire policy deciding what runs."""
    job_for(who, await ctx.jobs.get(job_id))
    catch_up = body is not None and body.catch_up
    return JobOut.of(await ctx.jobs.resume(job_id, catch_up=catch_up))


@v1.get("/jobs/{job_id}/occurrences", tags=["jobs"])
async def job_occurrences(
    ctx: Ctx,
    who: Caller,
    job_id: str,
    start: Annotated[
        QueryInstant | None, Query(alias="from", description="default: `to` minus 1 day")
    ] = None,
    end: Annotated[
        QueryInstant | None, Query(alias="to", description="default: now + 1 hour")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_ENTRIES)] = 100,
) -> OccurrenceList:
    """Every occurrence of the job in [from, to] (at most 366 days) with its one outcome:
    fired (its run), skipped, coalesced, paused, scheduled...; a ledger range of alike
    occurrences is one entry (`count`, `last`); manual and backfill runs are listed too."""
    job = job_for(who, await ctx.jobs.get(job_id))
    end = ctx.clock.now() + timedelta(hours=1) if end is None else end
    start = end - timedelta(days=1) if start is None else start
    entries = await OccurrenceService(ctx.store, ctx.clock).window(job, start, end, limit)
    cut = entries[-1] if len(entries) == limit else None
    next_from = None if cut is None else utc_iso((cut.last or cut.at) + timedelta(milliseconds=1))
    return OccurrenceList(occurrences=[OccurrenceOut.of(e) for e in entries], next_from=next_from)


@v1.get("/jobs/{job_id}/explain", tags=["jobs"])
async def explain_occurrence(
    ctx: Ctx,
    who: Caller,
    job_id: str,
    at: Annotated[QueryInstant | None, Query(description="default: now")] = None,
) -> ExplainOut:
    """What happened, or will happen, to the job's occurrence at or after `at`, and why."""
    job = job_for(who, await ctx.jobs.get(job_id))
    when = ctx.clock.now() if at is None else at
    found = await OccurrenceService(ctx.store, ctx.clock).explain(job, when)
    return ExplainOut.of(found, ctx.clock.now())


@v1.post("/jobs/{job_id}/trigger", status_code=202, tags=["jobs"])
async def trigger_job(ctx: Ctx, who: Writer, job_id: str) -> RunOut:
    """Fire once now, outside the schedule; returns the pending run."""
    job_for(who, await ctx.jobs.get(job_id))
    return RunOut.of(await ctx.jobs.trigger(job_id), ctx.clock.now())


@v1.get("/jobs/{job_id}/runs", tags=["runs"])
async def list_runs(
    ctx: Ctx, who: Caller, job_id: str, limit: Limit = 50, before: Before = None
) -> RunList:
    """Runs newest first, one page at a time."""
    job_for(who, await ctx.jobs.get(job_id))
    runs = await ctx.jobs.runs(job_id, limit=limit + 1, before_id=before)
    page, next_before = _page(runs, limit, ctx.clock.now())
    return RunList(runs=page, next_before=next_before)


@v1.get("/runs/{run_id}", tags=["runs"])
async def get_run(ctx: Ctx, who: Caller, run_id: RunId) -> RunDetailOut:
    """One run with its attempts, oldest first."""
    detail = await ctx.jobs.run(run_id)
    if not who.is_admin:
        try:
            job_for(who, await ctx.jobs.get(detail.run.job_id))
        except NotFound:
            raise NotFound("run", str(run_id)) from None
    return RunDetailOut.of_detail(detail)


@v1.get("/dead-letters", tags=["dead letters"])
async def list_dead_letters(
    ctx: Ctx, who: Caller, limit: Limit = 50, before: Before = None, job_id: JobFilter = None
) -> DeadLetterList:
    """Runs that failed for good, newest first, one page at a time."""
    await _check_job(ctx, who, job_id)
    runs = await ctx.dead_letters.list(
        limit=limit + 1, before_id=before, job_id=job_id, tenant=tenant_scope(who, None)
    )
    page, next_before = _page(runs, limit, ctx.clock.now())
    return DeadLetterList(dead_letters=page, next_before=next_before)


@v1.post("/dead-letters/redrive", status_code=202, tags=["dead letters"])
async def redrive_dead_letters(ctx: Ctx, who: Writer, job_id: JobFilter = None) -> RedriveOut:
    """Give every dead letter (of `job_id`) one more attempt."""
    await _check_job(ctx, who, job_id)
    scope = tenant_scope(who, None)
    return RedriveOut(redriven=await ctx.dead_letters.redrive(job_id, tenant=scope))


@v1.post("/dead-letters/{run_id:dead_letter_id}/redrive", status_code=202, tags=["dead letters"])
async def redrive_dead_letter(ctx: Ctx, who: Writer, run_id: RunId) -> RedriveOut:
    """Give one dead letter one more attempt; 404 `not_dead_lettered` if it is not one."""
    await _check_run(ctx, who, run_id)
    await ctx.dead_letters.redrive_one(run_id)
    return RedriveOut(redriven=1)


@v1.delete("/dead-letters", tags=["dead letters"])
async def purge_dead_letters(ctx: Ctx, who: Writer, job_id: JobFilter = None) -> PurgeOut:
    """Drop every dead letter (of `job_id`) from the queue; the runs stay failed."""
    await _check_job(ctx, who, job_id)
    return PurgeOut(purged=await ctx.dead_letters.purge(job_id, tenant=tenant_scope(who, None)))


@v1.delete("/dead-letters/{run_id:dead_letter_id}", status_code=204, tags=["dead letters"])
async def purge_dead_letter(ctx: Ctx, who: Writer, run_id: RunId) -> Response:
    """Drop one dead letter from the queue; 404 `not_dead_lettered` if it is not one."""
    await _check_run(ctx, who, run_id)
    await ctx.dead_letters.purge_one(run_id)
    return Response(status_code=204)


@v1.put("/tenants/{tenant}/webhook-secrets", tags=["tenants"])
async def set_tenant_secrets(
    ctx: Ctx, who: Writer, tenant: TenantName, body: TenantSecretsIn
) -> TenantSecretsOut:
    """Sign the tenant's jobs that have no secrets of their own with these (1 or 2, write-only;
    the answer shows fingerprints). Workers use them from their next lease of a run."""
    visible_tenant(who, tenant)
    return TenantSecretsOut.of(await ctx.tenants.set_secrets(tenant, body.secrets))


@v1.get("/tenants/{tenant}/webhook-secrets", tags=["tenants"])
async def get_tenant_secrets(ctx: Ctx, who: Caller, tenant: TenantName) -> TenantSecretsOut:
    """Fingerprints of the tenant's signing secrets (never the secrets)."""
    visible_tenant(who, tenant)
    return TenantSecretsOut.of(await ctx.tenants.signing(tenant))


@v1.post("/tenants/{tenant}/webhook-secrets/rotate", tags=["tenants"])
async def rotate_tenant_secret(ctx: Ctx, who: Writer, tenant: TenantName) -> TenantSecretRotated:
    """Generate a new signing secret (shown in this answer only) and sign with it and the
    previous one until `DELETE .../webhook-secrets/previous`: receivers switch meanwhile."""
    visible_tenant(who, tenant)
    return TenantSecretRotated.made(await ctx.tenants.rotate(tenant))


@v1.delete("/tenants/{tenant}/webhook-secrets/previous", tags=["tenants"])
async def retire_previous_tenant_secret(
    ctx: Ctx, who: Writer, tenant: TenantName
) -> TenantSecretsOut:
    """End a rotation: sign with the newest secret only."""
    visible_tenant(who, tenant)
    return TenantSecretsOut.of(await ctx.tenants.retire_previous(tenant))


@v1.delete("/tenants/{tenant}/webhook-secrets", status_code=204, tags=["tenants"])
async def clear_tenant_secrets(ctx: Ctx, who: Writer, tenant: TenantName) -> Response:
    """Remove the tenant's secrets; its jobs fall back to the workers' secrets (or unsigned)."""
    visible_tenant(who, tenant)
    await ctx.tenants.clear_secrets(tenant)
    return Response(status_code=204)


async def _check_job(ctx: ApiContext, who: Principal, job_id: str | None) -> None:
    """NotFound unless `job_id` (if given) names a job the principal may see."""
    if job_id is not None:
        job_for(who, await ctx.jobs.get(job_id))


async def _check_run(ctx: ApiContext, who: Principal, run_id: int) -> None:
    """NotDeadLettered (as for a run that is not one) unless the principal may see the run's
    job."""
    if who.is_admin:
        return
    try:
        run = await ctx.store.get_run(run_id)
        job_for(who, await ctx.jobs.get(run.job_id))
    except NotFound:
        raise NotDeadLettered(run_id) from None


def _page(runs: list[Run], limit: int, now: datetime) -> tuple[list[RunOut], int | None]:
    """A page of `limit` runs from `limit + 1` fetched, as shown at `now`, and the id to
    continue before."""
    next_before = runs[limit - 1].id if len(runs) > limit else None
    return [RunOut.of(r, now) for r in runs[:limit]], next_before


@v1.get("/load", tags=["load"])
async def planned_load_forecast(
    ctx: Ctx,
    who: Caller,
    start: Annotated[QueryInstant | None, Query(alias="from", description="default: now")] = None,
    end: Annotated[
        QueryInstant | None, Query(alias="to", description="default: `from` + 1 hour")
    ] = None,
    bucket: Annotated[int, Query(ge=1, le=86_400, description="bucket width in seconds")] = 1,
    tenant: Annotated[str | None, Query(max_length=100)] = None,
) -> LoadOut:
    """Fires planned per bucket in [from, to) (at most 7 days): totals, peak, busiest
    buckets, per tenant; a tenant key sees its own tenant's."""
    start = ctx.clock.now() if start is None else start
    end = start + timedelta(hours=1) if end is None else end
    if tenant is not None:
        visible_tenant(who, tenant)  # another tenant's: 404, as for a tenant that is not there
    scope = tenant_scope(who, tenant)
    return LoadOut.of(
        await planned_load(ctx.store, start=start, end=end, bucket_s=bucket, tenant=scope)
    )


@v1.get("/preview", tags=["preview"])
async def preview(
    ctx: Ctx,
    cron: Annotated[
        str | None,
        Query(
            min_length=1, max_length=200, examples=["30 2 * * *"], **documented(pattern=NOT_BLANK)
        ),
    ] = None,
    timezone: Annotated[
        str | None,
        Query(
            max_length=100,
            description="an IANA time zone name; cron only (default UTC)",
            **documented(enum=ZONE_NAMES),
        ),
    ] = None,
    every: Annotated[
        str | None,
        Query(max_length=64, description="an interval: ISO-8601 (PT5M) or seconds"),
    ] = None,
    anchor: Annotated[
        QueryInstant | None, Query(description="every only; default: start_at, else after")
    ] = None,
    at: Annotated[QueryInstant | None, Query(description="a one-shot's instant")] = None,
    start_at: Annotated[QueryInstant | None, Query(description="no fire before this")] = None,
    end_at: Annotated[QueryInstant | None, Query(description="no fire after this")] = None,
    max_runs: MaxRunsQuery = None,
    after: Annotated[QueryInstant | None, Query(description="default: now")] = None,
    count: Annotated[int, Query(ge=1, le=1000)] = 10,
    dst_gap: Annotated[
        DstGap, Query(description="a wall time that does not exist: cron, shift or skip")
    ] = DstGap.CRON,
    dst_repeat: Annotated[
        DstRepeat, Query(description="a wall time that happens twice: cron, first, second, both")
    ] = DstRepeat.CRON,
) -> PreviewOut:
    """The next `count` fires of one of a cron expression (with DST notes), an interval
    (`every`) or a one-shot (`at`), as a job with this schedule created at `after` would
    fire them."""
    start = ctx.clock.now() if after is None else after
    schedule = preview_query_schedule(
        start=start,
        cron=cron,
        timezone=None if timezone is None else check_zone(timezone),
        every=every,
        anchor=anchor,
        at=at,
        start_at=start_at,
        end_at=end_at,
        max_runs=max_runs,
        dst_gap=dst_gap,
        dst_repeat=dst_repeat,
    )
    return PreviewOut.of(preview_schedule(schedule, start, count))


@v1.get("/jobs/{job_id}/preview", tags=["jobs"])
async def preview_job_fires(
    ctx: Ctx,
    who: Caller,
    job_id: str,
    after: Annotated[
        QueryInstant | None, Query(description="list only fires after this; default: all to come")
    ] = None,
    count: Annotated[int, Query(ge=1, le=1000)] = 10,
) -> JobPreviewOut:
    """The job's next `count` fires from its next_run_at (a paused job: if resumed now; a
    completed one: none, with the reason), counting max_runs with its fired_count."""
    job = job_for(who, await ctx.jobs.get(job_id))
    return JobPreviewOut.of_job(job, preview_job(job, ctx.clock.now(), count, after=after))


@ops.get("/healthz", tags=["ops"], response_model=Health, responses={503: {"model": ErrorOut}})
async def healthz(ctx: Ctx) -> Response | Health:
    """200 once the store answers a cheap query; 503 otherwise."""
    try:
        await ctx.store.ping()
    except Exception as exc:
        log.warning("health check failed: %s", exc, extra={"action": "api.health_failed"})
        return error_response(503, "store_unavailable", f"the schedule store failed: {exc}")
    return Health()


@ops.get("/metrics", tags=["ops"], response_class=Response)
async def metrics() -> Response:
    """Prometheus text exposition of this process's metrics."""
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


__all__ = ["ERROR_RESPONSES", "ApiContext", "ops", "v1"]
