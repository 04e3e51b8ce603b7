"""How long a worker's lease on a fire lasts, how often it is renewed, and the rule between them.

A fire is leased for `lease_ttl_ms`. While it waits or runs, the executor's heartbeat renews
the lease every `lease_heartbeat_ms`, so a long task keeps it; once the worker dies, the lease
runs out and another worker's store leaser takes the run (worker/leaser.py). The TTL is
therefore how long a dead worker's fires wait, and also how long a live worker may stall (a
blocked event loop, a store that does not answer) before its fires are run a second time
elsewhere: the fence rejects the stalled worker's late outcome, but the work is done twice.
ADR 0016 has the numbers behind the defaults.

A heartbeat renews only the leases that are at least one heartbeat old: a fire leased a moment
ago has nearly its whole TTL ahead, and most fires finish before they need a renewal, so a
burst of short fires costs no heartbeat writes. A lease is thus renewed up to two heartbeats
after it was granted or last renewed, and to survive two missed heartbeats after that it must
last longer than four.
"""

from __future__ import annotations

from datetime import datetime, timedelta

DEFAULT_LEASE_TTL_MS = 5_000
DEFAULT_HEARTBEAT_MS = 1_000
HEARTBEATS_PER_LEASE = 4  # the TTL must be longer than this many heartbeats (see above)


def lease_timing_problem(lease_ttl_ms: int, heartbeat_ms: int) -> str | None:
    """What is wrong with this TTL and heartbeat, or None when a lease outlives two missed
    heartbeats."""
    if heartbeat_ms <= 0:
        return f"the lease heartbeat must be positive, not {heartbeat_ms} ms"
    if lease_ttl_ms <= HEARTBEATS_PER_LEASE * heartbeat_ms:
        return (
            f"a lease of {lease_ttl_ms} ms must last longer than {HEARTBEATS_PER_LEASE} "
            f"heartbeats of {heartbeat_ms} ms, so that it outlives two missed heartbeats"
        )
    return None


def renew_by(now: datetime, lease_ttl: timedelta, heartbeat: timedelta) -> datetime:
    """A heartbeat at `now` renews the leases that end at or before this instant: those
    granted or renewed at least one heartbeat ago."""
    return now + lease_ttl - heartbeat
