"""Carries out a fault schedule against a running cluster and records when each fault began
and ended (the verdict attributes delays to faults by those instants)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from bench.chaos.cluster import Cluster, Member, Role
from bench.chaos.faults import Fault
from bench.chaos.verdict import FaultWindow


def now_us() -> int:
    return time.time_ns() // 1000


class FaultDriver:
    def __init__(self, cluster: Cluster, say: Callable[[str], None]) -> None:
        self.cluster = cluster
        self.say = say
        self.windows: list[FaultWindow] = []
        self.skipped: list[Fault] = []

    async def run(self, faults: Sequence[Fault], t0_monotonic: float) -> None:
        tasks = []
        for fault in faults:
            delay = t0_monotonic + fault.at_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self._inject(fault)))
        await asyncio.gather(*tasks)

    async def _inject(self, fault: Fault) -> None:
        start = now_us()
        target = await self._apply(fault)
        if target is False:
            self.skipped.append(fault)
            self.say(f"  skipped {fault.describe()}: no target available")
            return
        window = FaultWindow(fault.kind, str(target) or None, start, now_us())
        self.windows.append(window)
        took = (window.end_us - window.start_us) / 1e6
        self.say(f"  done    {fault.kind} {target or ''} (fault lasted {took:.1f}s)")

    async def _apply(self, fault: Fault) -> str | bool:
        """Inject the fault, wait it out, undo it; the target's name ('' for servers), or
        False when there was nothing to inject it into."""
        c = self.cluster
        kind = fault.kind
        if kind in ("kill_scheduler", "kill_worker", "stop_scheduler", "stop_worker"):
            role: Role = "scheduler" if kind.endswith("scheduler") else "worker"
            member = c.pick(fault.target, role)
            if member is None:
                return False
            self.say(f"  inject  {kind} {member.name}")
            if kind.startswith("kill"):
                c.kill(member)
                await asyncio.sleep(fault.hold_s)
                await c.restart(member)
            else:
                c.pause(member)
                await asyncio.sleep(fault.hold_s)
                c.resume(member)
            return member.name
        self.say(f"  inject  {kind} {fault.target or ''}")
        if kind == "pg_crash":
            await c.pg_crash()
            await asyncio.sleep(fault.hold_s)
            await c.pg_start()
        elif kind == "queue_restart":
            await c.queue_kill()
            await asyncio.sleep(fault.hold_s)
            await c.queue_start()
        elif kind == "drop_connections":
            member = _any_up(c, fault.target)
            if member is None:
                return False
            dropped = await c.drop_connections(member)
            self.say(f"          dropped {dropped} sessions of {member.name}")
            return member.name
        elif kind == "disk_full":
            taken = await c.disk_fill()
            self.say(f"          ballast took the last {taken / 1e6:.0f} MB")
            await asyncio.sleep(fault.hold_s)
            await c.disk_free()
        elif kind == "net_cut":
            c.cut()
            await asyncio.sleep(fault.hold_s)
            c.heal()
        return fault.target or ""


def _any_up(cluster: Cluster, wanted: str | None) -> Member | None:
    if wanted is not None and cluster.members[wanted].state == "up":
        return cluster.members[wanted]
    role = cluster.members[wanted].role if wanted else "worker"
    return cluster.pick(None, role)
