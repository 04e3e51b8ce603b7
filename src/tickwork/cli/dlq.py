"""`tickwork dlq <verb>`: the dead-letter queue through the API (list, show, redrive, purge).

Redrive and purge act on the runs named, or on every dead letter (of one job) with `--all`.
Named runs are sent one request each, so a run the API refuses (not a dead letter) is reported
without stopping the others; the command then exits 2 after saying how many were done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

import typer

from tickwork.cli.app import EXIT_BAD_INPUT, CliFailure, dlq_app, stdout_console
from tickwork.cli.client import ApiClient, api_client, present
from tickwork.cli.jobs import runs_show
from tickwork.cli.options import ApiOpt, JsonOpt, PageBeforeOpt, PageSizeOpt
from tickwork.cli.render import dead_letters_table, print_json, show_page

__all__ = ["dlq_list", "dlq_purge", "dlq_redrive"]

RunIdsArg = Annotated[
    list[int] | None,
    typer.Argument(help="ids of dead-lettered runs", min=1, metavar="RUN_ID", show_default=False),
]
AllOpt = Annotated[bool, typer.Option("--all", help="every dead letter (of --job)")]
JobOpt = Annotated[str | None, typer.Option("--job", help="only this job's dead letters")]


dlq_app.command("show", help="Show one dead letter with its attempts (= `runs show`).")(runs_show)


@dlq_app.command("list")
def dlq_list(
    job: JobOpt = None,
    limit: PageSizeOpt = 50,
    before: PageBeforeOpt = None,
    api: ApiOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List dead letters, newest first."""
    query = present({"job_id": job, "before": before}) | {"limit": limit}
    page = api_client(api).call("GET", "/v1/dead-letters", params=query)
    more = "tickwork dlq list" + (f" --job {job}" if job else "") + " --before"
    show_page(page, as_json, dead_letters_table(page["dead_letters"]), more)


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
    client = api_client(api)
    failures: list[str] = []
    if all_:
        answer = client.call(action.method, action.every, params=present({"job_id": job}))
        count = int(answer[action.done])
    else:
        count, failures = _act_on_each(client, action, run_ids)
    if as_json:
        print_json({action.done: count})
    else:
        stdout_console().print(f"{count} dead letter(s) {action.done}", markup=False)
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
