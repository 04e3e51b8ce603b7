"""The job mix a chaos run creates: pure data, derived from the seed and the load window."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

# Zones chosen for their offsets: +5:45 and +13:45 flip the parity of the minute, so a cron
# with an even-minute field fires at different instants there than in UTC; Lord_Howe is on
# its half-hour daylight time in December.
ZONES = (
    "UTC",
    "America/New_York",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Pacific/Chatham",
    "Australia/Lord_Howe",
)

# (expression, how many jobs): about 46 fires/s from cron in all.
CRON_MIX = (
    ("* * * * * *", 40),
    ("*/3 * * * * *", 10),
    ("*/7 * * * * *", 8),
    ("*/5 */2 * * * *", 12),
)
INTERVAL_JOBS = 30  # every 1.1-5 s: about 10 fires/s
ONE_SHOTS_PER_S = 5.0

Kind = Literal["cron", "every", "at"]


@dataclass(frozen=True, slots=True)
class JobPlan:
    """One job to create. Instants are epoch milliseconds; the window is [start, end]."""

    name: str
    kind: Kind
    cron: str | None = None
    timezone: str = "UTC"
    every_ms: int | None = None
    anchor_ms: int | None = None
    at_ms: int | None = None

    def schedule(self, start_ms: int, end_ms: int) -> dict[str, Any]:
        """The API's `schedule` object: fire_all, so every occurrence is owed a delivery."""
        body: dict[str, Any] = {"misfire": "fire_all"}
        if self.kind == "cron":
            body |= {"cron": self.cron, "timezone": self.timezone}
        elif self.kind == "every":
            every_s = (self.every_ms or 0) / 1000
            body |= {"every": f"PT{every_s:.3f}S", "anchor": iso_ms(self.anchor_ms)}
        else:
            body["at"] = iso_ms(self.at_ms)
            return body
        return body | {"start_at": iso_ms(start_ms), "end_at": iso_ms(end_ms)}


def iso_ms(ms: int | None) -> str:
    if ms is None:
        raise ValueError("instant missing")
    seconds, millis = divmod(ms, 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{millis:03d}Z"


def build_load(seed: int, start_ms: int, end_ms: int) -> list[JobPlan]:
    """The job mix for a load window [start_ms, end_ms]; the same seed gives the same jobs
    relative to the window."""
    rng = random.Random(f"load-{seed}")
    plans: list[JobPlan] = []
    for expr, count in CRON_MIX:
        for i in range(count):
            zone = ZONES[(i + len(plans)) % len(ZONES)]
            plans.append(JobPlan(name=f"cron-{len(plans)}", kind="cron", cron=expr, timezone=zone))
    for i in range(INTERVAL_JOBS):
        every = rng.randint(1100, 5000)
        anchor = start_ms + rng.randint(0, every)
        plans.append(JobPlan(name=f"every-{i}", kind="every", every_ms=every, anchor_ms=anchor))
    shots = int(ONE_SHOTS_PER_S * (end_ms - start_ms) / 1000)
    for i in range(shots):
        at = rng.randint(start_ms, end_ms)
        plans.append(JobPlan(name=f"at-{i}", kind="at", at_ms=at))
    return plans
