"""Pure records and rules: jobs, schedules, runs, idempotency keys. No I/O, no clock."""
