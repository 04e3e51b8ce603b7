"""The per-fire server time by statement that a burst prints (bench.pgutil.time_by_statement):
the difference between two pg_stat_statements snapshots, per fire, the costliest first."""

from __future__ import annotations

from bench.pgutil import StatementTime, time_by_statement


def test_only_what_ran_between_the_snapshots_counts_per_fire_costliest_first() -> None:
    before = {
        1: StatementTime("INSERT INTO tw_jobs ...", calls=1000, total_ms=900.0, rows=1000),
        2: StatementTime("WITH plan AS (...)", calls=2, total_ms=10.0, rows=2000),
    }
    after = {
        1: StatementTime("INSERT INTO tw_jobs ...", calls=1000, total_ms=900.0, rows=1000),
        2: StatementTime("WITH plan AS (...)", calls=12, total_ms=60.0, rows=12000),
        3: StatementTime("WITH   due AS\n  (SELECT ...)", calls=20, total_ms=80.0, rows=10000),
    }

    spent = time_by_statement(after, before, fires=10_000)

    assert spent == [
        {"us_per_fire": 8.0, "calls": 20, "rows": 10000, "statement": "WITH due AS (SELECT ...)"},
        {"us_per_fire": 5.0, "calls": 10, "rows": 10000, "statement": "WITH plan AS (...)"},
    ]


def test_nothing_when_the_server_keeps_no_statement_statistics() -> None:
    assert time_by_statement(None, None, fires=100) == []
    assert time_by_statement({}, None, fires=100) == []
