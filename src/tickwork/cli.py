"""The `tickwork` command line.

    tickwork up                     API + scheduler + executor in one process
    tickwork db upgrade             bring the database schema up to date
    tickwork jobs <verb>            talk to a running API (create, list, get, pause, ...)
    tickwork runs show RUN_ID       one run with its attempts
    tickwork dlq <verb>             the dead-letter queue (list, show, redrive, purge)
    tickwork tenants secrets <verb> a tenant's webhook signing secrets (set, show, clear)
    tickwork preview --cron EXPR    the next fire instants, computed locally

Output is a readable table by default; `--json` prints machine output and nothing else.
Every failure ends as one line on stderr, never a traceback: bad input (a flag, the API's 4xx)
exits 2, an unreachable or failing API or store exits 1.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn
from urllib.parse import quote

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console, Group
from rich.table import Table

from tickwork.clock import SystemClock, utc_iso
from tickwork.errors import InvalidInput, StoreError, TickworkError
from tickwork.settings import Settings
from tickwork.timing.preview import preview_cron

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1
PIPED_WIDTH = 200

app = typer.Typer(
    name="tickwork",
    help="tickwork: a distributed job scheduler.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
jobs_app = typer.Typer(help="Create and manage jobs through the API.", no_args_is_help=True)
runs_app = typer.Typer(help="Inspect runs through the API.", no_args_is_help=True)
dlq_app = typer.Typer(
    help="The dead-letter queue: runs that failed for good.", no_args_is_help=True
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
tenants_app = typer.Typer(help="Per-tenant settings through the API.", no_args_is_help=True)
tenant_secrets_app = typer.Typer(
    help="A tenant's webhook signing secrets (write-only: shown as fingerprints).",
    no_args_is_help=True,
)
tenants_app.add_typer(tenant_secrets_app, name="secrets")
app.add_typer(jobs_app, name="jobs")
app.add_typer(runs_app, name="runs")
app.add_typer(dlq_app, name="dlq")
app.add_typer(db_app, name="db")
app.add_typer(tenants_app, name="tenants")


class CliFailure(Exception):
    """Ends the command with one line on stderr and an exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


# -- entry point ------------------------------------------------------------------------------


def main() -> NoReturn:
    sys.exit(run(sys.argv[1:]))


def run(argv: Sequence[str]) -> int:
    """Run one command line; return its exit code. All failures are caught here."""
    try:
        result = app(args=list(argv), prog_name="tickwork", standalone_mode=False)
    except typer.Abort:
        return _fail("aborted", 130)
    except _CLICK_ERROR as exc:
        return _usage_failure(exc)
    except CliFailure as exc:
        return _fail(exc.message, exc.exit_code)
    except InvalidInput as exc:
        return _fail(_field_message(exc.field, exc.message), EXIT_BAD_INPUT)
    except StoreError as exc:
        return _fail(str(exc), EXIT_FAILURE)
    except TickworkError as exc:
        return _fail(str(exc), EXIT_BAD_INPUT)
    except ValidationError as exc:  # Settings built from flags and TICKWORK_* variables
        return _fail(_settings_message(exc), EXIT_BAD_INPUT)
    except Exception as exc:  # a bug: still one line, but say it is one
        return _fail(f"unexpected {type(exc).__name__}: {exc} (please report this)", EXIT_FAILURE)
    return result if isinstance(result, int) else 0


def _click_class(name: str) -> type[Exception]:
    # Newer typer vendors its own click; reach its exception classes through a public one.
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


_CLICK_ERROR = _click_class("ClickException")


def _usage_failure(exc: Any) -> int:
    ctx = getattr(exc, "ctx", None)
    if type(exc).__name__ == "NoArgsIsHelpError":
        # the message is the help text; typer's rich help has printed itself already
        if text := exc.format_message().strip():
            _stdout().print(text, markup=False)
        return EXIT_BAD_INPUT
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    return _fail(f"{exc.format_message()}{hint}", getattr(exc, "exit_code", EXIT_BAD_INPUT))


