"""What every peer harness shares (stdlib only: it runs inside each peer's own venv).

A harness is a script run by a peer venv's Python. Its job body records one line per
execution with `BodyLog.ran`; the host side (bench/peers) reads the file and computes every
figure the same way for every peer, tickwork included: lateness = ran - scheduled, fires/s,
duplicates (a key recorded twice), missing keys.

Line format, one per body execution: `<key> <scheduled epoch us> <ran epoch us>\n`, appended
with one os.write on an O_APPEND descriptor, so lines from threads and processes never
interleave and a kill -9 loses nothing already written.

The harness's last stdout line is one JSON object (`report`): its configuration (versions,
concurrency, pool sizes, polling) and anything the host cannot see in the body log.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


class BodyLog:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def ran(self, key: str, scheduled_s: float) -> None:
        """Record that the body of `key`, scheduled for `scheduled_s` (epoch seconds), runs now."""
        now_us = time.time_ns() // 1000
        os.write(self._fd, f"{key} {round(scheduled_s * 1e6)} {now_us}\n".encode())


def report(**fields: Any) -> None:
    """The harness's result line (the host reads the last line of stdout)."""
    sys.stdout.write(json.dumps(fields, default=str) + "\n")
    sys.stdout.flush()
