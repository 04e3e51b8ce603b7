"""Where the CPU went during a measurement, read from /proc (Linux only).

`CpuMeter` samples every process's utime+stime (/proc/<pid>/stat) twice a second and the
machine's totals (/proc/stat) and splits the CPU between groups:

- named processes started by the bench (e.g. "tickwork", "receiver"),
- "driver": the bench process itself and any other descendant,
- "postgres": the server's backends connected to the bench's own databases, plus its shared
  background processes (checkpointer, WAL writer, ...), which serve everyone,
- "foreign": everything else, including PostgreSQL backends of OTHER databases on the same
  server (other engineers' tests share it).

`foreign_cores` is the noise reading: cores used by processes that are not the benchmark.
`other_cores` = machine busy time minus the benchmark's own, which also catches processes that
started and exited between two samples; `steal_cores` is time the hypervisor gave to other VMs.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")
_CLIENT_BACKEND = re.compile(r"\(\d+\)|\[local\]|autovacuum worker")

# pid -> (ppid, cpu ticks, comm, start time in ticks)
Procs = dict[int, tuple[int, int, str, int]]


def read_procs() -> Procs:
    procs: Procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read().decode("ascii", "replace")
        except OSError:
            continue
        close = raw.rfind(")")
        fields = raw[close + 2 :].split()
        try:
            ticks = int(fields[11]) + int(fields[12])
            procs[int(name)] = (
                int(fields[1]),
                ticks,
                raw[raw.find("(") + 1 : close],
                int(fields[19]),
            )
        except (IndexError, ValueError):
            continue
    return procs


def process_cpu_s(pid: int) -> float:
    """One process's CPU so far (utime + stime, /proc/<pid>/stat), in seconds: the bare-SQL
    models read their PostgreSQL backend's with it."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_cpu_totals() -> tuple[int, int]:
    """(busy ticks, steal ticks) summed over all CPUs since boot."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal


def _title(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass
class Attribution:
    """Decides which group a process's CPU belongs to."""

    driver_pid: int
    postmaster_pid: int | None
    db_marker: str  # a substring of every bench database name, e.g. "tw_bench_"
    named: dict[int, str] = field(default_factory=dict)  # pid -> group, e.g. tickwork
    own_backends: set[int] = field(default_factory=set)  # e.g. the admin connection
    _cache: dict[tuple[int, int], str] = field(default_factory=dict)

    def group(self, pid: int, procs: Procs) -> str:
        key = (pid, procs[pid][3])
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._classify(pid, procs)
        return found

    def _classify(self, pid: int, procs: Procs) -> str:
        chain = [pid]
        while chain[-1] in procs and procs[chain[-1]][0] > 1 and len(chain) < 64:
            chain.append(procs[chain[-1]][0])
        for i, ancestor in enumerate(chain):
            if ancestor in self.named:
                return self.named[ancestor]
            if ancestor == self.driver_pid:
                return "driver"
            if ancestor == self.postmaster_pid:
                return self._postgres(chain[i - 1] if i else pid)
        return "foreign"

    def _postgres(self, child: int) -> str:
        if child == self.postmaster_pid or child in self.own_backends:
            return "postgres"
        title = _title(child)
        if _CLIENT_BACKEND.search(title) and self.db_marker not in title:
            return "foreign"  # a backend of another database on the shared server
        return "postgres"


class CpuMeter:
    """Context manager: CPU per group (in cores) over the `with` block."""

    def __init__(self, attribution: Attribution, interval_s: float = 0.5) -> None:
        self.attribution = attribution
        self.interval_s = interval_s
        self.ticks: dict[str, int] = {}
        self.top_foreign: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = self._t1 = 0.0
        self._totals0 = self._totals1 = (0, 0)
        self._load0 = 0.0

    def __enter__(self) -> CpuMeter:
        self._t0 = time.monotonic()
        self._totals0 = read_cpu_totals()
        self._load0 = os.getloadavg()[0]
        self._thread = threading.Thread(target=self._loop, name="cpu-meter", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._t1 = time.monotonic()
        self._totals1 = read_cpu_totals()

    def _loop(self) -> None:
        prev = read_procs()
        while True:
            stopped = self._stop.wait(self.interval_s)
            cur = read_procs()  # one last sample on stop, so short blocks count too
            self._account(prev, cur)
            prev = cur
            if stopped:
                return

    def _account(self, prev: Procs, cur: Procs) -> None:
        for pid, (_ppid, ticks, comm, start) in cur.items():
            before = prev.get(pid)
            delta = ticks - before[1] if before and before[3] == start else ticks
            if delta <= 0:
                continue
            group = self.attribution.group(pid, cur)
            self.ticks[group] = self.ticks.get(group, 0) + delta
            if group == "foreign":
                self.top_foreign[comm] = self.top_foreign.get(comm, 0) + delta

    def report(self) -> dict[str, Any]:
        wall = max(self._t1 - self._t0, 1e-9)

        def cores(ticks: float) -> float:
            return round(ticks / CLK_TCK / wall, 3)

        own = sum(t for g, t in self.ticks.items() if g != "foreign")
        busy = self._totals1[0] - self._totals0[0]
        top = sorted(self.top_foreign.items(), key=lambda kv: -kv[1])[:3]
        return {
            "wall_s": round(wall, 2),
            "foreign_cores": cores(self.ticks.get("foreign", 0)),
            "other_cores": cores(max(busy - own, 0)),
            "steal_cores": cores(self._totals1[1] - self._totals0[1]),
            "cores": {g: cores(t) for g, t in sorted(self.ticks.items()) if g != "foreign"},
            "loadavg_1m_start": round(self._load0, 2),
            "top_foreign": [f"{comm} {cores(t)}" for comm, t in top],
        }


def probe(attribution: Attribution, seconds: float = 2.0) -> dict[str, Any]:
    with CpuMeter(attribution) as meter:
        time.sleep(seconds)
    return meter.report()


def wait_for_quiet(
    attribution: Attribution, *, threshold: float = 0.25, max_wait_s: float = 10.0
) -> float:
    """Wait (bounded) until foreign CPU is under `threshold` cores; return the last reading."""
    deadline = time.monotonic() + max_wait_s
    while True:
        foreign = float(probe(attribution, 1.5)["foreign_cores"])
        if foreign < threshold or time.monotonic() >= deadline:
            return foreign
