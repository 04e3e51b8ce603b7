"""The judgement of a chaos run: pure, from what the receiver logged, what the oracle expected,
what tickwork's ledger recorded and which faults the driver injected when.

Invariants (any breach fails the run):
- lost: an expected occurrence was never delivered;
- early: a delivery arrived before its scheduled instant;
- duplicate effect: an occurrence has more than one successful attempt in tickwork's history;
- unexpected: a delivery whose key no schedule implies;
- bad signature: a delivery the receiver could not verify;
- unexplained duplicate: a repeated delivery that no injected fault can account for;
- queue mismatch: a run whose row in PostgreSQL's queue of pending runs (ADR 0030) is missing,
  extra or disagrees with the run, once the cluster has stopped.

Delay targets (reported; enforced in long mode): steady-state p99 under 1 s; after a scheduler
SIGKILL, under lease TTL + 2 s; after a PostgreSQL crash, under its outage + 5 s.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

STEADY_P99_MS = 1000.0
AFTER_SCHEDULER_KILL_EXTRA_MS = 2000.0
AFTER_PG_CRASH_EXTRA_MS = 5000.0


@dataclass(frozen=True, slots=True)
class Delivery:
    key: str  # idempotency-key: "<job id>:<scheduled epoch ms>"
    arrival_us: int
    fence: int
    attempt: int
    signature_ok: bool


@dataclass(frozen=True, slots=True)
class FaultWindow:
    kind: str
    target: str | None
    start_us: int  # when the fault was injected
    end_us: int  # when it was undone (process restarted, server up, pause over)


@dataclass(frozen=True, slots=True)
class Timing:
    lease_ttl_ms: float
    backstop_ms: float  # how long an external queue's loss takes to be covered by the store

    @property
    def settle_us(self) -> int:
        """After a fault ends, how long its effects may legitimately last."""
        return int((self.lease_ttl_ms + self.backstop_ms + 3000) * 1000)


@dataclass(frozen=True, slots=True)
class Delays:
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @staticmethod
    def of(values_ms: Sequence[float]) -> Delays:
        if not values_ms:
            return Delays(0, 0.0, 0.0, 0.0)
        ordered = sorted(values_ms)
        return Delays(len(ordered), _rank(ordered, 0.50), _rank(ordered, 0.99), ordered[-1])


@dataclass(frozen=True, slots=True)
class FaultImpact:
    fault: FaultWindow
    affected: int  # occurrences scheduled in its window (and in no later-starting fault's)
    max_delay_ms: float
    bound_ms: float | None  # the target for this kind, where the issue sets one

    @property
    def within_bound(self) -> bool:
        return self.bound_ms is None or self.max_delay_ms < self.bound_ms


@dataclass(slots=True)
class Verdict:
    expected: int
    delivered: int  # distinct keys delivered
    deliveries: int  # requests in all
    lost: list[str] = field(default_factory=list)
    early: list[tuple[str, float]] = field(default_factory=list)  # (key, ms early)
    duplicate_effect: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    bad_signatures: int = 0
    raw_duplicates: int = 0
    unexplained_duplicates: list[str] = field(default_factory=list)
    queue_mismatches: list[int] = field(default_factory=list)  # run ids
    steady: Delays = Delays(0, 0.0, 0.0, 0.0)
    impacts: list[FaultImpact] = field(default_factory=list)

    @property
    def invariants_ok(self) -> bool:
        return not (
            self.lost
            or self.early
            or self.duplicate_effect
            or self.unexpected
            or self.bad_signatures
            or self.unexplained_duplicates
            or self.queue_mismatches
        )

    @property
    def steady_ok(self) -> bool:
        return self.steady.p99_ms < STEADY_P99_MS

    @property
    def targets_ok(self) -> bool:
        return self.steady_ok and all(impact.within_bound for impact in self.impacts)


def judge(
    *,
    expected: Mapping[str, int],  # key -> scheduled instant, epoch µs
    deliveries: Sequence[Delivery],
    successes: Mapping[str, int],  # key -> successful attempts in tickwork's history
    faults: Sequence[FaultWindow],
    timing: Timing,
    queue_mismatches: Sequence[int] = (),  # run ids whose queue row disagrees with the run
) -> Verdict:
    by_key: dict[str, list[Delivery]] = defaultdict(list)
    for delivery in deliveries:
        by_key[occurrence_of(delivery.key)].append(delivery)
    per_occurrence: Counter[str] = Counter()
    for key, n in successes.items():
        per_occurrence[occurrence_of(key)] += n
    verdict = Verdict(expected=len(expected), delivered=len(by_key), deliveries=len(deliveries))
    verdict.lost = sorted(key for key in expected if key not in by_key)
    verdict.unexpected = sorted(key for key in by_key if key not in expected)
    verdict.duplicate_effect = sorted(key for key, n in per_occurrence.items() if n > 1)
    verdict.bad_signatures = sum(not d.signature_ok for d in deliveries)
    verdict.queue_mismatches = sorted(queue_mismatches)
    windows = [_affected_window(f, timing) for f in faults]

    def faults_covering(instant_us: int) -> list[int]:
        return [i for i, (lo, hi) in enumerate(windows) if lo <= instant_us <= hi]

    steady: list[float] = []
    per_fault: dict[int, list[float]] = defaultdict(list)
    for key, arrivals in by_key.items():
        scheduled = expected.get(key)
        if scheduled is None:
            continue
        arrivals.sort(key=lambda d: d.arrival_us)
        for d in arrivals:
            if d.arrival_us < scheduled:
                verdict.early.append((key, (scheduled - d.arrival_us) / 1000))
        for extra in arrivals[1:]:
            verdict.raw_duplicates += 1
            if not faults_covering(scheduled) and not faults_covering(extra.arrival_us):
                verdict.unexplained_duplicates.append(key)
        delay_ms = (arrivals[0].arrival_us - scheduled) / 1000
        covering = faults_covering(scheduled)
        if not covering:
            steady.append(delay_ms)
        else:  # where windows overlap, the fault that began last is blamed
            per_fault[max(covering, key=lambda i: faults[i].start_us)].append(delay_ms)
    verdict.steady = Delays.of(steady)
    verdict.impacts = [
        FaultImpact(
            fault=fault,
            affected=len(per_fault[i]),
            max_delay_ms=max(per_fault[i], default=0.0),
            bound_ms=_bound_ms(fault, timing),
        )
        for i, fault in enumerate(faults)
    ]
    return verdict


def occurrence_of(key: str) -> str:
    """The occurrence a delivery's key stands for: a misfire catch-up replays the occurrence of
    the same instant under its own key (`<job>:<ms>:catchup`, docs/policies.md), and is that
    occurrence's delivery. An occurrence delivered both ways counts twice (a duplicate)."""
    return key.removesuffix(CATCHUP_SUFFIX)


CATCHUP_SUFFIX = ":catchup"


def _affected_window(fault: FaultWindow, timing: Timing) -> tuple[int, int]:
    """Occurrences scheduled in this window may feel the fault: from just before it (claims
    are made ahead of time) until its effects have had time to clear."""
    ttl_us = int(timing.lease_ttl_ms * 1000)
    lasting = max(fault.end_us, fault.start_us + ttl_us)
    return fault.start_us - 1_000_000, lasting + timing.settle_us


def _bound_ms(fault: FaultWindow, timing: Timing) -> float | None:
    if fault.kind == "kill_scheduler":
        return timing.lease_ttl_ms + AFTER_SCHEDULER_KILL_EXTRA_MS
    if fault.kind == "pg_crash":
        return (fault.end_us - fault.start_us) / 1000 + AFTER_PG_CRASH_EXTRA_MS
    return None


def _rank(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    index = max(0, min(len(ordered) - 1, int(q * len(ordered) + 0.999999) - 1))
    return ordered[index]


def kinds(faults: Sequence[FaultWindow]) -> Counter[str]:
    return Counter(f.kind for f in faults)
