"""The peer run's outputs: the JSON of every figure, a Markdown table with ratios, a line per
case on stdout."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from bench.peers import analysis, plots, sustained
from bench.results import RESULTS_DIR

TICKWORK, BARE_SQL = "tickwork", "bare_sql"


def write(data: dict[str, Any], args: argparse.Namespace, plots_dir: Path | None) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    if plots_dir is not None:
        data["plots"] = plots.draw(data, plots_dir)
    out = args.out or RESULTS_DIR / f"peers-{data['run_id']}.json"
    out.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
    default_md = RESULTS_DIR / ("peers-quick.md" if data["quick"] else "peers.md")
    md = out.with_suffix(".md") if args.out else default_md
    md.write_text(markdown(data), encoding="utf-8")
    print(f"table: {md}", flush=True)
    return out


def _num(value: Any, digits: int = 1) -> str:
    if not isinstance(value, int | float) or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def _lat(case: dict[str, Any], key: str) -> Any:
    return (case.get("lateness_ms") or {}).get(key)


def _noise(case: dict[str, Any]) -> str:
    return _num((case.get("cpu") or {}).get("foreign_cores"), 2)


def case_line(case: dict[str, Any]) -> str:
    name = f"  {case['scenario']:>9} {case['peer']:<15}"
    if "error" in case:
        return f"{name} FAILED {case['error']}"
    if case["scenario"] == "failover":
        return (
            f"{name} N={case.get('jobs')}, killed after {case.get('ran_before_kill')} bodies: "
            f"next fire {case.get('next_fire_after_kill_s')} s after the kill, last "
            f"{case.get('last_fire_after_kill_s')} s; missing {case.get('missing')} dup "
            f"{case.get('duplicates')}, noise {_noise(case)}"
        )
    if case["scenario"] == "sustained":
        return (
            f"{name} {case.get('rate')}/s ({case.get('variant')}): p50 {_lat(case, 'p50')} "
            f"p99 {_lat(case, 'p99')} max {_lat(case, 'max')} ms, missed {case.get('missed')} "
            f"dup {case.get('duplicates')}: {'passed' if case.get('passed') else 'FAILED'}, "
            f"noise {_noise(case)}"
        )
    if case["scenario"] == "burst":
        return (
            f"{name} N={case.get('jobs')}: {_num(case.get('fires_per_s'))} fires/s, "
            f"completion {case.get('completion_s')} s, p50 {_lat(case, 'p50')} "
            f"p99 {_lat(case, 'p99')} max {_lat(case, 'max')} ms, missing "
            f"{case.get('missing')} dup {case.get('duplicates')}, noise {_noise(case)}"
        )
    return (
        f"{name} {case.get('jobs')} jobs x {case.get('seconds')} s ({case.get('variant')}): "
        f"p50 {_lat(case, 'p50')} p99 {_lat(case, 'p99')} max {_lat(case, 'max')} ms, missed "
        f"{case.get('missed')} dup {case.get('duplicates')}, noise {_noise(case)}"
    )


def _find(cases: list[dict[str, Any]], peer: str, scenario: str, **match: Any) -> dict[str, Any]:
    for case in cases:
        wanted = case["peer"] == peer and case["scenario"] == scenario and "error" not in case
        if wanted and all(case.get(k) == v for k, v in match.items()):
            return case
    return {}


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}x"


def burst_rows(cases: list[dict[str, Any]], jobs: int) -> list[str]:
    mine = _find(cases, TICKWORK, "burst", jobs=jobs)
    rows = [
        "| contender | N | fires/s | drain s | T to last s | lateness p50 / p99 / max ms "
        "| missing | dup | tickwork fires/s ÷ this | this p99 ÷ tickwork p99 | noise cores |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for case in cases:
        if case["scenario"] != "burst" or case.get("jobs") != jobs:
            continue
        if "error" in case:
            rows.append(f"| {case['peer']} | {jobs:,} | {case['error'][:80]} |||||||||")
            continue
        drain = case.get("drain_s", case.get("drain_per_s") and None)
        versus = case["peer"] != TICKWORK
        fires = analysis.ratio(mine.get("fires_per_s"), case.get("fires_per_s"))
        p99 = analysis.ratio(_lat(case, "p99"), _lat(mine, "p99"))
        rows.append(
            f"| {case['peer']} | {jobs:,} | {_num(case.get('fires_per_s'))} | {_num(drain, 2)} "
            f"| {_num(case.get('completion_s'), 2)} | {_num(_lat(case, 'p50'))} / "
            f"{_num(_lat(case, 'p99'))} / {_num(_lat(case, 'max'))} | {case.get('missing')} "
            f"| {case.get('duplicates')} | {_ratio(fires) if versus else '1'} "
            f"| {_ratio(p99) if versus else '1'} | {_noise(case)} |"
        )
    return rows


def _not_ready(cases: list[dict[str, Any]], jobs: int) -> list[str]:
    """A contender whose processes started after T measured its start-up too: say so."""
    late = [c for c in cases if c["scenario"] == "burst" and c.get("jobs") == jobs
            and isinstance(c.get("ready_before_t_s"), int | float)
            and c["ready_before_t_s"] < 0]  # fmt: skip
    return [f"**{c['peer']} was not ready at T** (its processes were up "
            f"{-c['ready_before_t_s']} s after T): its row measures its start-up too; "
            "do not compare it." for c in late] + ([""] if late else [])  # fmt: skip


def precision_rows(cases: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| contender | variant | jobs | seconds | lateness p50 / p99 / max ms | missed | dup "
        "| this p99 ÷ tickwork p99 (same variant) | noise cores |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for case in cases:
        if case["scenario"] != "precision":
            continue
        if "error" in case:
            rows.append(f"| {case['peer']} | {case.get('variant')} | {case['error'][:80]} ||||||")
            continue
        mine = _find(cases, TICKWORK, "precision", variant=case.get("variant"))
        versus = case["peer"] != TICKWORK
        p99 = analysis.ratio(_lat(case, "p99"), _lat(mine, "p99"))
        rows.append(
            f"| {case['peer']} | {case.get('variant')} | {case.get('jobs')} "
            f"| {case.get('seconds')} | {_num(_lat(case, 'p50'))} / {_num(_lat(case, 'p99'))} / "
            f"{_num(_lat(case, 'max'))} | {case.get('missed')} | {case.get('duplicates')} "
            f"| {_ratio(p99) if versus else '1'} | {_noise(case)} |"
        )
    return rows


def sustained_rows(cases: list[dict[str, Any]]) -> list[str]:
    """One row per ramp: its highest passing rate, the step that ended it, and tickwork's
    highest rate in the same variant over this one's."""
    rows = [
        "| contender | variant | sustained fires/s (highest passing step) | ended at "
        "| its p99 ms / missed | tickwork's rate ÷ this | noise cores (last step) |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for peer, variant in sustained.contenders(cases):
        best = sustained.highest(cases, peer, variant)
        failed = sustained.first_failure(cases, peer, variant)
        mine = sustained.highest(cases, TICKWORK, variant)
        ended = f"{failed['rate']:,}/s" if failed else "the grid's top (all passed)"
        cause = (
            (
                failed.get("error", "")[:60]
                or f"{_num(_lat(failed, 'p99'))} / {_num(failed.get('missed'))}"
            )
            if failed
            else "-"
        )
        last = failed or (sustained.steps(cases, peer, variant) or [{}])[-1]
        versus = peer != TICKWORK
        rows.append(
            f"| {peer} | {variant} | {_num(best) if best else 'none'} | {ended} | {cause} "
            f"| {_ratio(analysis.ratio(mine, best)) if versus else '1'} | {_noise(last)} |"
        )  # fmt: skip
    return rows


def sustained_steps(cases: list[dict[str, Any]]) -> list[str]:
    """Every step of every ramp."""
    rows = [
        "| contender | variant | rate /s | lateness p50 / p99 / max ms | missed | dup | passed "
        "| noise cores |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for case in cases:
        if case["scenario"] != "sustained":
            continue
        figures = (case["error"][:80] if "error" in case else
                   f"{_num(_lat(case, 'p50'))} / {_num(_lat(case, 'p99'))} / "
                   f"{_num(_lat(case, 'max'))}")  # fmt: skip
        rows.append(
            f"| {case['peer']} | {case.get('variant')} | {_num(case.get('rate'))} | {figures} "
            f"| {_num(case.get('missed'))} | {_num(case.get('duplicates'))} "
            f"| {'yes' if case.get('passed') else 'no'} | {_noise(case)} |"
        )
    return rows


def failover_rows(cases: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| contender | N | bodies before the kill | kill to next fire s | kill to last fire s "
        "| missing | jobs run twice | executions beyond the first | noise cores |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for case in cases:
        if case["scenario"] != "failover":
            continue
        if "error" in case:
            rows.append(
                f"| {case['peer']} | {_num(case.get('jobs'))} | {case['error'][:80]} |||||||"
            )
            continue
        rows.append(
            f"| {case['peer']} | {_num(case.get('jobs'))} | {_num(case.get('ran_before_kill'))} "
            f"| {_num(case.get('next_fire_after_kill_s'), 2)} "
            f"| {_num(case.get('last_fire_after_kill_s'), 2)} | {case.get('missing')} "
            f"| {case.get('jobs_run_twice_or_more')} | {case.get('duplicates')} "
            f"| {_noise(case)} |"
        )
    return rows


def markdown(data: dict[str, Any]) -> str:
    facts, cfg, cases = data["facts"], data["config"], data["cases"]
    lines = [
        f"# tickwork and its peers: run {data['run_id']} ({data['date']})",
        "",
        f"`{data['command']}`{' (quick mode: not figures to quote)' if data['quick'] else ''}. "
        f"Machine: {facts.get('cores')} cores, {facts.get('cpu_model')}, {facts.get('mem_gib')} "
        f"GiB; PostgreSQL {facts.get('postgres', {}).get('version')}; tickwork "
        f"{facts.get('git')}. Noise at start: {data['noise_at_start'].get('foreign_cores')} "
        f"foreign cores. Duration {data.get('duration_s')} s.",
        "",
        "Only ratios measured in this run count: the machine's speed moves between runs.",
        "",
    ]
    if "burst" in cfg["scenarios"]:
        for jobs in sorted({c.get("jobs") for c in cases if c["scenario"] == "burst"}):
            lines += [f"## Burst: {jobs:,} one-shots due at one instant T", ""]
            lines += [*burst_rows(cases, jobs), ""]
            share = analysis.ratio(
                _find(cases, TICKWORK, "burst", jobs=jobs).get("fires_per_s"),
                _find(cases, BARE_SQL, "burst", jobs=jobs).get("fires_per_s"),
            )
            lines += [f"tickwork at N={jobs:,}: {_ratio(share)} of its bare-SQL ceiling's "
                      "fires/s (row bare_sql, the same N).", ""]  # fmt: skip
            lines += _not_ready(cases, jobs)
    if "precision" in cfg["scenarios"]:
        title = (f"## Precision: every-second jobs, {cfg['precision_seconds']} s measured "
                 f"after {cfg['precision_warmup_s']} s")  # fmt: skip
        lines += [title, "", *precision_rows(cases), ""]
    if "sustained" in cfg["scenarios"]:
        lines += [f"## Sustained: every-second jobs at rising rates, {cfg['sustained_seconds']} s "
                  f"measured per step; a step passes with p99 < {cfg['sustained_pass_p99_ms']:,.0f}"
                  " ms and nothing missed", "", *sustained_rows(cases), "",
                  "Rates tried, in order, each ramp stopping at its first failure: "
                  f"{', '.join(f'{r:,}' for r in cfg['sustained_rates'])}. The true limit lies "
                  "between the highest passing step and the next. tickwork runs the no-op Python "
                  "task (`tickwork up`, PostgreSQL) in each variant a peer needs.", "",
                  *sustained_steps(cases), ""]  # fmt: skip
    if "failover" in cfg["scenarios"]:
        lines += ["## Failover: the burst, its scheduling processes killed (SIGKILL) after 30 % "
                  "of it ran, started again at once", "", *failover_rows(cases), "",
                  "Missing: never ran within the recovery window after the kill. tickwork "
                  "executes at least once: a body whose outcome the killed worker had not "
                  "written yet runs again, with the same idempotency key.", ""]  # fmt: skip
    lines += ["## Configurations", ""]
    for name, install in data.get("installs", {}).items():
        fair = next((c.get("fair") for c in cases if c["peer"] == name and c.get("fair")), "")
        lines.append(f"- **{name}** ({', '.join(install['packages'])}; venv "
                     f"{install['status']}): {fair}")  # fmt: skip
    lines.append(
        "- **tickwork**: burst = `bench/e2e.py`'s task burst (api, scheduler and worker "
        "processes, table queue, default settings, the no-op task writing the same body log); "
        "precision = `bench/lateness.py` on PostgreSQL (`tickwork up`, webhook jobs to a "
        "receiver process; lateness = the executor's start - the scheduled instant); "
        "bare_sql = `bench/raw_fire_loop.py`, the fire loop in bare SQL."
    )
    if data.get("plots"):
        lines += ["", "Plots: " + ", ".join(f"`{p}`" for p in data["plots"])]
    return "\n".join(lines) + "\n"
