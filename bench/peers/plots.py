"""PNG plots of a peer run (matplotlib, from the `bench` dependency group; skipped without it):
the burst's lateness distribution per contender and its fires over time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.machine import REPO

DIR = REPO / "docs" / "img"


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
    written.append(str(path.relative_to(REPO)))

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for case in bursts:
        series = case["fires_over_time"]
        bin_s = series["bin_s"]
        ax.plot([i * bin_s for i in range(len(series["counts"]))],
                [n / bin_s for n in series["counts"]], label=case["peer"])  # fmt: skip
    ax.set_xlabel("seconds after T")
    ax.set_ylabel("fires/s (0.1 s bins)")
    ax.set_title(f"Burst of {jobs:,} one-shots due at T: fires over time")
    ax.legend()
    ax.grid(alpha=0.3)
    path = where / "peers-burst-fires.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(str(path.relative_to(REPO)))
    return written
