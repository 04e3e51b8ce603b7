"""Backfills: POST /v1/jobs/{job_id}/backfill, GET /v1/jobs/{job_id}/backfills,
GET and DELETE /v1/backfills/{backfill_id}; their schemas and routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from tickwork.api.audit import noted
from tickwork.api.auth import Caller, Writer, job_for
from tickwork.api.routes import ERROR_RESPONSES, Ctx
from tickwork.api.schemas import Instant, InstantOut
from tickwork.clock import utc_iso
from tickwork.domain.backfills import (
    DEFAULT_BACKFILL_RATE,
    MAX_BACKFILL_RATE,
    Backfill,
    BackfillKind,
    BackfillState,
)
from tickwork.domain.keys import Principal
from tickwork.errors import NotFound
from tickwork.services.backfills import BackfillService

router = APIRouter(responses=ERROR_RESPONSES)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Output(BaseModel):
    model_config = ConfigDict(extra="forbid")


BackfillId = Annotated[int, Path(ge=1, le=2**63 - 1, description="a backfill's id")]


class BackfillIn(_Input):
    from_: Instant = Field(alias="from", description="the first instant of the range (included)")
    to: Instant = Field(description="the end of the range (excluded); at or before now")
    rate: float | None = Field(
        None,
        gt=0,
        le=MAX_BACKFILL_RATE,
        description=f"occurrences enqueued per second (default {DEFAULT_BACKFILL_RATE:g})",
    )


class BackfillOut(_Output):
    id: int
    job_id: str
    kind: BackfillKind = Field(description="backfill (asked for) or catchup (missed occurrences)")
    state: BackfillState
    from_: InstantOut = Field(alias="from")
    to: InstantOut
    total: int = Field(description="occurrences the range implies")
    done: int = Field(description="occurrences enqueued so far")
    cursor: InstantOut | None = Field(description="the last occurrence enqueued")
    rate: float = Field(description="occurrences enqueued per second")
    created_at: InstantOut
    updated_at: InstantOut

    @classmethod
    def of(cls, b: Backfill) -> BackfillOut:
        return cls.model_validate(
            {
                "id": b.id,
                "job_id": b.job_id,
                "kind": b.kind,
                "state": b.state,
                "from": utc_iso(b.from_at),
                "to": utc_iso(b.to_at),
                "total": b.total,
                "done": b.done,
                "cursor": None if b.cursor_at is None else utc_iso(b.cursor_at),
                "rate": b.rate_per_s,
                "created_at": utc_iso(b.created_at),
                "updated_at": utc_iso(b.updated_at),
            }
        )


class BackfillList(_Output):
    backfills: list[BackfillOut]


def _service(request: Request) -> BackfillService:
    service: BackfillService = request.app.state.backfills
    return service


@router.post(
    "/jobs/{job_id}/backfill",
    status_code=202,
    tags=["backfills"],
    response_model_by_alias=True,
)
async def create_backfill(
    ctx: Ctx, who: Writer, job_id: str, body: BackfillIn, request: Request
) -> BackfillOut:
    """Replay the job's occurrences in [from, to), oldest first, at `rate` per second, each
    as a run of origin `backfill` (its own key: it never consumes or hides a scheduled
    occurrence). 422 for an empty range, one reaching past now, or one implying more than
    1,000,000 occurrences (`too_many_occurrences`)."""
    job = job_for(who, await ctx.jobs.get(job_id))
    backfill = await _service(request).create(job, body.from_, body.to, body.rate)
    noted(resource=f"backfill {backfill.id}")
    return BackfillOut.of(backfill)


@router.get("/jobs/{job_id}/backfills", tags=["backfills"], response_model_by_alias=True)
async def list_backfills(
    ctx: Ctx,
    who: Caller,
    job_id: str,
    request: Request,
    limit: Annotated[int, Query(ge=1, le=1000, description="page size")] = 100,
) -> BackfillList:
    """The job's backfills and catch-ups, newest first."""
    job_for(who, await ctx.jobs.get(job_id))
    found = await _service(request).of_job(job_id, limit=limit)
    return BackfillList(backfills=[BackfillOut.of(b) for b in found])


@router.get("/backfills/{backfill_id}", tags=["backfills"], response_model_by_alias=True)
async def get_backfill(
    ctx: Ctx, who: Caller, backfill_id: BackfillId, request: Request
) -> BackfillOut:
    """One backfill: how far it got (`done` of `total`) and its state."""
    return BackfillOut.of(await _visible(ctx, who, request, backfill_id))


@router.delete("/backfills/{backfill_id}", tags=["backfills"], response_model_by_alias=True)
async def cancel_backfill(
    ctx: Ctx, who: Writer, backfill_id: BackfillId, request: Request
) -> BackfillOut:
    """Cancel a running backfill: nothing more is enqueued; the runs enqueued already stay.
    A finished one is returned as it is."""
    await _visible(ctx, who, request, backfill_id)
    return BackfillOut.of(await _service(request).cancel(backfill_id))


async def _visible(ctx: Ctx, who: Principal, request: Request, backfill_id: int) -> Backfill:
    """The backfill if the principal may see its job; NotFound as for a missing one otherwise."""
    backfill = await _service(request).get(backfill_id)
    if not who.sees(backfill.tenant):
        raise NotFound("backfill", str(backfill_id))
    noted(tenant=backfill.tenant, resource=f"backfill {backfill_id}")
    return backfill
