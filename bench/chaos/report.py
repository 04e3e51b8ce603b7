"""The one-screen report of a chaos run, and its JSON form (kept next to the run's logs)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict
from typing import Any

from bench.chaos.run import RunResult
from bench.chaos.verdict import STEADY_P99_MS, Verdict


def render(result: RunResult) -> str:
    v = result.verdict
    c = result.config
    mode = "short" if c.short else "long"
    lines = [
        f"== chaos: queue={c.queue} seed={c.seed} mode={mode} window={c.duration_s:.0f}s"
        f" lease_ttl={c.lease_ttl_ms}ms wall={result.wall_s:.0f}s",
        f"   scheduler-1 clock skew: {c.skew_s:+.1f}s; database disk:"
        f" {f'{c.disk_mb} MB tmpfs' if c.disk_mb else 'the machine disk'}",
        f"   {result.jobs} jobs, {v.expected} expected occurrences, {v.deliveries} deliveries,"
        f" {len(result.windows)} faults injected ({len(result.skipped)} skipped)",
        f"   runs in the ledger: {_statuses(result.run_statuses)}",
        "",
        "invariants",
        _check("lost occurrences", len(v.lost), v.lost[:5]),
        _check("early deliveries", len(v.early), [f"{k} ({ms:.1f} ms)" for k, ms in v.early[:5]]),
        _check("keys with >1 success in history", len(v.duplicate_effect), v.duplicate_effect[:5]),
        _check("unexpected deliveries", len(v.unexpected), v.unexpected[:5]),
        _check("bad signatures", v.bad_signatures, []),
        _check(
            "unexplained duplicate deliveries",
            len(v.unexplained_duplicates),
            v.unexplained_duplicates[:5],
        ),
        _check("runs whose queue row disagrees", len(v.queue_mismatches), v.queue_mismatches[:5]),
        f"  info  raw duplicate deliveries (all explained by faults): {v.raw_duplicates}",
        "",
        "delays (first delivery minus scheduled instant)",
        f"  {'ok ' if v.steady_ok else 'MISS'}  steady state: n={v.steady.count}"
        f" p50={v.steady.p50_ms:.1f}ms p99={v.steady.p99_ms:.1f}ms max={v.steady.max_ms:.1f}ms"
        f"  (target p99 < {STEADY_P99_MS:.0f}ms)",
    ]
    lines += _impacts(v)
    verdict = "PASS" if v.invariants_ok else "FAIL"
    targets = "met" if v.targets_ok else "NOT met"
    lines += ["", f"verdict: {verdict} (invariants); delay targets {targets}"]
    return "\n".join(lines)


def _statuses(statuses: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(statuses.items())) or "none"


def _check(label: str, count: int, examples: list[str]) -> str:
    mark = "ok  " if count == 0 else "FAIL"
    tail = f"  e.g. {', '.join(examples)}" if examples else ""
    return f"  {mark}  {label}: {count}{tail}"


def _impacts(v: Verdict) -> list[str]:
    by_kind: dict[str, list[Any]] = defaultdict(list)
    for impact in v.impacts:
        by_kind[impact.fault.kind].append(impact)
    out = []
    for kind, impacts in sorted(by_kind.items()):
        worst = max(impacts, key=lambda i: i.max_delay_ms)
        bound = worst.bound_ms
        ok = all(i.within_bound for i in impacts)
        mark = "ok  " if ok else "MISS"
        limit = f"  (target < {bound:.0f}ms)" if bound is not None else ""
        affected = sum(i.affected for i in impacts)
        out.append(
            f"  {mark}  after {kind} x{len(impacts)}: max {worst.max_delay_ms:.0f}ms"
            f" over {affected} occurrences{limit}"
        )
    return out


def to_json(result: RunResult) -> dict[str, Any]:
    v = result.verdict
    return {
        "queue": result.config.queue,
        "seed": result.config.seed,
        "short": result.config.short,
        "window_s": result.config.duration_s,
        "lease_ttl_ms": result.config.lease_ttl_ms,
        "skew_s": result.config.skew_s,
        "disk_mb": result.config.disk_mb,
        "jobs": result.jobs,
        "expected": v.expected,
        "delivered": v.delivered,
        "deliveries": v.deliveries,
        "lost": len(v.lost),
        "early": len(v.early),
        "duplicate_effect": len(v.duplicate_effect),
        "unexpected": len(v.unexpected),
        "bad_signatures": v.bad_signatures,
        "raw_duplicates": v.raw_duplicates,
        "unexplained_duplicates": len(v.unexplained_duplicates),
        "steady": asdict(v.steady),
        "impacts": [
            {
                "kind": i.fault.kind,
                "target": i.fault.target,
                "lasted_ms": (i.fault.end_us - i.fault.start_us) / 1000,
                "affected": i.affected,
                "max_delay_ms": i.max_delay_ms,
                "bound_ms": i.bound_ms,
            }
            for i in v.impacts
        ],
        "run_statuses": result.run_statuses,
        "restarts": result.restarts,
        "invariants_ok": v.invariants_ok,
        "targets_ok": v.targets_ok,
        "wall_s": result.wall_s,
    }
