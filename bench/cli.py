"""`python -m bench`: run the benchmarks, print a summary, write docs/benchmarks.md.

Options:
    --quick              a smoke run (5 s windows, a 50,000-row table); writes
                         bench/results/benchmarks-quick.md instead of docs/benchmarks.md
    --only lateness|claim|e2e
    --pg-dsn DSN         admin DSN of the PostgreSQL server to create throwaway databases on
    --profile            add one cProfile'd tickwork claim pass to the report
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import claim, e2e, lateness, machine, report, results
from bench.env import Env
from bench.pgutil import Admin, attribution_of

DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
DOC = machine.REPO / "docs" / "benchmarks.md"
QUICK_DOC = results.RESULTS_DIR / "benchmarks-quick.md"
STORES = ("sqlite", "postgresql")
COMMAND = "uv run python -m bench" + "".join(f" {a}" for a in sys.argv[1:])
# (variant, target kind): the aligned load also with the no-op Python task, which leaves only
# tickwork's own dispatch between the instant and each start (ADR 0027).
LATENESS_CASES = (("spread", "webhook"), ("aligned", "webhook"), ("aligned", "task"))
SECTIONS = ("lateness", "claim", "e2e")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--only", choices=SECTIONS)
    parser.add_argument("--pg-dsn", default=DEFAULT_PG_DSN, help="admin DSN (default: %(default)s)")
    parser.add_argument("--profile", action="store_true", help="profile one tickwork claim pass")
    parser.add_argument("--doc", type=Path, help="where to write the report")
    parser.add_argument(
        "--render", action="store_true", help="only re-render the report from bench/results/"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.render:
        render_only(args)
        return
    try:
        asyncio.run(run(args))
    except KeyboardInterrupt:
        sys.exit(130)


async def run(args: argparse.Namespace) -> None:
    started, run_id = time.monotonic(), secrets.token_hex(3)
    date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    admin = Admin(args.pg_dsn, run_id)
    await admin.open()
    sections: dict[str, Any] = {}
    try:
        facts = machine.facts() | {"postgres": await admin.server_facts()}
        with tempfile.TemporaryDirectory(prefix="tw-bench-") as tmp:
            env = Env(run_id=run_id, quick=args.quick, tmp=Path(tmp), admin=admin,
                      attribution=await attribution_of(admin))  # fmt: skip
            meta = {"run_id": run_id, "date": date, "quick": args.quick, "facts": facts,
                    "command": COMMAND}  # fmt: skip
            if args.only in (None, "lateness"):
                sections["lateness"] = await _lateness(env) | meta
                results.append("lateness", {"kind": "section", **sections["lateness"]})
            if args.only in (None, "claim"):
                sections["claim"] = await claim.run(env, _claim_config(args)) | meta
                results.append("claim", {"kind": "section", **sections["claim"]})
            if args.only in (None, "e2e"):
                sections["e2e"] = await e2e.run(env, _e2e_config(args)) | meta
                results.append("e2e", {"kind": "section", **sections["e2e"]})
    finally:
        await admin.close()
    doc = args.doc or (QUICK_DOC if args.quick else DOC)
    write_report(args, sections, facts, date, run_id, time.monotonic() - started, doc)
    broken = errors_in(sections)
    if args.quick and broken:  # the smoke run (CI): a case that broke fails it, a slow one not
        sys.exit("cases failed: " + "; ".join(broken))


def errors_in(found: Any) -> list[str]:
    """Every case's error in a section tree (a full run reports them and goes on)."""
    if isinstance(found, dict):
        own = [str(found["error"])] if "error" in found else []
        return own + [e for value in found.values() for e in errors_in(value)]
    if isinstance(found, list):
        return [e for value in found for e in errors_in(value)]
    return []


def _claim_config(args: argparse.Namespace) -> claim.ClaimConfig:
    if args.quick:
        return claim.ClaimConfig.quick(profile=args.profile)
    return claim.ClaimConfig(profile=args.profile)


def _e2e_config(args: argparse.Namespace) -> e2e.E2EConfig:
    return e2e.E2EConfig.quick() if args.quick else e2e.E2EConfig()


async def _lateness(env: Env) -> dict[str, Any]:
    cfg = lateness.LatenessConfig.quick() if env.quick else lateness.LatenessConfig()
    cases = []
    for store in STORES:
        for variant, kind in LATENESS_CASES:
            try:
                case = await lateness.run_case(env, replace(cfg, kind=kind), store, variant)
            except Exception as exc:  # one broken case must not lose the others
                case = {"store": store, "variant": variant, "kind": kind,
                        "error": f"{type(exc).__name__}: {exc}"}  # fmt: skip
            cases.append(case)
            print(_case_line(case), flush=True)
    return {"config": lateness.config_dict(cfg), "cases": cases}


def _case_line(case: dict[str, Any]) -> str:
    name = f"  lateness {case['store']:>10} {lateness.case_label(case):>7}:"
    if "error" in case:
        return f"{name} FAILED {case['error']}"
    lat = case["lateness_ms"]
    return (
        f"{name} p50 {lat.get('p50')} p99 {lat.get('p99')} max {lat.get('max')} ms, "
        f"{case['fires_recorded']}/{case['fires_expected']} fires, missing {case['missing']}, "
        f"tickwork {case['cpu']['cores'].get('tickwork', 0)} cores, "
        f"foreign {case['cpu']['foreign_cores']}"
    )


def render_only(args: argparse.Namespace) -> None:
    """Rewrite the report from the latest recorded sections, measuring nothing."""
    sections = {n: results.last(n, quick=args.quick) for n in SECTIONS}
    found = [s for s in sections.values() if s]
    if not found:
        sys.exit("no recorded results in bench/results/: run the benchmark first")
    latest = max(found, key=lambda s: s["date"])
    doc = args.doc or (QUICK_DOC if args.quick else DOC)
    data = {
        "command": latest.get("command", COMMAND),
        "date": latest["date"],
        "duration_s": latest.get("duration_s"),
        "run_id": latest["run_id"],
        "quick": args.quick,
        "facts": latest["facts"],
        **sections,
    }
    _write(doc, data)


def write_report(
    args: argparse.Namespace, sections: dict[str, Any], facts: dict[str, Any], date: str,
    run_id: str, duration_s: float, doc: Path,
) -> None:  # fmt: skip
    for name in SECTIONS:
        if name not in sections:  # --only: keep the latest figures of the other section
            sections[name] = results.last(name, quick=args.quick)
    data = {"command": COMMAND, "date": date, "run_id": run_id, "quick": args.quick,
            "duration_s": duration_s, "facts": facts, **sections}  # fmt: skip
    _write(doc, data)


def _write(doc: Path, data: dict[str, Any]) -> None:
    doc.parent.mkdir(parents=True, exist_ok=True)
    kept = doc.read_text(encoding="utf-8") if doc.exists() else ""
    doc.write_text(report.render(data, kept), encoding="utf-8")
    print(f"\nwrote {doc}")
    print("\n".join(line for line in report.targets(data) if line.startswith("| ")))
