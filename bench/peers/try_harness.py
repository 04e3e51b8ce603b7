"""Run one PostgreSQL-family peer harness by hand and print its figures (no runner needed).

    uv run python -m bench.peers.try_harness procrastinate burst --jobs 10000 [-- EXTRA...]
    uv run python -m bench.peers.try_harness dbos precision --jobs 100 --seconds 60
    uv run python -m bench.peers.try_harness pg_cron precision --jobs 100 --seconds 180

Creates the peer's venv if missing (`uv venv` + `uv pip install`, under
~/.cache/tickwork-bench/peers/), a throwaway database `twpeer_<peer>_<hex>` on the shared server
when the peer needs one (dropped afterwards), runs the harness with a 300 s cap and prints
p50/p99/max lateness, fires/s, missing and duplicates from its body log, plus the uptime load
before and after (the noise). The analysis here is deliberately small and separate from the
runner's (bench/peers/analysis.py).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers.registry_pg import PG_PEERS

HARNESSES = Path(__file__).resolve().parent / "harnesses"
VENVS = Path.home() / ".cache" / "tickwork-bench" / "peers"
CAP_S = 300.0


@dataclass(frozen=True)
class Run:
    key: str
    scheduled_us: int
    ran_us: int


def parse_body_log(text: str) -> list[Run]:
    runs = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            runs.append(Run(parts[0], int(parts[1]), int(parts[2])))
    return runs


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def lateness_ms(runs: list[Run]) -> dict[str, float]:
    values = sorted((r.ran_us - r.scheduled_us) / 1000 for r in runs)
    return {
        "p50": round(percentile(values, 0.50), 1),
        "p99": round(percentile(values, 0.99), 1),
        "max": round(values[-1], 1) if values else float("nan"),
    }


def duplicates(runs: list[Run]) -> int:
    counts = Counter((r.key, r.scheduled_us) for r in runs)
    return sum(n - 1 for n in counts.values())


def burst_figures(runs: list[Run], t_s: float, jobs: int) -> dict[str, Any]:
    first: dict[str, Run] = {}
    for r in sorted(runs, key=lambda r: r.ran_us):
        first.setdefault(r.key, r)
    last_s = max((r.ran_us for r in first.values()), default=0) / 1e6
    first_s = min((r.ran_us for r in first.values()), default=0) / 1e6
    span = last_s - t_s
    return {
        "distinct": len(first),
        "missing": jobs - len(first),
        "duplicates": duplicates(runs),
        "first_after_t_s": round(first_s - t_s, 3),
        "last_after_t_s": round(span, 2),
        "fires_per_s": round(len(first) / span, 1) if span > 0 else None,
        "lateness_ms": lateness_ms(list(first.values())),
    }


def precision_figures(
    runs: list[Run], start_s: float, end_s: float, jobs: int, period_s: int = 1
) -> dict[str, Any]:
    inside = [r for r in runs if start_s * 1e6 <= r.scheduled_us < end_s * 1e6]
    seconds = round(end_s - start_s)
    expected = jobs * (seconds // period_s)
    # the window's last third alone shows whether the peer falls further behind over time
    last_third = [r for r in inside if r.scheduled_us >= (end_s - seconds / 3) * 1e6]
    return {
        "expected": expected,
        "ran": len(inside),
        "missed": expected - len({(r.key, r.scheduled_us) for r in inside}),
        "duplicates": duplicates(inside),
        "lateness_ms": lateness_ms(inside),
        "lateness_last_third_ms": lateness_ms(last_third),
    }


def figures(runs: list[Run], rep: dict[str, Any]) -> dict[str, Any]:
    if "t_s" in rep:
        return burst_figures(runs, float(rep["t_s"]), int(rep["jobs"]))
    if "window_start_s" in rep:
        start, end = float(rep["window_start_s"]), float(rep["window_end_s"])
        period = int(rep.get("period_s", 1))
        return precision_figures(runs, start, end, int(rep["jobs"]), period)
    return {}


def venv_python(peer: str) -> Path:
    spec = PG_PEERS[peer]
    venv = VENVS / str(spec["venv"])
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run(["uv", "venv", "-q", str(venv)], check=True)
        install = ["uv", "pip", "install", "-q", "--python", str(python), *spec["packages"]]
        subprocess.run(install, check=True)
    return python


def psql(admin_dsn: str, sql: str) -> None:
    subprocess.run(["psql", admin_dsn, "-qXc", sql], check=True, capture_output=True)


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> None:
    p = argparse.ArgumentParser(description="run one PostgreSQL-family peer harness")
    p.add_argument("peer", choices=sorted(PG_PEERS))
    p.add_argument("scenario")
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--seconds", type=int, default=60)
    p.add_argument("--warmup-s", type=float, default=5.0)
    p.add_argument("--admin-dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--out", default="bench/results/peers-pg.jsonl")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:cut])
    extra = argv[cut + 1 :]  # after --: passed to the harness as is
    spec = PG_PEERS[args.peer]
    python = venv_python(args.peer)
    work = Path(f"/tmp/twpeer-{args.peer}-{args.scenario}-{secrets.token_hex(3)}")
    work.mkdir(parents=True)
    body_log = work / "body.log"
    command = [str(python), str(HARNESSES / spec["harness"]), "--scenario", args.scenario,
            "--jobs", str(args.jobs), "--seconds", str(args.seconds),
            "--warmup-s", str(args.warmup_s), "--body-log", str(body_log),
            "--work-dir", str(work), "--budget-s", str(CAP_S - 10),
            *spec["extra_args"]]  # fmt: skip
    db = None
    if spec["postgres"]:
        db = f"twpeer_{args.peer}_{secrets.token_hex(4)}"
        psql(args.admin_dsn, f'CREATE DATABASE "{db}"')
        command += ["--pg-dsn", args.admin_dsn.rsplit("/", 1)[0] + "/" + db]
    command += extra
    load_before, started = load(), time.time()
    env = {**os.environ, "PYTHONPATH": str(HARNESSES)}
    try:
        proc = subprocess.run(command, env=env, cwd=work, capture_output=True, text=True,
                              timeout=CAP_S)  # fmt: skip
    except subprocess.TimeoutExpired as e:  # run() has killed it; say what it printed
        sys.stderr.write(str(e.stderr or "")[-4000:])
        raise SystemExit(f"harness overstayed {CAP_S} s and was killed") from None
    finally:
        if db is not None:
            psql(args.admin_dsn, f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if not lines:  # no report line at all; a report with an error still gets its figures
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"harness failed (exit {proc.returncode})")
    rep = json.loads(lines[-1])
    runs = parse_body_log(body_log.read_text())
    result = {
        "peer": args.peer,
        "scenario": args.scenario,
        "at_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
        "wall_s": round(time.time() - started, 1),
        "exit_code": proc.returncode,
        "load_before": load_before,
        "load_after": load(),
        "figures": figures(runs, rep),
        "harness": rep,
    }
    print(json.dumps(result, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "a") as f:
        f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
