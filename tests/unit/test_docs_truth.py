"""The docs stay true: every command, setting, route and link they show exists.

README.md and docs/**/*.md are read as a user reads them. Every `tickwork ...` command in a
shell block or in inline code must name a real command (its `--help` runs in-process through
`tickwork.cli.run`) and only flags that command has. Every `TICKWORK_*` name must be a setting
or a known variable that is not one, every setting must be in the reference table
(docs/configuration.md) with its real default, the routes of docs/api.md must be the app's
routes (from its OpenAPI schema, built on a MemoryStore: no server), and relative links must
lead somewhere. Each checker is also fed made-up input, so none of them can pass by finding
nothing.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import typer.main

from tickwork.api.app import create_app
from tickwork.cli import run
from tickwork.clock import SystemClock
from tickwork.settings import Settings
from tickwork.store.memory import MemoryStore

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
API_DOC = ROOT / "docs" / "api.md"
CONFIG_REFERENCE = ROOT / "docs" / "configuration.md"
# `TICKWORK_*` variables that are read by name rather than through `Settings`.
NOT_SETTINGS = frozenset(
    {
        "TICKWORK_TEST_PG_DSN",
        "TICKWORK_TEST_REQUIRE",
        "TICKWORK_FAULT",
        "TICKWORK_BENCH_SMOKE",  # the peer suite's smoke test, on in CI
        "TICKWORK_BENCH_BODY_LOG",  # the benchmark's no-op task writes the peers' body log
        "TICKWORK_BENCH_ICU_LOCALE",  # the benchmarks' databases with an ICU default collation
    }
)
# Where those names must be read (this file does not count: it only lists them).
CODE_DIRS = ("src", "tests", "bench", ".ci")

SHELL_LANGUAGES = frozenset({"", "sh", "bash", "shell", "console"})
FENCE = re.compile(r"^\s*(```|~~~)\s*([\w+-]*)")
INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.DOTALL)
SEPARATORS = frozenset({"|", "||", "&&", ";"})
COMMAND_WORD = re.compile(r"[a-z][a-z0-9-]*")
VARIABLE = re.compile(r"\bTICKWORK_[A-Z0-9_]*[A-Z0-9]\b")
ROUTE = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE)\s+(/[\w{}./-]*[\w}])")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")


# -- reading markdown -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class Snippet:
    """A piece of a doc: a shell line (continuations joined), inline code, or prose."""

    where: str  # path:line, for messages
    text: str


def _split(path: Path) -> tuple[list[Snippet], list[Snippet]]:
    return split_markdown(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))


def split_markdown(text: str, name: str) -> tuple[list[Snippet], list[Snippet]]:
    """(shell lines of code blocks, paragraphs outside code blocks) of one markdown text."""
    shell: list[Snippet] = []
    prose: list[Snippet] = []
    fence: str | None = None  # the language of the open block, or None outside blocks
    pending, paragraph, start, first = "", [], 0, 0
    for n, line in enumerate(text.splitlines(), 1):
        opening = FENCE.match(line)
        if opening and fence is None:
            fence = opening.group(2).lower()
            continue
        if opening:
            fence, pending, first = None, "", 0
            continue
        if fence is None:
            if not line.strip():
                if paragraph:
                    prose.append(Snippet(where=f"{name}:{start}", text="\n".join(paragraph)))
                paragraph = []
                continue
            start = start if paragraph else n
            paragraph.append(line)
            continue
        if fence in SHELL_LANGUAGES:
            first = first or n  # where a command continued over lines begins
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            shell.append(Snippet(where=f"{name}:{first}", text=pending + line))
            pending, first = "", 0
    if paragraph:
        prose.append(Snippet(where=f"{name}:{start}", text="\n".join(paragraph)))
    return shell, prose


def inline_code(paragraph: Snippet) -> list[Snippet]:
    return [
        Snippet(where=paragraph.where, text=" ".join(m.group(2).split()))
        for m in INLINE_CODE.finditer(paragraph.text)
    ]


def _without_inline_code(text: str) -> str:
    return INLINE_CODE.sub(" ", text)


# -- commands ---------------------------------------------------------------------------------


def _strip_comment(line: str) -> str:
    """The line up to a shell comment: a `#` outside quotes that starts a word."""
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def shell_words(text: str) -> list[str]:
    line = _strip_comment(text)
    try:
        return shlex.split(line)
    except ValueError:  # an unbalanced quote (a JSON body spread over lines): good enough
        return line.split()


def commands_in(text: str) -> list[list[str]]:
    """The words after `tickwork` of each command in a shell line or inline code."""
    found: list[list[str]] = []
    segment: list[str] = []
    for word in [*shell_words(text), "|"]:
        if word not in SEPARATORS:
            segment.append(word)
            continue
        if "tickwork" in segment:
            found.append(segment[segment.index("tickwork") + 1 :])
        segment = []
    return found


@functools.cache
def root_command() -> Any:
    """The click command behind `tickwork`: the root Typer app of `tickwork.cli.app`."""
    from tickwork.cli.app import app

    assert isinstance(app, typer.Typer)
    assert app.info.name == "tickwork", "tickwork.cli.app.app is no longer the `tickwork` app"
    return typer.main.get_command(app)


@functools.cache
def help_exit_code(path: tuple[str, ...]) -> int:
    """`tickwork PATH --help`, in-process, its output swallowed."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return run([*path, "--help"])