def _fail(message: str, code: int) -> int:
    line = " ".join(message.split())
    _stderr().print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
    return code


def _stdout() -> Console:
    # Piped output (grep, less, a file) gets wide lines rather than ids folded at 80 columns;
    # tables only grow as wide as their content needs.
    width = None if sys.stdout.isatty() else PIPED_WIDTH
    return Console(highlight=False, width=width)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


# Where an API or timing field came from on this command line.
_FLAGS = {
    "name": "--name",
    "tenant": "--tenant",
    "schedule": "--cron/--every/--at",
    "schedule.cron": "--cron",
    "schedule.timezone": "--tz",
    "schedule.every": "--every",
    "schedule.at": "--at",
    "schedule.start_at": "--start-at",
    "schedule.end_at": "--end-at",
    "schedule.misfire": "--misfire",
    "target.url": "--url",
    "target.method": "--method",
    "target.headers": "--header",
    "target.body": "--body",
    "target.timeout": "--timeout",
    "target.secrets": "--secret",
    "secrets": "--secret",
    "on_failure": "--on-failure",
    "on_failure.url": "--on-failure",
    "retry": "--max-attempts/--backoff/--max-backoff",
    "retry.max_attempts": "--max-attempts",
    "retry.backoff": "--backoff",
    "retry.max_backoff": "--max-backoff",
    "run_id": "RUN_ID",
    "job_id": "--job",
    "limit": "--limit",
    "before": "--before",
    "count": "--count",
    "after": "--after",
    "database_url": "--db",
    "host": "--host",
    "port": "--port",
}


def _field_message(field: str | None, message: str) -> str:
    if not field:
        return message
    parts = field.split(".")
    prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
    flag = next((_FLAGS[p] for p in prefixes if p in _FLAGS), None)
    return f"{field} ({flag}): {message}" if flag else f"{field}: {message}"


def _settings_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    return _field_message(field, first["msg"])


# -- server-side commands ---------------------------------------------------------------------


DbOpt = Annotated[str | None, typer.Option("--db", help="database URL")]
HostOpt = Annotated[str | None, typer.Option(help="address to listen on")]
PortOpt = Annotated[int | None, typer.Option(help="port to listen on")]


ImportOpt = Annotated[
    list[str] | None,
    typer.Option("--import", help="module with @tickwork.task functions (repeatable)"),
]
QueueOpt = Annotated[
    str | None, typer.Option("--queue", help="nats://... or redis://...; default: the store")
]


def _serve(
    roles: frozenset[str],
    db: str | None,
    host: str | None,
    port: int | None,
    queue: str | None = None,
    imports: list[str] | None = None,
) -> None:
    from tickwork.runtime.up import Role, run_up

    overrides = {
        "database_url": db,
        "host": host,
        "port": port,
        "queue_url": queue,
        "imports": imports or None,
    }
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})  # type: ignore[arg-type]
    run_up(settings, frozenset(Role(r) for r in roles))


@app.command()
def up(
    db: DbOpt = None, host: HostOpt = None, port: PortOpt = None, imports: ImportOpt = None
) -> None:
    """Run the API, the scheduler and the executor in one process."""
    _serve(frozenset({"api", "scheduler", "worker"}), db, host, port, imports=imports)


@app.command()
def api(db: DbOpt = None, host: HostOpt = None, port: PortOpt = None) -> None:
    """Run only the HTTP API (any number of API processes may share a store)."""
    _serve(frozenset({"api"}), db, host, port)


@app.command()
def scheduler(
    db: DbOpt = None, host: HostOpt = None, port: PortOpt = 0, queue: QueueOpt = None
) -> None:
    """Run only a scheduler, handing fires to workers through the store.

    /healthz and /metrics are served on --port (default: a free port, printed).
    """
    _serve(frozenset({"scheduler"}), db, host, port, queue)


