"""`python -m tickwork` is the `tickwork` command."""

from tickwork.cli import main

main()
