"""Same-run ratios, and this report's against the previous one's.

Wall times on this machine move by 2x between days, so no benchmark figure is a regression gate.
What can be compared from one report to the next is a ratio measured inside one run: tickwork's
fires/s as a share of the bare-SQL ceiling burst just before it, its claim rate as a share of
the bare claim statement. `same_run_ratios` picks those out of a run; the report stores them in
an HTML comment of docs/benchmarks.md (`embed`), and the next report reads them back from the
file it replaces (`embedded`) and prints both side by side (`comparison`).
"""

from __future__ import annotations

import json
from typing import Any

MARK = "<!-- same-run ratios (bench/ratios.py): "
END = " -->"
QUEUE_NAMES = {"table": "table queue", "nats": "NATS"}


def same_run_ratios(run: dict[str, Any]) -> dict[str, float]:
    """Each ratio of the run, in % (name -> value); cases that failed are left out."""
    found: dict[str, float] = {}
    e2e = run.get("e2e") or {}
    for key, kind in (("task_burst", "task burst"), ("burst", "webhook burst")):
        for case in e2e.get(key, []):
            if "error" in case or case.get("missing"):
                continue
            where = f"{kind}, {QUEUE_NAMES.get(case['queue'], case['queue'])}"
            for ceiling, name in (("ceiling", "bare SQL"), ("webhook_ceiling", "bare SQL + HTTP")):
                bare = _rate(case.get(ceiling))
                if bare:
                    pct = 100 * case["fires_per_s"] / bare
                    found[f"{where}: tickwork / {name}"] = round(pct, 1)
    for ramp in e2e.get("sustained", []):
        bare = _rate(ramp.get("webhook_ceiling"))
        if bare and "error" not in ramp:
            where = f"sustained webhooks, {QUEUE_NAMES.get(ramp['queue'], ramp['queue'])}"
            found[f"{where}: best rate / bare SQL + HTTP"] = round(
                100 * ramp["best_rate"] / bare, 1
            )
    claim = run.get("claim") or {}
    for name in ("tickwork", "tickwork_cron"):
        for ceiling in ("bare_b", "bare_c"):
            pct = (claim.get(name) or {}).get(f"pct_of_{ceiling}")
            if pct is not None:
                found[f"claim + advance, {name}: / {ceiling}"] = float(pct)
    return found


def _rate(ceiling: dict[str, Any] | None) -> float | None:
    if not ceiling or "error" in ceiling:
        return None
    rate = ceiling.get("fires_per_s")
    return float(rate) if rate else None


def embed(date: str, ratios: dict[str, float], previous: dict[str, Any] | None) -> str:
    """The line the report carries its ratios in (invisible when the Markdown is rendered),
    with the previous report's, so that re-rendering the same run keeps the comparison."""
    record: dict[str, Any] = {"date": date, "ratios": ratios}
    if previous is not None:
        record["previous"] = {"date": previous.get("date"), "ratios": previous.get("ratios")}
    return MARK + json.dumps(record, sort_keys=True) + END


def previous_of(text: str, date: str) -> dict[str, Any] | None:
    """The report to compare a run of `date` with, from the text it replaces: that text's own
    ratios, or, when that text is this same run (re-rendered), the ones it compared with."""
    found = embedded(text)
    if found is not None and found.get("date") == date:
        earlier = found.get("previous")
        return earlier if isinstance(earlier, dict) else None
    return found


def embedded(text: str) -> dict[str, Any] | None:
    """The ratios a previous report carried, if it carried any (None for older reports)."""
    start = text.find(MARK)
    if start < 0:
        return None
    end = text.find(END, start + len(MARK))
    try:
        found = json.loads(text[start + len(MARK) : end])
    except ValueError:
        return None
    return found if isinstance(found, dict) and isinstance(found.get("ratios"), dict) else None


def comparison(now: dict[str, float], previous: dict[str, Any] | None) -> list[str]:
    """Markdown: this run's ratios beside the previous report's (the change in points)."""
    if not now:
        return []
    before: dict[str, float] = (previous or {}).get("ratios", {})
    when = (previous or {}).get("date", "no earlier report with ratios")
    rows = []
    for name, pct in now.items():
        old = before.get(name)
        change = "-" if old is None else f"{pct - old:+.1f}"
        was = "-" if old is None else f"{old:.1f} %"
        rows.append(f"| {name} | {pct:.1f} % | {was} | {change} |")
    return [
        "## Same-run ratios against the previous report",
        "",
        "The figures above move with the machine's speed on the day; these ratios, each measured "
        "inside one run, are what to compare between reports (no figure is a gate: see "
        f"bench/README.md). Previous report: {when}.",
        "",
        "| ratio | this run | previous report | change (points) |",
        "|---|---|---|---|",
        *rows,
        "",
    ]
