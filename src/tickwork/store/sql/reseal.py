"""`tickwork secrets reencrypt`: rewrite every stored secret sealed with the current key.

After a key rotation (a new key first in the keyring, the old one after it) this re-seals what
the old key sealed; it also seals rows written before encryption existed. Each row is rewritten
with a compare-and-set on the values read, so an edit made meanwhile (already sealed with the
current key) wins and the row is counted as skipped; run it again to be sure nothing is left.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tickwork.domain.jobs import WebhookTarget
from tickwork.sealing import is_sealed
from tickwork.store.base import ResealReport
from tickwork.store.sql.named import Statement
from tickwork.store.sql.sealed import TENANT_SECRETS, SealedColumns

PAGE = 500

Run = Callable[[Statement, Mapping[str, Any]], Awaitable[Sequence[Any]]]


@dataclass(frozen=True, slots=True)
class ResealStatements:
    """The store's statements for this (named in common.sql)."""

    job_page: Statement  # job_secret_columns
    reseal_job: Statement
    tenants: Statement  # tenant_secret_columns
    reseal_tenant: Statement


async def reseal_all(
    sql: ResealStatements, columns: SealedColumns, read: Run, write: Run
) -> ResealReport:
    jobs = jobs_done = tenants_done = skipped = 0
    after = ""
    while True:
        page = await read(sql.job_page, {"after": after, "limit": PAGE})
        for row in page:
            jobs += 1
            fresh = _job_columns(columns, row)
            if fresh is None:
                continue
            done = await write(sql.reseal_job, fresh)
            jobs_done += 1 if done else 0
            skipped += 0 if done else 1
        if len(page) < PAGE:
            break
        after = page[-1]["id"]
    tenant_rows = await read(sql.tenants, {})
    for row in tenant_rows:
        old = row["webhook_secrets"]
        if not columns.needs_reseal(old, always_secret=True):
            continue
        sealed = columns.write_secrets(columns.read_tenant_secrets(old), purpose=TENANT_SECRETS)
        values = {"tenant": row["tenant"], "webhook_secrets": sealed, "old_webhook_secrets": old}
        done = await write(sql.reseal_tenant, values)
        tenants_done += 1 if done else 0
        skipped += 0 if done else 1
    return ResealReport(
        jobs_checked=jobs,
        jobs_resealed=jobs_done,
        tenants_checked=len(tenant_rows),
        tenants_resealed=tenants_done,
        skipped=skipped,
    )


def _job_columns(columns: SealedColumns, row: Any) -> dict[str, Any] | None:
    """The rewrite of one job's columns, or None when each is already as `write_*` makes it."""
    target_text, secrets_text, alert_text = row["target"], row["webhook_secrets"], row["on_failure"]
    target = columns.read_target(target_text, secrets_text)
    alert = columns.read_alert(alert_text)
    # A fresh seal never equals the old text (random nonce): compare what each would be.
    stale = (
        columns.needs_reseal(target_text, always_secret=False)
        or columns.needs_reseal(secrets_text, always_secret=True)
        or columns.needs_reseal(alert_text, always_secret=False)
        or _should_be_sealed(columns, target_text, columns.write_target(target))
        or _should_be_sealed(columns, alert_text, columns.write_alert(alert))
    )
    if not stale:
        return None
    return {
        "id": row["id"],
        "target": columns.write_target(target),
        "webhook_secrets": columns.write_secrets(
            target.secrets if isinstance(target, WebhookTarget) else ()
        ),
        "on_failure": columns.write_alert(alert),
        "old_target": target_text,
        "old_webhook_secrets": secrets_text,
        "old_on_failure": alert_text,
    }


def _should_be_sealed(columns: SealedColumns, stored: str | None, fresh: str | None) -> bool:
    """A plain stored value that `write_*` would now seal (written before encryption)."""
    if stored is None or fresh is None or columns.keyring is None:
        return False
    return not is_sealed(stored) and is_sealed(fresh)
