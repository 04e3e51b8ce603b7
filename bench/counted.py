"""`python -m bench.counted OUT.json ROLE ARGS...`: `tickwork ROLE ARGS...`, counting statements.

Every statement the process sends through its store's connection pools (asyncpg query
loggers, installed by `bench.counting.QueryCounter.patch_pools`, BEGIN and COMMIT included) is
counted by kind and written to OUT.json when the process exits. PostgreSQL's own statistics do
not count statements, so this is how the end-to-end benchmark gets statements per fire.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.counting import QueryCounter


def main() -> None:
    out, argv = Path(sys.argv[1]), sys.argv[2:]
    counter = QueryCounter()
    sys.argv = ["tickwork", *argv]
    from tickwork.cli import main as tickwork_main

    try:
        with counter.patch_pools():
            tickwork_main()
    finally:
        out.write_text(json.dumps(counter.counts()))


if __name__ == "__main__":
    main()