@app.command()
def worker(
    db: DbOpt = None,
    host: HostOpt = None,
    port: PortOpt = 0,
    queue: QueueOpt = None,
    imports: ImportOpt = None,
) -> None:
    """Run only a worker, leasing fires from the store and executing them.

    /healthz and /metrics are served on --port (default: a free port, printed).
    """
    _serve(frozenset({"worker"}), db, host, port, queue, imports)


@db_app.command("upgrade")
def db_upgrade(
    db: Annotated[str | None, typer.Option("--db", help="database URL")] = None,
) -> None:
    """Migrate the database to the newest schema (safe to run while tickwork runs)."""
    from tickwork.store.migrate import upgrade

    url = db or Settings().database_url
    revision = asyncio.run(upgrade(url))
    _stdout().print(f"database schema at revision {revision}", markup=False)


# -- preview ----------------------------------------------------------------------------------


@app.command()
def preview(
    cron: Annotated[str, typer.Option(help="cron expression, e.g. '30 2 * * *'")],
    tz: Annotated[str, typer.Option("--tz", help="IANA time zone of the expression")] = "UTC",
    after: Annotated[
        str | None, typer.Option(help="ISO-8601 instant to start after (default: now)")
    ] = None,
    count: Annotated[int, typer.Option(help="how many fires, 1..1000")] = 10,
    as_json: Annotated[
        bool, typer.Option("--json", help="print a JSON array of UTC instants")
    ] = False,
) -> None:
    """Show the next fire instants of a cron expression (computed locally, no API)."""
    start = _parse_instant(after, "--after") if after else SystemClock().now()
    entries = preview_cron(cron, tz, start, count)
    if as_json:
        _print_json([utc_iso(entry.utc) for entry in entries], indent=None)
        return
    table = Table(
        "#", "UTC", f"local ({tz})", "note", title=f"next {len(entries)} fires of {cron!r}"
    )
    for n, entry in enumerate(entries, 1):
        table.add_row(str(n), utc_iso(entry.utc), entry.local.isoformat(), entry.note or "")
    _stdout().print(table)


def _parse_instant(value: str, flag: str) -> datetime:
    example = "e.g. 2026-03-28T00:00:00Z"
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise CliFailure(f"{flag}: {value!r} is not an ISO-8601 instant; use {example}") from None
    if when.tzinfo is None:
        raise CliFailure(f"{flag}: {value!r} has no offset; add Z or an offset, {example}")
    return when


def _print_json(data: Any, indent: int | None = 2) -> None:
    sys.stdout.write(json.dumps(data, indent=indent) + "\n")
    sys.stdout.flush()


# -- the API client ---------------------------------------------------------------------------


