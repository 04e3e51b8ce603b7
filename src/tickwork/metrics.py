"""Prometheus metrics shared by the API, scheduler and executor of one process."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS_S = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)

FIRES = Counter("tickwork_fires_total", "Occurrences claimed and handed to an executor", ["origin"])
MISSED = Counter(
    "tickwork_misfires_total", "Occurrences folded or skipped by a misfire policy", ["policy"]
)
THROTTLED_FIRES = Counter(
    "tickwork_throttled_fires_total",
    "Occurrences claimed late because the global fire ceiling held them back (their runs "
    "record throttled_ms; ADR 0025)",
)
CEILING_SHARE = Gauge(
    "tickwork_fire_ceiling_share",
    "Fires per second this scheduler may claim: the fire ceiling times the share of the "
    "partitions it holds (absent without a ceiling)",
)
FIRE_LATENESS = Histogram(
    "tickwork_fire_lateness_seconds",
    "Execution start minus the occurrence's planned instant (its scheduled one unless a jitter"
    " or window moved it)",
    buckets=_LATENCY_BUCKETS_S,
)
DUE_SCAN_SECONDS = Histogram(
    "tickwork_due_scan_seconds", "Time to read one batch of due jobs", buckets=_LATENCY_BUCKETS_S
)
CLAIM_SECONDS = Histogram(
    "tickwork_claim_seconds",
    "Time to claim + advance one batch (one transaction)",
    buckets=_LATENCY_BUCKETS_S,
)
CLAIM_CONFLICTS = Counter(
    "tickwork_claim_conflicts_total", "Planned claims dropped because the job changed meanwhile"
)
RUNS = Counter("tickwork_runs_total", "Finished runs by outcome", ["status"])
STALE_OUTCOMES = Counter(
    "tickwork_stale_outcomes_total", "Run outcomes rejected by the fence token (zombie writes)"
)
RUN_SECONDS = Histogram(
    "tickwork_run_duration_seconds", "Execution time of a run", buckets=_LATENCY_BUCKETS_S
)
INFLIGHT = Gauge("tickwork_runs_inflight", "Runs being executed by this process")
PARKED = Gauge(
    "tickwork_fires_parked",
    "Due fires this worker holds back because their tenant or target host is at its cap"
    " (ADR 0023); sampled at each lease round and heartbeat",
)
RETRIES = Counter("tickwork_retries_total", "Failed attempts released for a retry")
DEAD_LETTERS = Counter(
    "tickwork_dead_letters_total", "Occurrences that failed for good and entered the DLQ"
)
QUEUE_LAG = Gauge(
    "tickwork_queue_lag_seconds",
    "How long the oldest leasable run has been waiting for a worker (0 when none waits)",
)
ALERTS = Counter(
    "tickwork_alerts_total", "Dead-letter alerts (a job's on_failure webhook) delivered"
)
ALERT_FAILURES = Counter(
    "tickwork_alert_failures_total",
    "Dead-letter alerts given up after their retries (logged; the run's outcome is unchanged)",
)
QUEUE_DEPTH = Gauge(
    "tickwork_queue_depth",
    "Fires waiting for a worker: messages published and not yet acked (NATS, Redis), or pending "
    "runs leasable now (table queue); sampled every metrics_interval_ms",
)
PARTITIONS_OWNED = Gauge(
    "tickwork_partitions_owned", "Partitions of the job space this scheduler holds a lease on"
)
TAKEOVERS = Counter(
    "tickwork_takeover_fires_total",
    "Overdue occurrences this scheduler claimed in partitions it does not hold (a slow or dead "
    "owner's work, taken over after the takeover grace)",
)
HERDS_CLAIMED_AHEAD = Counter(
    "tickwork_herds_claimed_ahead_total",
    "Herds (more jobs due at one instant than a claim batch) this scheduler began to claim "
    "TICKWORK_HERD_LEAD_MS before their instant",
)
STALE_EPOCH_REFUSALS = Counter(
    "tickwork_stale_epoch_refusals_total",
    "Claims the store refused because this scheduler no longer held the partition at that epoch",
)
PARTITION_LAG = Gauge(
    "tickwork_partition_lag_seconds",
    "Now minus the oldest due, unclaimed job of a partition (0 when none is due)",
    ["partition"],
)
BACKFILL_ENQUEUED = Counter(
    "tickwork_backfill_enqueued_total",
    "Runs the paced lane inserted for backfills and catch-ups (an occurrence replayed before "
    "has its run already and is not counted)",
    ["kind"],
)
BACKFILLS_RUNNING = Gauge(
    "tickwork_backfills_running",
    "Running backfills and catch-ups the paced lane read in its last round (at most its scan "
    "limit)",
)
