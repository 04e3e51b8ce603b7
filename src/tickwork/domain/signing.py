"""Pure: which secrets sign a request, from the most specific place that has any.

job secrets > tenant secrets > the process's TICKWORK_WEBHOOK_SECRETS > unsigned.

A level either signs alone or not at all: a job with its own secrets is never also signed
with the tenant's, so a receiver that trusts only the job's secret cannot be satisfied by a
secret shared with other jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum


class SigningSource(StrEnum):
    JOB = "job"
    TENANT = "tenant"
    PROCESS = "process"
    NONE = "none"  # unsigned


def resolve_secrets(
    *, job: Sequence[str], tenant: Sequence[str], process: Sequence[str]
) -> tuple[SigningSource, tuple[str, ...]]:
    """The first non-empty level, and its secrets (empty for NONE)."""
    for source, secrets in (
        (SigningSource.JOB, job),
        (SigningSource.TENANT, tenant),
        (SigningSource.PROCESS, process),
    ):
        if secrets:
            return source, tuple(secrets)
    return SigningSource.NONE, ()