class ApiClient:
    """A thin synchronous client; turns HTTP failures into `CliFailure`s."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            with httpx.Client(base_url=self.base_url, timeout=30.0) as client:
                response = client.request(method, path, **kwargs)
        except httpx.TransportError:
            raise CliFailure(
                f"cannot reach the tickwork API at {self.base_url} (is `tickwork up` running?)",
                EXIT_FAILURE,
            ) from None
        except httpx.InvalidURL as exc:
            raise CliFailure(f"--api: {self.base_url!r} is not a usable URL ({exc})") from None
        if response.is_success:
            return response.json() if response.content else None
        raise self._failure(response)

    def _failure(self, response: httpx.Response) -> CliFailure:
        try:
            error = response.json()["error"]
            message = _field_message(error.get("field"), str(error["message"]))
        except (ValueError, KeyError, TypeError):
            message = f"HTTP {response.status_code}: {response.text[:200]}"
        if response.is_client_error:
            return CliFailure(message, EXIT_BAD_INPUT)
        return CliFailure(f"the API failed: {message}", EXIT_FAILURE)


ApiOpt = Annotated[
    str | None,
    typer.Option(
        "--api", help="API base URL [env TICKWORK_API_URL; default http://127.0.0.1:8787]"
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the API's JSON and nothing else")]
JobId = Annotated[str, typer.Argument(help="the job's id")]
SecretOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        help="whsec_... signing secret; twice during a rotation (write-only: never shown)",
    ),
]


def _client(api: str | None) -> ApiClient:
    return ApiClient(api or Settings().api_url)


def _show(data: Any, as_json: bool, render: Callable[[Any], Any]) -> None:
    if as_json:
        _print_json(data)
    else:
        _stdout().print(render(data))


def _show_page(page: Mapping[str, Any], as_json: bool, table: Table, more: str) -> None:
    """A list page: the table, then the command for the next page (`more` + the cursor)."""
    if as_json:
        _print_json(page)
        return
    console = _stdout()
    console.print(table)
    cursor = page.get("next_after") or page.get("next_before")
    if cursor:
        console.print(f"more: {more} {cursor}", markup=False)


# -- jobs -------------------------------------------------------------------------------------


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
        "end_at": end_at, "misfire": misfire, "url": url, "method": method, "header": header,
        "body": body, "timeout": timeout, "tenant": tenant, "max_attempts": max_attempts,
        "backoff": backoff, "max_backoff": max_backoff, "task": task, "args": args,
        "secret": secret, "on_failure": on_failure,
    }  # fmt: skip
    payload = _load_job_file(file, options) if file else _job_body(options)
    job = _client(api).call("POST", "/v1/jobs", json=payload)
    _show(job, as_json, _job_detail)


@jobs_app.command("list")
def jobs_list(
    state: Annotated[str | None, typer.Option(help="scheduled, paused or completed")] = None,
    name_prefix: Annotated[str | None, typer.Option(help="names starting with this")] = None,
    tenant: Annotated[str | None, typer.Option(help="only this tenant's jobs")] = None,
    limit: Annotated[int, typer.Option(help="page size, 1..1000")] = 100,
    after: Annotated[str | None, typer.Option(help="next_after of the previous page")] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List jobs in creation order, one page at a time."""
    params = {"state": state, "name_prefix": name_prefix, "tenant": tenant, "after": after}
    query = {k: v for k, v in params.items() if v is not None} | {"limit": limit}
    page = _client(api).call("GET", "/v1/jobs", params=query)
    _show_page(page, as_json, _jobs_table(page["jobs"]), "tickwork jobs list --after")


