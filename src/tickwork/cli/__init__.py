"""The `tickwork` command line.

    tickwork up                     API + scheduler + executor in one process
    tickwork db upgrade             bring the database schema up to date
    tickwork jobs <verb>            talk to a running API (create, list, get, pause, ...)
    tickwork jobs explain JOB       what happened to an occurrence, and why (also `occurrences`)
    tickwork runs show RUN_ID       one run with its attempts
    tickwork dlq <verb>             the dead-letter queue (list, show, redrive, purge)
    tickwork tenants <verb>         tenants (create, list, show, delete), secrets, egress lists
    tickwork keys <verb>            API keys, in the database (create, list, revoke)
    tickwork secrets <verb>         keys for secrets at rest (keygen, reencrypt)
    tickwork preview --cron EXPR    the next fires of a schedule (or --every, --at), locally
    tickwork cluster                schedulers, workers, partitions and queues (--watch)
    tickwork load                   fires planned per second (or bucket) in a window, per tenant

Output is a readable table by default; `--json` prints machine output and nothing else.
Every failure ends as one line on stderr, never a traceback: bad input (a flag, the API's 4xx)
exits 2, an unreachable or failing API or store exits 1.

The package: `app` (the command tree, `run` and its failure handling), `client` (the HTTP
API client), `render` (tables and JSON), `options` (shared flags), and one module per command
group, each registering its commands on the tree when imported: `serve` (`up`, the single
roles, `db upgrade`, `db repartition`), `preview`, `cluster`, `jobs` (with `runs show`), `backfills`
(`jobs backfill`, `jobs backfills`), `occurrences` (`jobs occurrences`, `jobs explain`), `dlq`,
`tenants`, `keys` and `secrets`. A root option, `--api-key`, gives the key the API commands send.
"""

# The command modules are imported for what importing them does: register their commands.
# `--help` lists the root commands in the order they are registered, the serving roles first,
# then preview; hence `serve` comes before the rest, which register on groups only.
from tickwork.cli import serve  # noqa: F401

# isort: split
from tickwork.cli import cluster, dlq, jobs, keys, load, occurrences, preview, secrets, tenants  # noqa: F401

# isort: split
from tickwork.cli import backfills  # noqa: F401  (`jobs backfill`, after the other jobs verbs)
from tickwork.cli.app import main, run

__all__ = ["main", "run"]
