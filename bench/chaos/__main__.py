"""`python -m bench.chaos`: run the chaos harness; exit 1 on a broken invariant.

uv run python -m bench.chaos --short                 # CI: 100 s of load per queue
uv run python -m bench.chaos --queue nats --seed 42  # long mode: 10 minutes, replayable
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

from bench.chaos.cluster import QueueKind
from bench.chaos.disk import can_mount, faketime_library
from bench.chaos.report import render, to_json
from bench.chaos.run import RunConfig, chaos_run

QUEUES: tuple[QueueKind, ...] = ("table", "nats", "redis")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--queue", choices=(*QUEUES, "all"), default="all")
    parser.add_argument("--short", action="store_true", help="CI mode: 100 s, fewer faults")
    parser.add_argument("--duration", type=float, help="load window in seconds")
    parser.add_argument("--seed", type=int, help="replay a run (default: random, printed)")
    parser.add_argument("--lease-ttl-ms", type=int, default=5000)
    parser.add_argument("--backstop-ms", type=int, default=3000)
    parser.add_argument("--out", type=Path, help="where logs and reports go")
    parser.add_argument(
        "--skew-s", type=float,
        help="run scheduler-1 this many seconds ahead (libfaketime; default 1.5 in long mode)",
    )  # fmt: skip
    parser.add_argument(
        "--disk-full", action=argparse.BooleanOptionalAction, default=None,
        help="put PostgreSQL on a 1 GiB tmpfs and fill it once (default: in long mode, as root)",
    )  # fmt: skip
    parser.add_argument(
        "--enforce-delays", action=argparse.BooleanOptionalAction, default=None,
        help="also fail on missed delay targets (default: in long mode only)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1, 1_000_000)
    duration = args.duration or (100.0 if args.short else 600.0)
    if duration < 60:
        parser.error("--duration: give at least 60 seconds, so that faults have room")
    enforce = not args.short if args.enforce_delays is None else args.enforce_delays
    skew = args.skew_s if args.skew_s is not None else (0.0 if args.short else 1.5)
    if skew and faketime_library() is None:
        print("clock skew: libfaketime is not installed (apt install faketime); running without")
        skew = 0.0
    disk_full = not args.short if args.disk_full is None else args.disk_full
    if disk_full and not can_mount():
        print("full disk: this machine does not let the harness mount a tmpfs; running without")
        disk_full = False
    out = args.out or Path(".chaos") / time.strftime("%Y%m%d-%H%M%S")
    queues: tuple[QueueKind, ...] = QUEUES if args.queue == "all" else (args.queue,)
    print(f"chaos seed {seed} (replay with --seed {seed}); logs in {out}", flush=True)
    failed = False
    reports = []
    for queue in queues:
        config = RunConfig(
            queue=queue, seed=seed, duration_s=duration, short=args.short,
            lease_ttl_ms=args.lease_ttl_ms, backstop_ms=args.backstop_ms, workdir=out / queue,
            skew_s=skew, disk_mb=1024 if disk_full else 0,
        )  # fmt: skip
        result = asyncio.run(chaos_run(config, lambda line: print(line, flush=True)))
        print(render(result), flush=True)
        reports.append(to_json(result))
        (out / queue / "report.json").write_text(json.dumps(reports[-1], indent=2))
        failed |= not result.verdict.invariants_ok or (enforce and not result.verdict.targets_ok)
    (out / "reports.json").write_text(json.dumps(reports, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