@jobs_app.command("get")
def jobs_get(job_id: JobId, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Show one job."""
    _show(_client(api).call("GET", f"/v1/jobs/{job_id}"), as_json, _job_detail)


@jobs_app.command("pause")
def jobs_pause(job_id: JobId, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Stop a job from firing until it is resumed."""
    _show(_client(api).call("POST", f"/v1/jobs/{job_id}/pause"), as_json, _job_detail)


@jobs_app.command("resume")
def jobs_resume(job_id: JobId, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Re-arm a paused job from now (fires missed while paused are skipped)."""
    _show(_client(api).call("POST", f"/v1/jobs/{job_id}/resume"), as_json, _job_detail)


@jobs_app.command("trigger")
def jobs_trigger(job_id: JobId, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Fire a job once now, outside its schedule."""
    run_ = _client(api).call("POST", f"/v1/jobs/{job_id}/trigger")
    _show(run_, as_json, lambda r: _runs_table([r], title=f"triggered job {job_id}"))


@jobs_app.command("delete")
def jobs_delete(job_id: JobId, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Delete a job and its run history (with --json: prints nothing)."""
    _client(api).call("DELETE", f"/v1/jobs/{job_id}")
    if not as_json:
        _stdout().print(f"deleted job {job_id}", markup=False)


@jobs_app.command("runs")
def jobs_runs(
    job_id: JobId,
    limit: Annotated[int, typer.Option(help="page size, 1..1000")] = 50,
    before: Annotated[int | None, typer.Option(help="next_before of the previous page")] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a job's runs, newest first."""
    query: dict[str, int] = {"limit": limit} | ({"before": before} if before else {})
    page = _client(api).call("GET", f"/v1/jobs/{job_id}/runs", params=query)
    table = _runs_table(page["runs"], title=f"runs of job {job_id}")
    _show_page(page, as_json, table, f"tickwork jobs runs {job_id} --before")


# -- runs and dead letters --------------------------------------------------------------------

RunIdArg = Annotated[
    int, typer.Argument(help="the run's id", min=1, metavar="RUN_ID", show_default=False)
]
RunIdsArg = Annotated[
    list[int] | None,
    typer.Argument(help="ids of dead-lettered runs", min=1, metavar="RUN_ID", show_default=False),
]
AllOpt = Annotated[bool, typer.Option("--all", help="every dead letter (of --job)")]
JobOpt = Annotated[str | None, typer.Option("--job", help="only this job's dead letters")]


@runs_app.command("show")
def runs_show(run_id: RunIdArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Show one run with its attempts, oldest first."""
    _show(_client(api).call("GET", f"/v1/runs/{run_id}"), as_json, _run_detail)


dlq_app.command("show", help="Show one dead letter with its attempts (= `runs show`).")(runs_show)


@dlq_app.command("list")
def dlq_list(
    job: JobOpt = None,
    limit: Annotated[int, typer.Option(help="page size, 1..1000")] = 50,
    before: Annotated[int | None, typer.Option(help="next_before of the previous page")] = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List dead letters, newest first."""
    query = _present({"job_id": job, "before": before}) | {"limit": limit}
    page = _client(api).call("GET", "/v1/dead-letters", params=query)
    more = "tickwork dlq list" + (f" --job {job}" if job else "") + " --before"
    _show_page(page, as_json, _dead_letters_table(page["dead_letters"]), more)


@dataclass(frozen=True, kw_only=True, slots=True)
class _DlqAction:
    verb: str  # as typed: redrive, purge
    done: str  # the key of the API's answer: redriven, purged
    method: str
    one: str  # path of one run, with {} for its id
    every: str  # path of all of them (?job_id= narrows it)


_REDRIVE = _DlqAction(
    verb="redrive",
    done="redriven",
    method="POST",
    one="/v1/dead-letters/{}/redrive",
    every="/v1/dead-letters/redrive",
)
_PURGE = _DlqAction(
    verb="purge",
    done="purged",
    method="DELETE",
    one="/v1/dead-letters/{}",
    every="/v1/dead-letters",
)


@dlq_app.command("redrive")
def dlq_redrive(
    run_ids: RunIdsArg = None,
    all_: AllOpt = False,
    job: JobOpt = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Give dead letters one more attempt: RUN_ID... or --all [--job ID]."""
    _dlq_act(_REDRIVE, run_ids or [], all_=all_, job=job, api=api, as_json=as_json)


@dlq_app.command("purge")
def dlq_purge(
    run_ids: RunIdsArg = None,
    all_: AllOpt = False,
    job: JobOpt = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drop dead letters from the queue (they stay failed in the history): RUN_ID... or --all."""
    _dlq_act(_PURGE, run_ids or [], all_=all_, job=job, api=api, as_json=as_json)


def _dlq_act(
    action: _DlqAction,
    run_ids: Sequence[int],
    *,
    all_: bool,
    job: str | None,
    api: str | None,
    as_json: bool,
) -> None:
    _check_selection(action.verb, run_ids, all_=all_, job=job)
    client = _client(api)
    failures: list[str] = []
    if all_:
        answer = client.call(action.method, action.every, params=_present({"job_id": job}))
        count = int(answer[action.done])
    else:
        count, failures = _act_on_each(client, action, run_ids)
    if as_json:
        _print_json({action.done: count})
    else:
        _stdout().print(f"{count} dead letter(s) {action.done}", markup=False)
    if failures:
        left = f"{len(failures)} of {len(set(run_ids))} not {action.done}"
        raise CliFailure(f"{failures[0]} ({left})")


def _check_selection(verb: str, run_ids: Sequence[int], *, all_: bool, job: str | None) -> None:
    if all_ and run_ids:
        raise CliFailure(f"give RUN_ID... or --all, not both (dlq {verb})")
    if job and not all_:
        raise CliFailure(f"--job goes with --all: `tickwork dlq {verb} --all --job {job}`")
    if not all_ and not run_ids:
        raise CliFailure(
            f"give the ids of the runs to {verb}, or --all (--all --job ID: one job's)"
        )


def _act_on_each(
    client: ApiClient, action: _DlqAction, run_ids: Sequence[int]
) -> tuple[int, list[str]]:
    """Act on each run; a refused one (4xx) does not stop the others."""
    count, failures = 0, []
    for run_id in dict.fromkeys(run_ids):  # once each, in the order given
        try:
            client.call(action.method, action.one.format(run_id))
        except CliFailure as exc:
            if exc.exit_code != EXIT_BAD_INPUT:
                raise
            failures.append(exc.message)
        else:
            count += 1
    return count, failures


# -- tenants ----------------------------------------------------------------------------------

TenantArg = Annotated[str, typer.Argument(help="the tenant", show_default=False)]


def _tenant_secrets_path(tenant: str) -> str:
    return f"/v1/tenants/{quote(tenant, safe='')}/webhook-secrets"


@tenant_secrets_app.command("set")
def tenant_secrets_set(
    tenant: TenantArg, secret: SecretOpt = None, api: ApiOpt = None, as_json: JsonOpt = False
) -> None:
    """Sign the tenant's jobs that have no secrets of their own with these (1 or 2)."""
    if not secret:
        raise CliFailure("give --secret whsec_... (twice during a rotation)")
    answer = _client(api).call("PUT", _tenant_secrets_path(tenant), json={"secrets": secret})
    _show(answer, as_json, _tenant_signing)


@tenant_secrets_app.command("show")
def tenant_secrets_show(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Show the fingerprints of the tenant's secrets (never the secrets)."""
    _show(_client(api).call("GET", _tenant_secrets_path(tenant)), as_json, _tenant_signing)


@tenant_secrets_app.command("clear")
def tenant_secrets_clear(tenant: TenantArg, api: ApiOpt = None, as_json: JsonOpt = False) -> None:
    """Remove the tenant's secrets (with --json: prints nothing)."""
    _client(api).call("DELETE", _tenant_secrets_path(tenant))
    if not as_json:
        _stdout().print(f"cleared the webhook secrets of tenant {tenant}", markup=False)


def _tenant_signing(answer: Mapping[str, Any]) -> Table:
    fingerprints = ", ".join(answer["fingerprints"])
    rows = {
        "tenant": answer["tenant"],
        "signing": (
            f"tenant's secrets (fingerprints {fingerprints})"
            if answer["signing"] == "tenant"
            else "none set: the workers' secrets, else unsigned"
        ),
        "updated": answer["updated_at"] or "-",
    }
    return _detail_table(f"webhook secrets of tenant {answer['tenant']}", rows)


# -- building a job body ----------------------------------------------------------------------


def _load_job_file(path: Path, options: Mapping[str, Any]) -> dict[str, Any]:
    given = [f"--{k.replace('_', '-')}" for k, v in options.items() if v not in (None, [])]
    if given:
        raise CliFailure(
            f"--file: give the whole job in the file or as flags, not both ({given[0]})"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliFailure(f"--file: cannot read {str(path)!r}: {exc.strerror}") from None
    except ValueError as exc:
        raise CliFailure(f"--file: {str(path)!r} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CliFailure(f"--file: {str(path)!r} must hold a JSON object (the POST /v1/jobs body)")
    return data


def _target_rows(target: Mapping[str, Any]) -> dict[str, str]:
    if target["type"] == "task":
        return {
            "target": f"task {target['name']} (timeout {target['timeout']})",
            "args": "-" if target["args"] is None else json.dumps(target["args"]),
        }
    return {
        "target": f"{target['method']} {target['url']} (timeout {target['timeout']})",
        "headers": ", ".join(f"{k}: {v}" for k, v in target["headers"].items()) or "-",
        "body": "-" if target["body"] is None else json.dumps(target["body"]),
    }


def _job_body(o: Mapping[str, Any]) -> dict[str, Any]:
    if o["name"] is None:
        raise CliFailure("--name is required (or give the whole job with --file job.json)")
    if (o["url"] is None) == (o["task"] is None):
        raise CliFailure("give one of --url (a webhook) or --task (a Python task)")
    schedule = {
        "cron": o["cron"], "timezone": o["tz"], "every": _number_or_text(o["every"]),
        "at": o["at"], "start_at": o["start_at"], "end_at": o["end_at"], "misfire": o["misfire"],
    }  # fmt: skip
    target: dict[str, Any] = {"type": "webhook", "url": o["url"]}
    if o["task"] is not None:
        target = {"type": "task", "name": o["task"]}
        if o["args"] is not None:
            target["args"] = _parse_json_flag(o["args"], "--args")
    if o["method"]:
        target["method"] = o["method"]
    if o["header"]:
        target["headers"] = _parse_headers(o["header"])
    if o["body"] is not None:
        target["body"] = _parse_json_flag(o["body"], "--body")
    if o["timeout"]:
        target["timeout"] = _number_or_text(o["timeout"])
    if o["secret"]:
        target["secrets"] = list(o["secret"])
    job = {"name": o["name"], "schedule": _present(schedule), "target": target}
    if o["on_failure"]:
        job["on_failure"] = {"url": o["on_failure"]}
    retry = {
        "max_attempts": o["max_attempts"],
        "backoff": _number_or_text(o["backoff"]),
        "max_backoff": _number_or_text(o["max_backoff"]),
    }
    if any(v is not None for v in retry.values()):
        job["retry"] = _present(retry)
    return job | ({"tenant": o["tenant"]} if o["tenant"] else {})


def _present(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _number_or_text(value: str | None) -> str | int | float | None:
    """`--every 30` means 30 seconds; `--every PT30S` is passed on as text."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() else number


def _parse_headers(lines: Sequence[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise CliFailure(f"--header: {line!r} is not 'Name: value', e.g. 'X-Team: data'")
        headers[name.strip()] = value.strip()
    return headers


def _parse_json_flag(text: str, flag: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliFailure(f"{flag}: not valid JSON ({exc}); quote it, e.g. '{{\"k\": 1}}'") from None


# -- rendering --------------------------------------------------------------------------------


def _schedule_text(schedule: Mapping[str, Any]) -> str:
    if "cron" in schedule:
        return f"cron {schedule['cron']} ({schedule.get('timezone', 'UTC')})"
    if "every" in schedule:
        return f"every {schedule['every']}"
    return f"at {schedule.get('at')}"


def _jobs_table(jobs: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title=f"{len(jobs)} job(s)")
    table.add_column("id", no_wrap=True)
    for column in ("name", "state", "schedule", "next run (UTC)"):
        table.add_column(column)
    for job in jobs:
        table.add_row(
            job["id"],
            job["name"],
            job["state"],
            _schedule_text(job["schedule"]),
            job["next_run_at"] or "-",
        )
    return table


def _job_detail(job: Mapping[str, Any]) -> Table:
    schedule, target = job["schedule"], job["target"]
    window = f"{schedule.get('start_at') or '-'} .. {schedule.get('end_at') or '-'}"
    rows = {
        "id": job["id"],
        "name": job["name"],
        "tenant": job["tenant"],
        "state": job["state"],
        "schedule": _schedule_text(schedule),
        "window": window,
        "misfire": f"{schedule['misfire']} (grace {schedule['misfire_grace']})",
        **_target_rows(target),
        "signing": _signing_text(job["signing"]),
        "on failure": job["on_failure"]["url"] if job.get("on_failure") else "-",
        "retry": _retry_text(job["retry"]),
        "next run": job["next_run_at"] or "-",
        "last fired": job["last_fired_at"] or "-",
        "fence token": str(job["fence_token"]),
        "created": job["created_at"],
        "updated": job["updated_at"],
    }
    return _detail_table(f"job {job['name']}", rows)


def _signing_text(signing: Mapping[str, Any]) -> str:
    if signing["source"] == "job":
        return f"job's own secrets (fingerprints {', '.join(signing['fingerprints'])})"
    return "inherited: the tenant's secrets, else the workers', else unsigned"


def _retry_text(retry: Mapping[str, Any]) -> str:
    return (
        f"{retry['max_attempts']} attempt(s), backoff {retry['backoff']}"
        f" x{retry['multiplier']:g} up to {retry['max_backoff']}"
    )


def _detail_table(title: str, rows: Mapping[str, str]) -> Table:
    table = Table(show_header=False, title=title)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows.items():
        table.add_row(key, value)
    return table


def _status_text(run: Mapping[str, Any]) -> str:
    return f"{run['status']} (dead letter)" if run.get("dead_lettered_at") else run["status"]


def _result_text(run: Mapping[str, Any]) -> str:
    error = run.get("error") or run.get("last_error")
    return error or (f"HTTP {run['http_status']}" if run.get("http_status") else "-")


def _runs_table(runs: Sequence[Mapping[str, Any]], *, title: str) -> Table:
    table = Table(title=title)
    for column in ("run", "scheduled for", "origin", "status", "attempt", "started", "finished"):
        table.add_column(column, no_wrap=column in ("run", "status"))
    table.add_column("result", overflow="fold")
    for r in runs:
        table.add_row(
            str(r["id"]),
            r["scheduled_for"],
            r["origin"],
            _status_text(r),
            str(r["attempt"]),
            r["started_at"] or "-",
            r["finished_at"] or "-",
            _result_text(r),
        )
    return table


def _dead_letters_table(runs: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title=f"{len(runs)} dead letter(s)")
    for column in ("run", "job", "scheduled for", "attempts", "dead-lettered"):
        table.add_column(column, no_wrap=column in ("run", "job"))
    table.add_column("last error", overflow="fold")
    for r in runs:
        table.add_row(
            str(r["id"]),
            r["job_id"],
            r["scheduled_for"],
            str(r["attempt"]),
            r["dead_lettered_at"] or "-",
            _result_text(r),
        )
    return table


def _run_detail(run: Mapping[str, Any]) -> Group:
    rows = {
        "id": str(run["id"]),
        "job": run["job_id"],
        "key": run["key"],
        "origin": run["origin"],
        "scheduled for": run["scheduled_for"],
        "status": _status_text(run),
        "attempt": str(run["attempt"]),
        "fence token": str(run["fence_token"]),
        "created": run["created_at"],
        "started": run["started_at"] or "-",
        "finished": run["finished_at"] or "-",
        "result": _result_text(run),
        "dead-lettered": run["dead_lettered_at"] or "-",
    }
    return Group(_detail_table(f"run {run['id']}", rows), _attempts_table(run["attempts"]))


def _attempts_table(attempts: Sequence[Mapping[str, Any]]) -> Table:
    table = Table(title=f"{len(attempts)} attempt(s)")
    for column in ("#", "status", "started", "finished", "worker", "fence"):
        table.add_column(column, no_wrap=column in ("#", "status"))
    table.add_column("result", overflow="fold")
    for a in attempts:
        table.add_row(
            str(a["attempt"]),
            a["status"],
            a["started_at"],
            a["finished_at"],
            a["worker"] or "-",
            str(a["fence_token"]),
            _result_text(a),
        )
    return table
