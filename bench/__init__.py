"""tickwork's benchmarks (not tests): `uv run python -m bench` runs them and writes
docs/benchmarks.md. See bench/README.md for what each module measures.
"""
