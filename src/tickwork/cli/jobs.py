"""`tickwork jobs <verb>` and `tickwork runs show`: jobs and their runs, through the API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tickwork.cli.app import jobs_app, runs_app, stdout_console
from tickwork.cli.client import api_client, present
from tickwork.cli.job_body import job_body, load_job_file
from tickwork.cli.options import (
    ApiOpt,
    JobIdArg,
    JsonOpt,
    PageBeforeOpt,
    PageSizeOpt,
    RunIdArg,
    SecretOpt,
)
from tickwork.cli.render import (
    job_detail,
    job_fires,
    jobs_table,
    run_detail,
    runs_table,
    show,
    show_page,
)
from tickwork.domain.jobs import DstGap, DstRepeat

__all__ = [
    "jobs_create",
    "jobs_delete",
    "jobs_get",
    "jobs_list",
    "jobs_pause",
    "jobs_preview",
    "jobs_resume",
    "jobs_runs",
    "jobs_trigger",
    "runs_show",
]


@jobs_app.command("create")
def jobs_create(
    name: Annotated[str | None, typer.Option(help="job name, 1..200 characters")] = None,
    cron: Annotated[str | None, typer.Option(help="cron expression, e.g. '0 2 * * *'")] = None,
    tz: Annotated[str | None, typer.Option("--tz", help="time zone of --cron")] = None,
    every: Annotated[str | None, typer.Option(help="interval: PT30S or seconds")] = None,
    at: Annotated[str | None, typer.Option(help="one-shot ISO-8601 instant")] = None,
    start_at: Annotated[str | None, typer.Option(help="no fire before this instant")] = None,
    end_at: Annotated[str | None, typer.Option(help="no fire after this instant")] = None,
    misfire: Annotated[str | None, typer.Option(help="coalesce, fire_all or skip")] = None,
    catchup_window: Annotated[
        str | None,
        typer.Option(
            help="fire_all only: catch up missed fires this far back, e.g. PT6H (PT1S..P366D)"
            " [default: P1D]"
        ),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            help="1..9: higher is claimed first when the scheduler is behind [default: 5]"
        ),
    ] = None,
    jitter: Annotated[
        str | None,
        typer.Option(help="delay each fire by up to this, drawn per occurrence, e.g. PT30S"),
    ] = None,
    window: Annotated[
        str | None,
        typer.Option(help="fire each occurrence in the least loaded second this long after it"),
    ] = None,
    dst_gap: Annotated[
        DstGap | None,
        typer.Option(
            help="--cron: a wall time that does not exist (spring forward) [default: cron]",
            show_default=False,
        ),
    ] = None,
    dst_repeat: Annotated[
        DstRepeat | None,
        typer.Option(
            help="--cron: a wall time that happens twice (fall back) [default: cron]",
            show_default=False,
        ),
    ] = None,
    overlap: Annotated[
        str | None,
        typer.Option(
            help="while the previous run goes: allow, skip, buffer_one or cancel_previous"
            " [default: allow]"
        ),
    ] = None,
    max_runs: Annotated[
        int | None, typer.Option(help="complete after this many scheduled fires")
    ] = None,
    url: Annotated[str | None, typer.Option(help="webhook URL (http or https)")] = None,
    method: Annotated[str | None, typer.Option(help="HTTP method [default: POST]")] = None,
    header: Annotated[list[str] | None, typer.Option(help="'Name: value'; repeatable")] = None,
    body: Annotated[str | None, typer.Option(help="JSON body to send")] = None,
    task: Annotated[
        str | None, typer.Option(help="run this @tickwork.task instead of a webhook")
    ] = None,
    args: Annotated[str | None, typer.Option(help="JSON value for the task's ctx.args")] = None,
    timeout: Annotated[str | None, typer.Option(help="request timeout, e.g. PT10S")] = None,
    tenant: Annotated[str | None, typer.Option(help="tenant [default: default]")] = None,
    max_attempts: Annotated[
        int | None, typer.Option(help="attempts in all, 1..100 [default: 5]")
    ] = None,
    backoff: Annotated[
        str | None, typer.Option(help="base retry delay, e.g. PT1S or 0 [default: PT1S]")
    ] = None,
    max_backoff: Annotated[
        str | None, typer.Option(help="cap on the retry delay [default: PT5M]")
    ] = None,
    secret: SecretOpt = None,
    on_failure: Annotated[
        str | None, typer.Option(help="alert URL POSTed when an occurrence is dead-lettered")
    ] = None,
    file: Annotated[Path | None, typer.Option(help="job.json: the raw API body")] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a job: one of --cron/--every/--at, and a webhook --url or a --task (or --file)."""
    options = {
        "name": name, "cron": cron, "tz": tz, "every": every, "at": at, "start_at": start_at,
        "end_at": end_at, "misfire": misfire, "dst_gap": dst_gap, "dst_repeat": dst_repeat,
        "url": url, "method": method, "header": header,
        "body": body, "timeout": timeout, "tenant": tenant, "max_attempts": max_attempts,
        "backoff": backoff, "max_backoff": max_backoff, "task": task, "args": args,
        "secret": secret, "on_failure": on_failure, "overlap": overlap, "max_runs": max_runs,
        "catchup_window": catchup_window, "jitter": jitter, "window": window,
        "priority": priority,
    }  # fmt: skip
    payload = load_job_file(file, options) if file else job_body(options)
    job = api_client(api).call("POST", "/v1/jobs", json=payload)
    show(job, as_json, job_detail)


