"""What every benchmark of one run shares: run id, temp dir, the admin connection, the meter."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.meter import Attribution
from bench.pgutil import Admin


@dataclass
class Env:
    run_id: str
    quick: bool
    tmp: Path
    admin: Admin
    attribution: Attribution
