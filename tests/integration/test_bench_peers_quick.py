"""Smoke test of the peer suite (`python -m bench.peers --quick`): APScheduler and tickwork,
in the three scenarios (burst, precision, failover).

Slow (a venv install on first use, real processes): skipped unless TICKWORK_BENCH_SMOKE=1.
Needs the PostgreSQL server of `pg_admin_dsn`, `uv` on PATH and PyPI (or uv's cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.postgres,
    pytest.mark.skipif(
        os.environ.get("TICKWORK_BENCH_SMOKE") != "1", reason="set TICKWORK_BENCH_SMOKE=1"
    ),
]


@pytest.mark.timeout(480)
def test_quick_run_measures_tickwork_and_apscheduler(pg_admin_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    argv = [sys.executable, "-m", "bench.peers", "--quick", "--only", "apscheduler",
            "--peer-jobs", "100", "--precision-jobs", "20", "--precision-seconds", "3",
            "--no-plots", "--pg-dsn", pg_admin_dsn, "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=460)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    data = json.loads(out.read_text())
    cases = {(c["peer"], c["scenario"]): c for c in data["cases"]}

    tickwork_burst = cases[("tickwork", "burst")]
    assert "error" not in tickwork_burst, tickwork_burst
    assert tickwork_burst["fires_per_s"] > 0
    assert (tickwork_burst["missing"], tickwork_burst["duplicates"]) == (0, 0)
    tickwork_precision = cases[("tickwork", "precision")]
    assert tickwork_precision["duplicates"] == 0
    assert tickwork_precision["lateness_ms"]["n"] > 0

    # Scheduler and worker killed (SIGKILL) once 30 of the 100 one-shots ran, and started
    # again. 100 take milliseconds here, so the kill may land after the last: this checks that
    # the case runs (the kill, the restart, the count), not the recovery (the chaos tests do).
    tickwork_failover = cases[("tickwork", "failover")]
    assert "error" not in tickwork_failover, tickwork_failover
    assert tickwork_failover["ran_before_kill"] >= 30
    assert tickwork_failover["missing"] == 0
    assert tickwork_failover["restarted_ready_s"] > 0

    for scenario in ("burst", "precision", "failover"):
        peer: dict[str, Any] = cases[("apscheduler", scenario)]
        assert "error" not in peer, peer
        assert peer["lateness_ms"]["n"] > 0
    assert cases[("apscheduler", "failover")]["ran_before_kill"] >= 30
    assert cases[("bare_sql", "burst")]["fires_per_s"] > 0
    assert out.with_suffix(".md").read_text().count("| apscheduler |") == 3
