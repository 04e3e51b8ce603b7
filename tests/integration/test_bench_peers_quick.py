"""Smoke test of the peer suite (`python -m bench.peers --quick`): APScheduler and tickwork,
in the four scenarios (burst, precision, sustained, failover).

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


@pytest.mark.timeout(600)
def test_quick_run_measures_tickwork_and_apscheduler(pg_admin_dsn: str, tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    argv = [sys.executable, "-m", "bench.peers", "--quick", "--only", "apscheduler",
            "--peer-jobs", "100", "--precision-jobs", "20", "--precision-seconds", "3",
            "--sustained-rates", "10,20", "--sustained-seconds", "2",
            "--no-plots", "--pg-dsn", pg_admin_dsn, "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=580)
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

    # The sustained ramp: 10 then 20 every-second jobs, each contender in APScheduler's variant.
    # 10 no-op tasks a second are far below tickwork's limit: its first step passes. The peer's
    # steps must have run and been judged (whether they passed is the figure, not the test).
    ramps = [c for c in data["cases"] if c["scenario"] == "sustained"]
    mine = [c for c in ramps if c["peer"] == "tickwork"]
    assert [c["variant"] for c in mine] == ["spread"] * len(mine)
    assert mine[0]["rate"] == 10
    assert mine[0]["passed"], mine[0]
    theirs = [c for c in ramps if c["peer"] == "apscheduler"]
    assert theirs
    assert "error" not in theirs[0], theirs
    assert theirs[0]["rate"] == 10
    assert theirs[0]["lateness_ms"]["n"] > 0
    md = out.with_suffix(".md").read_text()
    # burst, precision, failover, the sustained summary, and one line per sustained step
    assert md.count("| apscheduler |") == 4 + len(theirs)
