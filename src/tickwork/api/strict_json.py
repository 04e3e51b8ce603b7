"""Request bodies read as strict JSON, before FastAPI parses them.

Python's `json.loads` is lenient where tickwork must not be:

* it reads `NaN`, `Infinity` and `-Infinity` (not JSON) and turns `1e999` into infinity; all
  of them came back from the store as `null`;
* it keeps the last of two equal keys, so `{"cron": "...", "cron": "..."}` meant whichever
  came second, silently;
* it reads `"\\u0000"` (NUL) and lone surrogates such as `"\\ud800"` into strings that
  PostgreSQL refuses (a 503 with the driver's words) and SQLite stores;
* a 5,000-digit integer raises a ValueError about int conversion, and bytes that are not
  UTF-8 a UnicodeDecodeError: FastAPI answered both "is it nested too deeply?".

`check_json_body` parses the body once with hooks that mark such values, then walks the result
and reports the first one with its dotted path (`target.body.items.2`), the same kind of path
the API's other errors name. Nothing is kept: FastAPI parses the accepted body as usual, and
for a body that passed this check its parse gives exactly the same values.

`bad_character` is the rule for every piece of text the API takes (query and path parameters
too, see `routes._clean_parameters`): no NUL and no lone surrogate.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

MAX_INT_DIGITS: Final = 1000  # no honest count or id is longer; int() of 4300+ digits raises
_BAD_CHARACTER = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True, kw_only=True, slots=True)
class BodyProblem:
    """Why a body is refused: the answer's status, code, message and field."""

    status: int
    code: str
    message: str
    field: str | None = None


def bad_character(text: str) -> str | None:
    """What is wrong with `text` (a NUL or a lone surrogate), or None if nothing."""
    found = _BAD_CHARACTER.search(text)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "contains a NUL character (U+0000), which tickwork does not accept in any text"
    return (
        f"contains a lone surrogate (U+{ord(char):04X}), which is not a Unicode character;"
        " send the text as valid UTF-8 (an escaped surrogate must come as a pair)"
    )


class _Object(dict[str, Any]):
    """A JSON object that remembers the first key it saw twice."""

    __slots__ = ("duplicate",)

    duplicate: str | None


@dataclass(frozen=True, slots=True)
class _Refused:
    """A number json.loads would have read wrongly, kept as written."""

    text: str
    why: str


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    obj.duplicate = None
    for key, value in pairs:
        if key in obj and obj.duplicate is None:
            obj.duplicate = key
        obj[key] = value
    return obj


def _constant(text: str) -> _Refused:
    return _Refused(
        text, f"{text} is not a JSON number (JSON has no NaN or Infinity); send a finite number"
    )


def _float(text: str) -> float | _Refused:
    value = float(text)
    if math.isfinite(value):
        return value
    shown = _short(text)
    return _Refused(
        shown, f"{shown} is out of range (it overflows to infinity); send a finite number"
    )


def _int(text: str) -> int | _Refused:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        return _Refused(
            _short(text),
            f"the integer has {digits} digits; at most {MAX_INT_DIGITS} are accepted"
            " (send a longer number as a string)",
        )
    return int(text)


def _short(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:10]}...{text[-10:]}"


def check_json_body(raw: bytes) -> BodyProblem | None:
    """None if `raw` is strict JSON, else the first problem (400: unreadable; 422: a value)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start]
        return BodyProblem(
            status=400,
            code="malformed_json",
            message=f"the body is not valid JSON: it is not UTF-8 (byte 0x{byte:02x} at offset"
            f" {exc.start}); send JSON encoded as UTF-8",
        )
    try:
        value = json.loads(
            text,
            object_pairs_hook=_object,
            parse_constant=_constant,
            parse_float=_float,
            parse_int=_int,
        )
    except json.JSONDecodeError as exc:
        return BodyProblem(
            status=400,
            code="malformed_json",
            message=f"the body is not valid JSON: {exc.msg} at character {exc.pos}",
        )
    except RecursionError:
        return BodyProblem(
            status=400,
            code="malformed_json",
            message="the body is nested too deeply to parse; flatten it",
        )
    except ValueError as exc:  # no known input gets here; say what the parser said
        return BodyProblem(
            status=400, code="malformed_json", message=f"the body is not valid JSON: {exc}"
        )
    return _first_problem(value)


def _first_problem(root: Any) -> BodyProblem | None:
    # Iterative, depth first in document order: a body nested as deep as the parser allows
    # must not overflow the stack here either.
    stack: list[tuple[Any, tuple[str, ...]]] = [(root, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, _Refused):
            return _invalid(path, "invalid_number", value.why)
        if isinstance(value, str):
            bad = bad_character(value)
            if bad is not None:
                return _invalid(path, "invalid_character", f"the text {bad}")
        elif isinstance(value, _Object):
            problem = _object_problem(value, path)
            if problem is not None:
                return problem
            stack.extend((v, (*path, k)) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((v, (*path, str(i))) for i, v in reversed(list(enumerate(value))))
    return None


def _object_problem(obj: _Object, path: tuple[str, ...]) -> BodyProblem | None:
    if obj.duplicate is not None:
        where = f" in {'.'.join(path)}" if path else ""
        message = f"the key {obj.duplicate!r} appears more than once{where}; send each key once"
        return _invalid((*path, obj.duplicate), "duplicate_key", message)
    for key in obj:
        problem = bad_character(key)
        if problem is not None:
            return _invalid((*path, key), "invalid_character", f"the key {problem}")
    return None


def _escaped(key: str) -> str:
    """The key with each NUL or lone surrogate written as a JSON escape (\\u0000)."""
    return _BAD_CHARACTER.sub(lambda m: f"\\u{ord(m.group()):04x}", key)


def _invalid(path: tuple[str, ...], code: str, message: str) -> BodyProblem:
    field = ".".join(_escaped(part) for part in path) or None
    return BodyProblem(status=422, code=code, message=message, field=field)


def is_json_media_type(content_type: str) -> bool:
    """What FastAPI parses as JSON: application/json and application/*+json."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


__all__ = [
    "MAX_INT_DIGITS",
    "BodyProblem",
    "bad_character",
    "check_json_body",
    "is_json_media_type",
]
