"""How long to pause between attempts while a dependency (the store, the database) is down."""

from __future__ import annotations


def outage_pause_s(failures: int) -> float:
    """How long to wait after the `failures`-th failed attempt in a row: 50 ms doubling to 1 s,
    so an outage costs a few calls per second rather than fifty, and recovery is noticed
    within a second of the dependency coming back."""
    return min(0.05 * 2.0 ** max(failures - 1, 0), 1.0)