def _bare(word: str) -> str:
    return word.strip("[]()")


def _options(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(param.opts, param.secondary_opts)
    return names


def command_problems(words: Sequence[str]) -> tuple[list[tuple[str, ...]], list[str]]:
    """Resolve `tickwork WORDS`: the command paths it names, and what is wrong with it.

    `a|b` in a command's place means each of them; an upper-case word, `...` or `<verb>` there
    is a placeholder that ends the path. A lower-case word that is no subcommand is an error.
    """
    return _resolve(root_command(), (), list(words))


def _resolve(
    command: Any, path: tuple[str, ...], words: list[str]
) -> tuple[list[tuple[str, ...]], list[str]]:
    shown = "tickwork " + " ".join([*path, *words])
    while hasattr(command, "commands") and words and not _bare(words[0]).startswith("-"):
        choices = _bare(words[0]).split("|")
        if not all(COMMAND_WORD.fullmatch(choice) for choice in choices):
            break  # a placeholder: JOB_ID, ..., <verb>
        unknown = [choice for choice in choices if choice not in command.commands]
        if unknown:
            return [], [f"`{shown}`: no command `tickwork {' '.join([*path, unknown[0]])}`"]
        if len(choices) > 1:
            paths: list[tuple[str, ...]] = []
            problems: list[str] = []
            for choice in choices:
                more_paths, more_problems = _resolve(command, path, [choice, *words[1:]])
                paths += more_paths
                problems += more_problems
            return paths, problems
        command, path, words = command.commands[choices[0]], (*path, choices[0]), words[1:]
    problems = []
    if help_exit_code(path) != 0:
        problems.append(f"`{shown}`: `tickwork {' '.join(path)} --help` fails")
    known = _options(command)
    for word in words:
        for flag in re.split(r"[/|]", _bare(word)):
            name = flag.split("=", 1)[0]
            if name.startswith("--") and len(name) > 2 and name not in known:
                problems.append(f"`{shown}`: `tickwork {' '.join(path)}` has no option {name}")
    return [path], problems


@dataclass(frozen=True, kw_only=True, slots=True)
class ShownCommand:
    where: str
    words: tuple[str, ...]


def shown_commands() -> list[ShownCommand]:
    found = []
    for path in DOCS:
        shell, prose = _split(path)
        snippets = shell + [code for paragraph in prose for code in inline_code(paragraph)]
        for snippet in snippets:
            for words in commands_in(snippet.text):
                found.append(ShownCommand(where=snippet.where, words=tuple(words)))
    return found


def test_every_command_the_docs_show_exists_with_the_flags_shown() -> None:
    commands = shown_commands()
    problems = []
    paths: set[tuple[str, ...]] = set()
    for shown in commands:
        named, wrong = command_problems(shown.words)
        paths.update(named)
        problems += [f"{shown.where}: {problem}" for problem in wrong]
    assert not problems, "\n".join(problems)
    assert len(commands) >= 60, f"only {len(commands)} commands found in the docs"
    assert len(paths) >= 20, f"only {len(paths)} distinct commands found: {sorted(paths)}"


def test_commands_are_found_in_shell_blocks_and_inline_code_only() -> None:
    text = (
        "Run `tickwork up --db URL` or\n`uv run tickwork api`.\n\n"
        "```sh\ntickwork jobs create --name n \\\n  --every 30 --url http://x  # a note\n```\n"
        "```python\ntickwork.task('not a command')\nrun('tickwork up --nope')\n```\n"
    )
    shell, prose = split_markdown(text, "made-up.md")
    snippets = shell + [code for paragraph in prose for code in inline_code(paragraph)]
    assert [commands_in(s.text) for s in snippets] == [
        [["jobs", "create", "--name", "n", "--every", "30", "--url", "http://x"]],
        [["up", "--db", "URL"]],
        [["api"]],
    ]
    assert [s.where for s in snippets] == ["made-up.md:5", "made-up.md:1", "made-up.md:1"]


def test_the_command_checker_reports_made_up_commands_and_flags() -> None:
    assert commands_in("uv run tickwork jobs pause|resume JOB_ID  # --bogus in a comment") == [
        ["jobs", "pause|resume", "JOB_ID"]
    ]
    assert commands_in("tickwork jobs create --file j.json --json | jq -r .id && ls") == [
        ["jobs", "create", "--file", "j.json", "--json"]
    ]
    assert commands_in("python -m bench.chaos --short") == []
    paths, problems = command_problems(["jobs", "pause|resume|trigger", "ID", "[--api", "URL]"])
    assert (paths, problems) == ([("jobs", "pause"), ("jobs", "resume"), ("jobs", "trigger")], [])
    assert command_problems(["migrate"])[1] == ["`tickwork migrate`: no command `tickwork migrate`"]
    assert command_problems(["jobs", "list|vanish"])[1] == [
        "`tickwork jobs list|vanish`: no command `tickwork jobs vanish`"
    ]
    assert command_problems(["up", "--queue", "nats://x"])[1] == [
        "`tickwork up --queue nats://x`: `tickwork up` has no option --queue"
    ]
    assert command_problems(["preview", "--cron", "* * * * *", "[--zone=UTC]"])[1] == [
        "`tickwork preview --cron * * * * * [--zone=UTC]`: `tickwork preview` has no option --zone"
    ]
    assert help_exit_code(("migrate",)) != 0  # what the --help check would catch on its own


# -- settings ---------------------------------------------------------------------------------


def setting_variables() -> dict[str, str]:
    """Each setting's variable -> its default as the docs write it."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    assert prefix == "TICKWORK_"
    return {
        f"{prefix}{name.upper()}": _default_text(field.get_default(call_default_factory=True))
        for name, field in Settings.model_fields.items()
    }


def _default_text(value: object) -> str:
    if value is None or value == []:
        return "(none)"
    if value == "":
        return "(empty)"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def unknown_variables(names: Iterable[str]) -> list[str]:
    known = setting_variables().keys() | NOT_SETTINGS
    return sorted(set(names) - known)


def documented_defaults(text: str) -> dict[str, str]:
    """variable -> default cell, from every markdown table with a variable and a default column.

    A cell naming two variables (`TICKWORK_HOST`, `TICKWORK_PORT`) pairs them with the default
    cell's comma-separated parts.
    """
    found: dict[str, str] = {}
    columns: dict[str, int] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            columns = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if columns is None:
            columns = {cell.lower(): i for i, cell in enumerate(cells)}
            continue
        if "variable" not in columns or "default" not in columns or set(cells[0]) <= {"-"}:
            continue
        names = VARIABLE.findall(cells[columns["variable"]])
        default = cells[columns["default"]]
        values = [part.strip() for part in default.split(",")] if len(names) > 1 else [default]
        for name, value in zip(names, values, strict=False):
            found[name] = value.replace("`", "")
    return found


def default_problems(documented: dict[str, str], *, complete: bool) -> list[str]:
    """Defaults the docs get wrong; with `complete`, also settings they leave out."""
    problems = []
    for name, default in setting_variables().items():
        if name not in documented:
            if complete:
                problems.append(f"{name} is not documented")
        elif documented[name] != default:
            problems.append(f"{name}: the docs say {documented[name]!r}, the code {default!r}")
    return problems


def _code_mentions(name: str) -> bool:
    this = Path(__file__).resolve()
    for directory in CODE_DIRS:
        for path in (ROOT / directory).rglob("*"):
            if not path.is_file() or path.resolve() == this or path.suffix not in ("", ".py"):
                continue
            if name in path.read_text(encoding="utf-8", errors="replace"):
                return True
    return False


def test_every_variable_the_docs_name_exists() -> None:
    found: dict[str, str] = {}
    for path in DOCS:
        for match in VARIABLE.finditer(path.read_text(encoding="utf-8")):
            found.setdefault(match.group(), str(path.relative_to(ROOT)))
    unknown = unknown_variables(found)
    assert not unknown, "\n".join(f"{found[name]}: {name} is no setting" for name in unknown)
    assert len(found) >= 15, f"only {len(found)} variables found in the docs: {sorted(found)}"


def test_the_variables_that_are_not_settings_are_read_by_the_code() -> None:
    assert not NOT_SETTINGS & setting_variables().keys()
    unread = [name for name in sorted(NOT_SETTINGS) if not _code_mentions(name)]
    assert not unread, f"allow-listed but read nowhere: {unread}"


def test_the_reference_documents_every_setting_with_its_default() -> None:
    documented = documented_defaults(CONFIG_REFERENCE.read_text(encoding="utf-8"))
    problems = default_problems(documented, complete=True)
    assert not problems, "\n".join(problems)
    assert documented.keys() >= setting_variables().keys()


def test_every_default_the_docs_show_is_the_code_default() -> None:
    problems = []
    tables = 0
    for path in DOCS:
        documented = documented_defaults(path.read_text(encoding="utf-8"))
        tables += bool(documented)
        wrong = default_problems(documented, complete=False)
        problems += [f"{path.relative_to(ROOT)}: {problem}" for problem in wrong]
    assert not problems, "\n".join(problems)
    assert tables >= 3, "the README, cli.md and configuration.md tables were not found"


def test_the_settings_checkers_report_made_up_names_and_wrong_defaults() -> None:
    assert unknown_variables(["TICKWORK_PORT", "TICKWORK_FAULT", "TICKWORK_MADE_UP"]) == [
        "TICKWORK_MADE_UP"
    ]
    table = (
        "| variable | default | meaning |\n|---|---|---|\n"
        "| `TICKWORK_LEASE_TTL_MS` | `1000` | wrong |\n"
        "| `TICKWORK_HOST`, `TICKWORK_PORT` | `127.0.0.1`, `80` | one right, one wrong |\n"
    )
    documented = documented_defaults(table)
    assert documented == {
        "TICKWORK_LEASE_TTL_MS": "1000",
        "TICKWORK_HOST": "127.0.0.1",
        "TICKWORK_PORT": "80",
    }
    assert default_problems(documented, complete=False) == [
        "TICKWORK_PORT: the docs say '80', the code '8787'",
        "TICKWORK_LEASE_TTL_MS: the docs say '1000', the code '5000'",
    ]
    missing = default_problems(documented, complete=True)
    assert "TICKWORK_QUEUE_URL is not documented" in missing
    assert not _code_mentions("TICKWORK_" + "NEVER_READ_ANYWHERE")


# -- routes -----------------------------------------------------------------------------------


def _normalised(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def documented_routes(text: str) -> set[tuple[str, str]]:
    return {(method, _normalised(path)) for method, path in ROUTE.findall(text)}


@functools.cache
def schema_routes() -> frozenset[tuple[str, str]]:
    app = create_app(store=MemoryStore(), clock=SystemClock(), settings=Settings.model_construct())
    return frozenset(
        (method.upper(), _normalised(path))
        for path, operations in app.openapi()["paths"].items()
        for method in operations
    )


def route_problems(
    documented: set[tuple[str, str]], schema: Iterable[tuple[str, str]], *, complete: bool
) -> list[str]:
    real = set(schema)
    problems = [f"{m} {p} is not a route of the app" for m, p in sorted(documented - real)]
    if complete:
        problems += [f"{m} {p} is not documented" for m, p in sorted(real - documented)]
    return problems


def test_api_md_documents_exactly_the_apps_routes() -> None:
    documented = documented_routes(API_DOC.read_text(encoding="utf-8"))
    problems = route_problems(documented, schema_routes(), complete=True)
    assert not problems, "\n".join(problems)
    assert len(documented) >= 20, f"only {len(documented)} routes found in api.md"


def test_every_route_another_doc_names_exists() -> None:
    problems = []
    for path in DOCS:
        routes = documented_routes(path.read_text(encoding="utf-8"))
        wrong = route_problems(routes, schema_routes(), complete=False)
        problems += [f"{path.relative_to(ROOT)}: {problem}" for problem in wrong]
    assert not problems, "\n".join(problems)


def test_the_route_checker_reports_made_up_and_missing_routes() -> None:
    schema = schema_routes()
    assert ("POST", "/v1/jobs/{}/pause") in schema
    text = "### GET /v1/jobs/{id}: one job\nthen `DELETE /v1/made-up/{x}`, and POST /v1/jobs."
    documented = documented_routes(text)
    assert documented == {
        ("GET", "/v1/jobs/{}"),
        ("DELETE", "/v1/made-up/{}"),
        ("POST", "/v1/jobs"),
    }
    problems = route_problems(documented, schema, complete=True)
    assert "DELETE /v1/made-up/{} is not a route of the app" in problems
    assert "POST /v1/jobs/{}/pause is not documented" in problems
    assert "GET /v1/jobs/{} is not documented" not in problems


# -- links ------------------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        heading = HEADING.match(line)
        if heading and not in_fence:
            slug = _slug(heading.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
    return frozenset(found)


def link_problems(path: Path, prose: Iterable[Snippet]) -> tuple[int, list[str]]:
    """(relative links checked, those that lead nowhere) in the paragraphs of `path`."""
    checked, problems = 0, []
    for paragraph in prose:
        for target in LINK.findall(_without_inline_code(paragraph.text)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # https:, mailto:, ...
            checked += 1
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"{paragraph.where}: {target} does not exist")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{paragraph.where}: {target} has no heading #{anchor}")
    return checked, problems


def test_every_relative_link_leads_to_a_file_and_heading() -> None:
    checked, problems = 0, []
    for path in DOCS:
        count, wrong = link_problems(path, _split(path)[1])
        checked += count
        problems += wrong
    assert not problems, "\n".join(problems)
    assert checked >= 25, f"only {checked} relative links found"


def test_the_link_checker_reports_missing_files_and_headings() -> None:
    api = ROOT / "docs" / "api.md"
    assert "post-v1jobs-create-a-job" in anchors(api)
    text = (
        "[ok](cli.md) [ok](#errors) [gone](nowhere.md) [bad](cli.md#no-such-heading) "
        "[web](https://example.com/x) `[code](not-a-link.md)`"
    )
    checked, problems = link_problems(api, [Snippet(where="made-up:1", text=text)])
    assert checked == 4
    assert problems == [
        "made-up:1: nowhere.md does not exist",
        "made-up:1: cli.md#no-such-heading has no heading #no-such-heading",
    ]
    assert _slug("7. Dead-letter alerts (`on_failure`)") == "7-dead-letter-alerts-on_failure"
