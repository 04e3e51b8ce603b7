"""PNG plots of a peer run (matplotlib, from the `bench` dependency group; skipped without it):
the burst's lateness distribution per contender and its fires over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.machine import REPO

DIR = REPO / "docs" / "img"


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def draw(data: dict[str, Any], where: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  plots skipped: matplotlib missing (uv run --group bench ...)", flush=True)
        return []
    jobs = data["config"]["peer_jobs"]
    bursts = [c for c in data["cases"] if c["scenario"] == "burst" and c.get("jobs") == jobs
              and "error" not in c and c.get("fires_over_time")]  # fmt: skip
    if not bursts:
        return []
    where.mkdir(parents=True, exist_ok=True)
    written = []

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for case in bursts:
        values = case.get("lateness_percentiles_ms") or []
        if values:
            ax.plot([v / 1000 for v in values], range(len(values)), label=case["peer"])
    ax.set_xlabel("lateness (s): ran - scheduled")
    ax.set_ylabel("percentile of the one-shots")
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_title(f"Burst of {jobs:,} one-shots due at T: lateness distribution ({data['date']})")
    ax.legend()
    ax.grid(alpha=0.3)
    path = where / "peers-burst-lateness.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(_shown(path))

    fig, (rate, done) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for case in bursts:
        series = case["fires_over_time"]
        bin_s, counts = series["bin_s"], series["counts"]
        t = [(i + 1) * bin_s for i in range(len(counts))]
        rate.plot(t, [n / bin_s for n in counts], label=case["peer"], linewidth=1)
        total, cumulative = 0, []
        for n in counts:
            total += n
            cumulative.append(100 * total / jobs)
        done.plot(t, cumulative, label=case["peer"])
    # A slow peer's tail runs for minutes, a fast one's for a second: a log time axis.
    done.set_xscale("log")
    done.set_xlabel("seconds after T (end of each 0.1 s bin, log scale)")
    rate.set_ylabel("fires/s (0.1 s bins)")
    done.set_ylabel("% of the burst done")
    rate.set_title(f"Burst of {jobs:,} one-shots due at T: fires over time ({data['date']})")
    for ax in (rate, done):
        ax.grid(alpha=0.3)
    done.legend()
    path = where / "peers-burst-fires.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(_shown(path))
    return written


if __name__ == "__main__":  # redraw from a run's JSON: python -m bench.peers.plots FILE.json
    import json
    import sys

    print(draw(json.loads(Path(sys.argv[1]).read_text()), DIR))
