"""Partitioned schedulers (issue 18, ADR 0015): the due-scan's cost as the table grows, a
takeover after kill -9 and after SIGTERM on a real cluster, and fires/s with 1-3 schedulers.

    uv run python -m bench.partitions scan|takeover|scaling [--quick] [--reps K] [--jobs N]

See bench/README.md.
"""
