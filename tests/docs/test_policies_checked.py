"""Every statement of docs/policies.md names the tests that would fail if it were false.

After each block of the guide that states behaviour (a paragraph, a list, a table or a code
block under a `##`/`###` heading) comes an HTML comment, invisible once rendered:

    <!-- checked: tests/contract/test_store_overlap.py::test_allow_runs_side_by_side -->

naming one or more tests (comma-separated, `path::function` or `path::Class::method`). A block
that states nothing (a pointer to another page) says so: `<!-- checked: n/a (why) -->`. The
guide's intro, before its first `##`, is exempt. The tests named are looked up in their files
with `ast`, never imported, so a renamed or deleted test breaks this check rather than silently
leaving a statement unchecked.

The checker is also fed made-up guides, so it cannot pass by finding nothing.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "docs" / "policies.md"

MARKER = re.compile(r"^<!--\s*checked:\s*(?P<body>.*?)\s*-->$", re.DOTALL)
NOT_APPLICABLE = re.compile(r"^n/a \(\S.*\)$", re.DOTALL)
TEST_REFERENCE = re.compile(r"^(?P<path>tests/[\w/]+\.py)::(?P<name>\w+(?:::\w+)?)$")
HEADING = re.compile(r"^(?P<level>#{1,6})\s+(?P<title>.+?)\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True, slots=True)
class Block:
    """One piece of a guide, separated from the next by a blank line (a code block is one
    piece whatever it contains)."""

    kind: str  # "heading", "marker", "code" or "text"
    line: int  # 1-based, where it starts
    text: str


def split_blocks(markdown: str) -> list[Block]:
    blocks: list[Block] = []
    lines = markdown.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
            continue
        start = index
        if FENCE.match(line):
            index += 1
            while index < len(lines) and not FENCE.match(lines[index]):
                index += 1
            index += 1  # the closing fence
            kind = "code"
        elif HEADING.match(line):
            index += 1
            kind = "heading"
        elif line.lstrip().startswith("<!--"):
            while index < len(lines) and "-->" not in lines[index]:
                index += 1
            index += 1
            kind = "marker"
        else:
            # A paragraph, a list or a table: up to a blank line, a heading, a fence or a
            # comment (a marker written right under its paragraph still counts as its own).
            index += 1
            while index < len(lines) and lines[index].strip():
                following = lines[index]
                if (
                    FENCE.match(following)
                    or HEADING.match(following)
                    or following.lstrip().startswith("<!--")
                ):
                    break
                index += 1
            kind = "text"
        blocks.append(Block(kind, start + 1, "\n".join(lines[start:index]).strip()))
    return blocks


@functools.cache
def functions_defined_in(path: Path) -> frozenset[str]:
    """`function` and `Class::method` names of the tests a file defines, read with ast."""
    names: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, functions):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.update(f"{node.name}::{m.name}" for m in node.body if isinstance(m, functions))
    return frozenset(names)


def marker_errors(body: str, where: str, section: str, subsection: str | None) -> list[str]:
    if NOT_APPLICABLE.match(body):
        return []
    errors: list[str] = []
    references = [r.strip() for r in body.split(",")]
    if not any(references):
        return [f"{where}: a marker must name tests, or say 'n/a (reason)'"]
    for reference in references:
        found = TEST_REFERENCE.match(reference)
        if found is None:
            errors.append(f"{where}: {reference!r} is not tests/<path>.py::<test>")
            continue
        path = ROOT / found["path"]
        if not found["name"].rsplit("::", 1)[-1].startswith("test"):
            errors.append(f"{where}: {reference!r} names a helper, not a test")
        elif not path.is_file():
            errors.append(f"{where}: {found['path']} does not exist")
        elif found["name"] not in functions_defined_in(path):
            errors.append(f"{where}: {found['path']} defines no {found['name']}")
    return errors


def check_guide(markdown: str, name: str = "docs/policies.md") -> list[str]:
    """Every problem with the guide's markers, as messages naming the line."""
    errors: list[str] = []
    section: str | None = None  # the current `##` heading; None in the intro
    subsection: str | None = None
    awaiting: Block | None = None  # a behaviour block still waiting for its marker
    for block in split_blocks(markdown):
        where = f"{name}:{block.line}"
        if block.kind == "marker":
            found = MARKER.match(block.text)
            if found is None:
                continue  # another kind of comment
            if section is None:
                errors.append(f"{where}: a marker in the intro, which needs none")
                continue
            errors += marker_errors(found["body"], where, section, subsection)
            awaiting = None
            continue
        if awaiting is not None:
            errors.append(f"{name}:{awaiting.line}: no '<!-- checked: ... -->' after this block")
            awaiting = None
        if block.kind == "heading":
            heading = HEADING.match(block.text)
            assert heading is not None
            level, title = len(heading["level"]), heading["title"]
            if level == 2:
                section, subsection = title, None
            elif level >= 3:
                subsection = title
        elif section is not None:
            awaiting = block
    if awaiting is not None:
        errors.append(f"{name}:{awaiting.line}: no '<!-- checked: ... -->' after this block")
    return errors


