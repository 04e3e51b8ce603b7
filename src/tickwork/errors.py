"""tickwork's exceptions: one tree, rooted here. Driver errors never cross a seam: each store
backend translates them in one place (`store/postgres/errors.py`, `store/sqlite/connection.py`),
each queue backend in its own module, so callers only ever catch what is drawn below.

TickworkError
 +-- InvalidInput          bad user input: names the field and the fix (HTTP 422, or 400 for
 |                         a request the API cannot read as meant, e.g. a bad cursor; CLI exit 2)
 +-- NotFound              no such job, run, API key or tenant (HTTP 404)
 |    +-- NotDeadLettered  the run is not a dead letter (tickwork.services.dead_letters)
 +-- Conflict              the request clashes with the object's state (HTTP 409)
 |    +-- StaleJob         the job was claimed since it was read: re-read and retry
 |    +-- TenantExists     a tenant of that name exists already
 |    +-- TenantHasJobs    a tenant that jobs still name cannot be deleted
 |    +-- QuotaExceeded    the tenant is at a quota of its limits (`limits.max_jobs`)
 +-- Unauthenticated       no API key, or one that is unknown, revoked or expired (HTTP 401)
 +-- Forbidden             the key's role does not allow this (HTTP 403); a resource of
 |                         another tenant is NotFound instead, as if it did not exist
 +-- RateLimited           the key, or its tenant, sent more requests than its limit (HTTP
 |                         429, Retry-After)
 +-- StoreError            the schedule store failed: it refused a statement, the schema is
 |    |                    missing or newer, a migration failed (HTTP 503, CLI exit 1)
 |    +-- StoreUnavailable the store cannot be reached right now: connection refused, dropped
 |                         or timed out, server shutting down, a lost race; try again
 +-- QueueError            the queue backend failed                 (tickwork.queue.errors)
 |    +-- QueueUnavailable cannot reach the queue server right now
 +-- EgressRefused         the SSRF guard refused a webhook's destination
 +-- SealedSecretError     a stored secret cannot be decrypted: its key is missing here, or
 |                         the value was altered                    (tickwork.sealing)
 |    |                    (tickwork.worker.executors.ssrf; also an OSError, so HTTP client code
 |    |                    that handles connection errors handles it too)
 |    +-- ForbiddenAddress / ForbiddenHost / ForbiddenURL
 +-- WebhookVerificationError  a received webhook's signature did not verify (tickwork.webhooks,
                               raised in users' receivers by `tickwork.webhooks.verify`)

How the HTTP API answers each is one table, in `tickwork.api.errors`.
"""

from __future__ import annotations


class TickworkError(Exception):
    code = "error"


class InvalidInput(TickworkError):
    """Bad input; `field` is a dotted path such as `schedule.cron`. `status` is the HTTP
    status the API answers it with: 422 (a value is wrong), or 400 (the request cannot be read
    as meant, such as a list cursor that no page ever gave)."""

    def __init__(
        self, field: str, message: str, *, code: str = "invalid", status: int = 422
    ) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code
        self.status = status


class NotFound(TickworkError):
    code = "not_found"

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"{kind} {ident!r} does not exist")
        self.kind = kind
        self.ident = ident


class Conflict(TickworkError):
    code = "conflict"


class StaleJob(Conflict):
    """An update's expected fence token is no longer the job's: a claim came in between."""


class StaleTenant(Conflict):
    """A tenant changed between the read and the write of a read-merge-write."""


class Unauthenticated(TickworkError):
    """The request carries no usable API key; the message says what was wrong with it."""

    code = "unauthenticated"


class Forbidden(TickworkError):
    """The key is valid, but its role does not allow this request."""

    code = "forbidden"


class TenantExists(Conflict):
    """`create_tenant` of a tenant that exists already."""

    code = "tenant_exists"

    def __init__(self, tenant: str) -> None:
        super().__init__(f"tenant {tenant!r} already exists")
        self.tenant = tenant


class TenantHasJobs(Conflict):
    """`delete_tenant` of a tenant that `jobs` jobs still name: nothing was deleted."""

    code = "tenant_has_jobs"

    def __init__(self, tenant: str, jobs: int) -> None:
        noun = "job" if jobs == 1 else "jobs"
        super().__init__(
            f"tenant {tenant!r} still has {jobs} {noun}: delete them or move them to another "
            "tenant first"
        )
        self.tenant = tenant
        self.jobs = jobs


class QuotaExceeded(Conflict):
    """The tenant has `count` jobs and its `limits.max_jobs` is `limit`: no job was added."""

    code = "quota_exceeded"
    field = "limits.max_jobs"

    def __init__(self, tenant: str, *, limit: int, count: int) -> None:
        noun = "job" if count == 1 else "jobs"
        super().__init__(
            f"tenant {tenant!r} has {count} {noun} and its limits.max_jobs is {limit} (completed "
            "and paused jobs count): delete jobs of this tenant, or have an admin raise the "
            f"limit (PATCH /v1/tenants/{tenant}, tickwork tenants update {tenant} --max-jobs N)"
        )
        self.tenant = tenant
        self.limit = limit
        self.count = count


class RateLimited(TickworkError):
    """Too many requests with one key (or its tenant: `field` names the tenant's limit);
    `retry_after_s` says when the next one is admitted."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: float, field: str | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.field = field


class StoreError(TickworkError):
    """The schedule store failed; the message says what it was doing and what the driver said."""

    code = "store_error"


class StoreUnavailable(StoreError):
    """The store cannot be reached right now; the same call may succeed later."""

    code = "store_unavailable"