@jobs_app.command("list")
def jobs_list(
    state: Annotated[str | None, typer.Option(help="scheduled, paused or completed")] = None,
    name_prefix: Annotated[str | None, typer.Option(help="names starting with this")] = None,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's jobs")] = None,
    limit: PageSizeOpt = 100,
    after: Annotated[str | None, typer.Option(help="next_after of the previous page")] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs in creation order, one page at a time."""
    params = {"state": state, "name_prefix": name_prefix, "tenant": tenant, "after": after}
    query = present(params) | {"limit": limit}
    page = api_client(api).call("GET", "/v1/jobs", params=query)
    show_page(page, as_json, jobs_table(page["jobs"]), "tickwork jobs list --after")


@jobs_app.command("get")
def jobs_get(job_id: JobIdArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Show one job."""
    show(api_client(api).call("GET", f"/v1/jobs/{job_id}"), as_json, job_detail)


@jobs_app.command("pause")
def jobs_pause(
    job_id: JobIdArg,
    note: Annotated[
        str | None, typer.Option(help="why it is paused: kept and shown until it is resumed")
    ] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop a job from firing until it is resumed."""
    body = {} if note is None else {"note": note}
    show(api_client(api).call("POST", f"/v1/jobs/{job_id}/pause", json=body), as_json, job_detail)


@jobs_app.command("resume")
def jobs_resume(
    job_id: JobIdArg,
    catch_up: Annotated[
        bool,
        typer.Option(
            "--catch-up",
            help="hand the occurrences missed while paused to the job's misfire policy",
        ),
    ] = False,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-arm a paused job from now (fires missed while paused are skipped), or with
    --catch-up from where it was paused."""
    path = f"/v1/jobs/{job_id}/resume"
    show(api_client(api).call("POST", path, json={"catch_up": catch_up}), as_json, job_detail)


@jobs_app.command("trigger")
def jobs_trigger(job_id: JobIdArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Fire a job once now, outside its schedule."""
    run_ = api_client(api).call("POST", f"/v1/jobs/{job_id}/trigger")
    show(run_, as_json, lambda r: runs_table([r], title=f"triggered job {job_id}"))


@jobs_app.command("delete")
def jobs_delete(job_id: JobIdArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a job and its run history (with --json: prints nothing)."""
    api_client(api).call("DELETE", f"/v1/jobs/{job_id}")
    if not as_json:
        stdout_console().print(f"deleted job {job_id}", markup=False)


@jobs_app.command("preview")
def jobs_preview(
    job_id: JobIdArg,
    count: Annotated[int, typer.Option(help="how many fires, 1..1000")] = 10,
    after: Annotated[
        str | None, typer.Option(help="only fires after this ISO-8601 instant")
    ] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a job's next fires (a paused job's: if it were resumed now)."""
    query = present({"after": after}) | {"count": count}
    answer = api_client(api).call("GET", f"/v1/jobs/{job_id}/preview", params=query)
    show(answer, as_json, job_fires)


@jobs_app.command("runs")
def jobs_runs(
    job_id: JobIdArg,
    limit: PageSizeOpt = 50,
    before: PageBeforeOpt = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a job's runs, newest first."""
    query: dict[str, int] = {"limit": limit} | ({"before": before} if before else {})
    page = api_client(api).call("GET", f"/v1/jobs/{job_id}/runs", params=query)
    table = runs_table(page["runs"], title=f"runs of job {job_id}")
    show_page(page, as_json, table, f"tickwork jobs runs {job_id} --before")


@runs_app.command("show")
def runs_show(run_id: RunIdArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Show one run with its attempts, oldest first."""
    show(api_client(api).call("GET", f"/v1/runs/{run_id}"), as_json, run_detail)
