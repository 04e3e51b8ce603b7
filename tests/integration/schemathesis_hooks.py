"""Schemathesis hooks for tests/integration/test_api_schemathesis.py (SCHEMATHESIS_HOOKS).

`only_semantic_rejections`: a request the schema calls valid may be refused (422) only for a
rule no JSON Schema can state, and the answer must say which, by its code. Everything else the
API enforces, the schema must say; a valid request refused with `invalid`, `missing` or
`unknown_field` is a mismatch between the two, and fails the run.
"""

from __future__ import annotations

import json
import os
from typing import Any

import schemathesis
from schemathesis import Case, CheckContext, Response

# Rules that depend on more than one value's shape (docs/api.md lists them):
SEMANTIC_CODES = frozenset(
    {
        "invalid_cron",  # the cron grammar, and day-of-month 30 in February
        "never_fires",  # a schedule with no occurrence left after now
        "invalid_window",  # end_at not after start_at
        "invalid_duration",  # ISO-8601 duration grammar; months and years refused
        "interval_too_short",  # durations: 1 ms .. 366 days, whatever the unit
        "interval_too_long",
        "invalid_instant",  # an instant outside 1970..2199
        "invalid_url",  # a port out of range, an IPv6 address without its brackets, ...
        "forbidden_address",  # the SSRF guard's rules
        "unknown_tenant",  # the tenant must exist (a stateful run may have deleted `default`)
        "tenant_for_role",  # a key's tenant: required for the tenant roles, none for admin
        "expires_in_the_past",  # a key's expiry must be after now
        "invalid_host_pattern",  # a tenant's destination list entry (domain/egress.py)
        "tenant_egress_refused",  # a job URL outside its tenant's destination lists
        "schedule_kind",  # preview: exactly one of cron, every, at; timezone/anchor with theirs
        "after_too_far",  # a job preview with max_runs counting too many fires before `after`
        "empty_range",  # a backfill's `to` not after its `from`
        "in_future",  # a backfill's `to` after now
        "too_many_occurrences",  # a backfill's range implies more than the cap
        "window_too_long",  # a window's `to` too far after its `from` (occurrences, load)
        "too_many_buckets",  # the load forecast: the window over the bucket width
        "invalid_shift",  # schedule.jitter / schedule.window: 0 .. P1D
        "jitter_and_window",  # a schedule takes one of the two, not both
    }
)


@schemathesis.hook
def before_call(context: Any, case: Case, kwargs: dict[str, Any]) -> None:
    """Keep the run's own admin key: a stateful run learns key ids from GET /v1/keys, and once
    it revoked the key it authenticates with, every later request was a 401. Revoking that one
    id becomes revoking one that does not exist (revocation is tested in test_api_auth.py)."""
    protected = os.environ.get("TICKWORK_FUZZ_KEY_ID")
    params = case.path_parameters
    if (
        protected
        and case.method.upper() == "DELETE"
        and params
        and params.get("key_id") == protected
    ):
        params["key_id"] = "key_kept_for_the_fuzz_run"


@schemathesis.check
def only_semantic_rejections(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 422:
        return None
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        shown = response.content[:200]
        raise AssertionError(f"a 422 without the API's error shape: {shown!r}") from None
    if error.get("code") not in SEMANTIC_CODES:
        raise AssertionError(
            "the schema accepts what the API refuses: "
            f"{error.get('code')} on {error.get('field')}: {error.get('message')}"
        )
    return None
