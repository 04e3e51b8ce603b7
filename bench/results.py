"""Raw results: one JSON line per measurement in bench/results/<bench>.jsonl (git-ignored)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def append(bench: str, record: dict[str, Any]) -> None:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    with open(RESULTS_DIR / f"{bench}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def last(bench: str, *, quick: bool) -> dict[str, Any] | None:
    """The latest recorded section of `bench` run in the same mode (quick or full), if any."""
    path = RESULTS_DIR / f"{bench}.jsonl"
    if not path.exists():
        return None
    found = None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") == "section" and record.get("quick") == quick:
            found = record
    return found
