"""The command tree, its entry point, and how every failure becomes one line and an exit code.

The root typer app and its command groups are created here, and only here, so that `--help`
lists the groups in one fixed order whichever command module registers on them first. The
command modules import this one and register their commands; nothing here imports them (the
package's `__init__` does).

`run` catches everything a command raises: bad input (a flag, the API's 4xx, an invalid
setting) exits 2, an unreachable or failing API or store exits 1, and each ends as one line
on stderr, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Annotated, Any, Final, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console

from tickwork.errors import InvalidInput, StoreError, TickworkError

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILURE",
    "CliFailure",
    "app",
    "db_app",
    "dlq_app",
    "field_message",
    "jobs_app",
    "keys_app",
    "main",
    "run",
    "runs_app",
    "secrets_app",
    "stdout_console",
    "tenant_egress_app",
    "tenant_secrets_app",
    "tenants_app",
]

EXIT_BAD_INPUT: Final = 2
EXIT_FAILURE: Final = 1
PIPED_WIDTH: Final = 200

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
tenants_app = typer.Typer(help="Tenants and their settings, through the API.", no_args_is_help=True)
tenant_secrets_app = typer.Typer(
    help="A tenant's webhook signing secrets (write-only: shown as fingerprints).",
    no_args_is_help=True,
)
keys_app = typer.Typer(
    help="API keys, in the database (needs --db access, not a key).", no_args_is_help=True
)
tenant_egress_app = typer.Typer(
    help="A tenant's destination lists: the hosts its webhooks may (allow) or may not (deny)"
    " reach (an admin key changes them).",
    no_args_is_help=True,
)
tenants_app.add_typer(tenant_secrets_app, name="secrets")
secrets_app = typer.Typer(
    help="Keys that encrypt stored secrets, in the database.", no_args_is_help=True
)
tenants_app.add_typer(tenant_egress_app, name="egress")


class Session:
    """What the root command's options set for the command that follows."""

    api_key: str | None = None


@app.callback()
def _root(
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="API key for commands that call the API [env TICKWORK_API_KEY; default: "
            "the admin.key that `tickwork up` wrote in its data directory]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """tickwork: a distributed job scheduler."""
    Session.api_key = api_key


app.add_typer(jobs_app, name="jobs")
app.add_typer(runs_app, name="runs")
app.add_typer(dlq_app, name="dlq")
app.add_typer(db_app, name="db")
app.add_typer(tenants_app, name="tenants")
app.add_typer(keys_app, name="keys")
app.add_typer(secrets_app, name="secrets")


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
        return _fail(field_message(exc.field, exc.message), EXIT_BAD_INPUT)
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
            stdout_console().print(text, markup=False)
        return EXIT_BAD_INPUT
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    return _fail(f"{exc.format_message()}{hint}", getattr(exc, "exit_code", EXIT_BAD_INPUT))


def _fail(message: str, code: int) -> int:
    line = " ".join(message.split())
    _stderr_console().print(f"error: {line}", markup=False, highlight=False, soft_wrap=True)
    return code


# -- consoles ---------------------------------------------------------------------------------


def stdout_console() -> Console:
    # Piped output (grep, less, a file) gets wide lines rather than ids folded at 80 columns;
    # tables only grow as wide as their content needs.
    width = None if sys.stdout.isatty() else PIPED_WIDTH
    return Console(highlight=False, width=width)


def _stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


# -- naming the flag behind a field -----------------------------------------------------------

# Where an API or timing field came from on this command line.
_FLAGS: Final = {
    "name": "--name",
    "tenant": "--tenant",
    "schedule": "--cron/--every/--at",
    "schedule.cron": "--cron",
    "schedule.timezone": "--tz",
    "schedule.every": "--every",
    "schedule.at": "--at",
    "schedule.anchor": "--anchor",
    "schedule.start_at": "--start-at",
    "schedule.end_at": "--end-at",
    "schedule.misfire": "--misfire",
    "schedule.catchup_window": "--catchup-window",
    "schedule.jitter": "--jitter",
    "priority": "--priority",
    "schedule.window": "--window",
    "schedule.dst": "--dst-gap/--dst-repeat",
    "schedule.dst.gap": "--dst-gap",
    "schedule.dst.repeat": "--dst-repeat",
    "target.url": "--url",
    "target.method": "--method",
    "target.headers": "--header",
    "target.body": "--body",
    "target.timeout": "--timeout",
    "target.secrets": "--secret",
    "secrets": "--secret",
    "on_failure": "--on-failure",
    "overlap": "--overlap",
    "max_runs": "--max-runs",
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
    "from": "--from",
    "to": "--to",
    "rate": "--rate",
    "at": "--at",
    "database_url": "--db",
    "host": "--host",
    "port": "--port",
}


def field_message(field: str | None, message: str) -> str:
    """The message, prefixed with the field and the flag that set it (`target.url (--url): `)."""
    if not field:
        return message
    parts = field.split(".")
    prefixes = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
    flag = next((_FLAGS[p] for p in prefixes if p in _FLAGS), None)
    return f"{field} ({flag}): {message}" if flag else f"{field}: {message}"


def _settings_message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    field = ".".join(str(p) for p in first["loc"])
    return field_message(field, first["msg"])
