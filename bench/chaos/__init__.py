"""The chaos harness: a real tickwork cluster under crashes, pauses, restarts and network cuts.

    uv run python -m bench.chaos [--queue table|nats|redis|all] [--short] [--seed N]

It starts its own PostgreSQL, queue server, 1 API, 3 schedulers, 3 workers and an independent
webhook receiver, creates a seeded mix of jobs, injects a seeded fault schedule, and judges the
run from the receiver's fsync'ed log and an oracle that does not use tickwork's code. See
docs/reliability.md.

Pure parts (no I/O, unit-tested): `load` (the job mix), `oracle` (expected occurrences),
`faults` (the fault schedule), `verdict` (the judgement). The rest drives processes.
"""