def test_every_statement_of_the_policies_guide_names_a_test_that_exists() -> None:
    assert check_guide(POLICIES.read_text(encoding="utf-8")) == []


# -- the checker itself, on made-up guides ---------------------------------------------------

EXISTING = "tests/docs/test_policies_checked.py::test_the_checker_accepts_a_guide_marked_throughout"


def test_the_checker_accepts_a_guide_marked_throughout() -> None:
    guide = f"""# Title

The intro needs no marker.

## Section

A statement.

<!-- checked: {EXISTING} -->

- a list
- of statements
<!-- checked: {EXISTING}, {EXISTING} -->

```
a timeline
```

<!-- checked: {EXISTING} -->

See [elsewhere](elsewhere.md).

<!-- checked: n/a (a pointer) -->
"""
    assert check_guide(guide) == []


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        ("A paragraph and nothing after it.\n", "no '<!-- checked"),
        ("```\na timeline\n```\n", "no '<!-- checked"),
        ("| a | table |\n|---|---|\n", "no '<!-- checked"),
        ("Text.\n\n<!-- checked: tests/nowhere.py::test_x -->\n", "does not exist"),
        (
            "Text.\n\n<!-- checked: tests/docs/test_policies_checked.py::test_gone -->\n",
            "defines no test_gone",
        ),
        ("Text.\n\n<!-- checked: test_x -->\n", "is not tests/"),
        (
            "Text.\n\n<!-- checked: tests/docs/test_policies_checked.py::check_guide -->\n",
            "names a helper, not a test",
        ),
        ("Text.\n\n<!-- checked: n/a -->\n", "is not tests/"),
        ("Text.\n\n<!-- checked: pending a rewrite -->\n", "is not tests/"),
    ],
)
def test_the_checker_finds_an_unmarked_or_wrongly_marked_block(body: str, complaint: str) -> None:
    guide = f"# T\n\nIntro.\n\n## Pause and resume\n\n{body}"
    errors = check_guide(guide)
    assert len(errors) == 1, errors
    assert complaint in errors[0]


def test_the_checker_finds_a_block_left_unmarked_before_a_marked_one() -> None:
    guide = f"# T\n\n## S\n\nFirst, unmarked.\n\nSecond.\n\n<!-- checked: {EXISTING} -->\n"
    assert check_guide(guide) == ["docs/policies.md:5: no '<!-- checked: ... -->' after this block"]


class TestMarkersNameMethods:
    def test_a_method_is_named_by_its_class_and_name(self) -> None:
        here = functions_defined_in(Path(__file__))
        assert "TestMarkersNameMethods::test_a_method_is_named_by_its_class_and_name" in here
        assert "test_a_method_is_named_by_its_class_and_name" not in here
        reference = f"{Path(__file__).relative_to(ROOT)}::TestMarkersNameMethods::test_nothing"
        [error] = marker_errors(reference, "here", "S", None)
        assert error.endswith("defines no TestMarkersNameMethods::test_nothing")
