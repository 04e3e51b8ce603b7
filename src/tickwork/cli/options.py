"""The flags and arguments more than one command takes, spelled (and helped) once.

A flag that means the same thing on several commands is declared here, so its name, its help
text and its type cannot drift apart between them.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = [
    "ApiOpt",
    "DbOpt",
    "HostOpt",
    "ImportOpt",
    "JobIdArg",
    "JsonOpt",
    "PageBeforeOpt",
    "PageSizeOpt",
    "PortOpt",
    "QueueOpt",
    "RunIdArg",
    "SecretOpt",
]

# -- serving roles ----------------------------------------------------------------------------

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

# -- commands that talk to the API ------------------------------------------------------------

ApiOpt = Annotated[
    str | None,
    typer.Option(
        "--api", help="API base URL [env TICKWORK_API_URL; default http://127.0.0.1:8787]"
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the API's JSON and nothing else")]
JobIdArg = Annotated[str, typer.Argument(help="the job's id")]
RunIdArg = Annotated[
    int, typer.Argument(help="the run's id", min=1, metavar="RUN_ID", show_default=False)
]
PageSizeOpt = Annotated[int, typer.Option(help="page size, 1..1000")]
PageBeforeOpt = Annotated[int | None, typer.Option(help="next_before of the previous page")]
SecretOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--secret",
        help="whsec_... signing secret; twice during a rotation (write-only: never shown)",
    ),
]
