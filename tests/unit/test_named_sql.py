"""Named SQL: the loader's rules, and the statement files the stores run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tickwork.store.postgres import SQL as PG_SQL
from tickwork.store.sql.named import _blocks, _build
from tickwork.store.sqlite import SQL as SQLITE_SQL

SRC = Path(__file__).resolve().parents[2] / "src" / "tickwork"


def build(text: str, *, numbered: bool = True):  # type: ignore[no-untyped-def]
    return _build(_blocks(text, "test.sql"), numbered=numbered)


def test_parameters_are_numbered_in_order_of_first_use_and_args_follow_them() -> None:
    sql = build("-- name: s\n-- purpose\nSELECT :b, :a::bigint[], :b, 'x'::regclass\n")
    assert sql.s.text == "SELECT $1, $2::bigint[], $1, 'x'::regclass"
    assert sql.s.params == ("b", "a")
    assert sql.s.args({"a": 1, "b": 2, "unused": 3}) == (2, 1)


def test_sqlite_statements_keep_their_named_parameters() -> None:
    sql = build("-- name: s\n-- purpose\nSELECT :a FROM t WHERE b = :b\n", numbered=False)
    assert sql.s.text == "SELECT :a FROM t WHERE b = :b"
    assert sql.s.params == ("a", "b")


def test_fragments_expand_inside_statements_and_comments_are_not_sent() -> None:
    text = """
-- fragment: cols
-- the columns
a, b
-- name: s
-- Read them.
SELECT {cols}
-- a comment about :not_a_parameter
FROM t WHERE id = :id;
"""
    sql = build(text)
    assert sql.s.text == "SELECT a, b\nFROM t WHERE id = $1"
    assert sql.s.purpose == "Read them."
    assert "cols" not in sql  # fragments are not statements


def test_a_template_runs_only_once_its_identifiers_are_filled_in() -> None:
    sql = build("-- name: t\n-- purpose\nDROP TABLE {table} -- :x\nWHERE y = :y\n")
    template = sql.t
    assert template.placeholders == {"table"}
    with pytest.raises(KeyError, match="table"):
        template.format()
    filled = template.format(table='"d1"')
    assert filled.placeholders == frozenset()
    assert filled.text.startswith('DROP TABLE "d1"')
    assert filled.params == ("x", "y")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-- name: s\nSELECT 1\n", "no one-line purpose"),
        ("-- name: s\n-- p\nSELECT 1\n-- name: s\n-- p\nSELECT 2\n", "already defined"),
        ("SELECT 1\n", "outside"),
        ("-- name: s\n-- p\n", "empty"),
    ],
)
def test_malformed_files_fail_at_load(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        build(text)


def test_unknown_names_fail_loudly() -> None:
    with pytest.raises(AttributeError, match="no SQL statement named 'clam'"):
        PG_SQL.clam  # noqa: B018


@pytest.mark.parametrize(("dialect", "sql"), [("postgres", PG_SQL), ("sqlite", SQLITE_SQL)])
def test_every_statement_has_a_purpose_and_is_run_by_the_code(dialect: str, sql: object) -> None:
    """No dead SQL: each statement a dialect loads is named somewhere in the store code."""
    code = "\n".join(p.read_text() for p in (SRC / "store").rglob("*.py"))
    used = set(re.findall(r"\b(?:SQL|_sql)\.([a-z_]+)", code))
    statements = dict(sql)  # type: ignore[call-overload]
    assert all(s.purpose for s in statements.values())
    unused = sorted(set(statements) - used)
    assert unused == [], f"{dialect} loads statements no code runs: {unused}"


def test_the_claim_is_found_by_its_name() -> None:
    assert "FOR UPDATE OF j SKIP LOCKED" in PG_SQL.claim.text
    assert "INSERT INTO tw_runs" in PG_SQL.claim_hand_off.text
    assert "BEGIN" not in SQLITE_SQL.claim_job.text  # the store's transaction wraps it
