"""`python -m bench`: run the benchmarks (see bench/README.md)."""

from bench.cli import main

main()
