"""Named SQL statements, read from `.sql` files when a store module is imported.

Each SQL backend keeps its statements in one file, every statement under a name and a one-line
purpose, so that a reader finds "the claim" by searching for `name: claim`:

    -- name: claim_hand_off
    -- Claim a batch of plans and insert their runs unowned, for workers in other processes.
    WITH plan AS (...)
    ...

* `-- name: NAME` starts a statement; the next comment line is its purpose (required: loading
  fails without one). Further full-line `--` comments are for the reader: they are stripped
  from the text sent to the server, so nothing in a comment can look like a parameter.
* `-- fragment: NAME` starts a piece of text (a column list, a common CTE) that statements of
  the same load include as `{NAME}`. Fragments are expanded at load, so what runs is whole.
* Parameters are `:name`. With `numbered=True` (asyncpg) they are rewritten to `$1..$n` and
  `Statement.args` puts a dict's values in that order; SQLite takes `:name` as it is.
* A `{placeholder}` that names no fragment is an identifier filled in at run time (a partition
  name in DDL, which cannot be a parameter): such a statement is a template, and only
  `Statement.format(...)` of it can be run.

A load reads several files (the SQL both dialects share, then the dialect's own): a name
defined twice is an error, so every statement has exactly one definition.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

__all__ = ["Statement", "Statements", "load_statements"]

_HEADER = re.compile(r"^--\s*(name|fragment):\s*([a-z_][a-z0-9_]*)\s*$")
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


@dataclass(frozen=True, slots=True)
class Statement:
    """One named statement: its text as the driver takes it, and its parameters in order."""

    name: str
    purpose: str
    text: str
    params: tuple[str, ...]  # numbered: the name of $1, $2, ...; otherwise the names used
    numbered: bool
    placeholders: frozenset[str] = frozenset()  # identifiers still to fill in (a template)

    def args(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The values for $1..$n, from a dict by parameter name (numbered statements)."""
        return tuple(values[name] for name in self.params)

    def format(self, **identifiers: str) -> Statement:
        """This template with its `{placeholders}` filled in; the caller quotes identifiers."""
        return _compile(self.name, self.purpose, self.fill(**identifiers), numbered=self.numbered)

    def fill(self, **identifiers: str) -> str:
        """The template's text with its `{placeholders}` filled in and its parameters still
        `:named`: a part for another template (the due-scan's branches)."""
        missing = self.placeholders - identifiers.keys()
        if missing:
            raise KeyError(f"statement {self.name!r} needs {', '.join(sorted(missing))}")
        return _PLACEHOLDER.sub(lambda m: identifiers[m.group(1)], self.text)


class Statements(Mapping[str, Statement]):
    """The statements of one backend, by name; also as attributes (`SQL.claim`)."""

    def __init__(self, statements: Mapping[str, Statement]) -> None:
        self._by_name = dict(statements)

    def __getitem__(self, name: str) -> Statement:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __getattr__(self, name: str) -> Statement:
        try:
            return self._by_name[name]
        except KeyError:
            raise AttributeError(f"no SQL statement named {name!r}") from None


@dataclass(frozen=True, slots=True)
class _Block:
    kind: str  # "name" or "fragment"
    name: str
    purpose: str
    body: str
    source: str


def load_statements(*names: str, numbered: bool) -> Statements:
    """Load `tickwork/store/sql/<name>.sql` files, in order, into one set of statements."""
    blocks: list[_Block] = []
    for name in names:
        text = files("tickwork.store.sql").joinpath(f"{name}.sql").read_text(encoding="utf-8")
        blocks.extend(_blocks(text, f"{name}.sql"))
    return _build(blocks, numbered=numbered)


def _build(blocks: Iterable[_Block], *, numbered: bool) -> Statements:
    fragments: dict[str, str] = {}
    defined: dict[str, str] = {}
    pending: list[_Block] = []
    for block in blocks:
        if block.name in defined:
            raise ValueError(
                f"SQL {block.kind} {block.name!r} in {block.source} is already defined in "
                f"{defined[block.name]}: give each statement one definition"
            )
        defined[block.name] = block.source
        if block.kind == "fragment":
            fragments[block.name] = block.body
        else:
            pending.append(block)
    statements = {}
    for block in pending:
        text = _expand(block.body, fragments)
        statements[block.name] = _compile(block.name, block.purpose, text, numbered=numbered)
    return Statements(statements)


def _expand(text: str, fragments: Mapping[str, str], depth: int = 0) -> str:
    """Include fragments (which may include fragments); other {names} stay for `format`."""
    if depth > 5:
        raise ValueError("SQL fragments include each other in a loop")
    expanded = _PLACEHOLDER.sub(lambda m: fragments.get(m.group(1), m.group(0)), text)
    return expanded if expanded == text else _expand(expanded, fragments, depth + 1)


def _compile(name: str, purpose: str, text: str, *, numbered: bool) -> Statement:
    placeholders = frozenset(_PLACEHOLDER.findall(text))
    if placeholders or not numbered:
        params = tuple(dict.fromkeys(_PARAM.findall(text)))
        return Statement(name, purpose, text, params, numbered, placeholders)
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        param = match.group(1)
        if param not in order:
            order.append(param)
        return f"${order.index(param) + 1}"

    return Statement(name, purpose, _PARAM.sub(number, text), tuple(order), numbered)


def _blocks(text: str, source: str) -> Iterator[_Block]:
    header: tuple[str, str] | None = None
    purpose: str | None = None
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        found = _HEADER.match(line.strip())
        if found:
            if header is not None:
                yield _finish(header, purpose, body, source)
            header, purpose, body = (found.group(1), found.group(2)), None, []
            continue
        comment = line.strip().startswith("--")
        if header is None:
            if line.strip() and not comment:
                raise ValueError(f"{source}:{number}: SQL outside a `-- name:` block")
            continue
        if comment:
            if purpose is None and not body:
                purpose = line.strip().removeprefix("--").strip()
            continue  # comments are for readers of the file, not for the server
        body.append(line)
    if header is not None:
        yield _finish(header, purpose, body, source)


def _finish(header: tuple[str, str], purpose: str | None, body: list[str], source: str) -> _Block:
    kind, name = header
    text = "\n".join(body).strip().removesuffix(";").strip()
    if kind == "name" and not purpose:
        raise ValueError(f"{source}: statement {name!r} has no one-line purpose under its name")
    if not text:
        raise ValueError(f"{source}: {kind} {name!r} is empty")
    return _Block(kind, name, purpose or "", text, source)
