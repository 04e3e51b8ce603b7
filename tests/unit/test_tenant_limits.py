"""A tenant's limits (domain/tenant_limits.py, pure): what each accepts, the errors that name
`limits.<field>` and the fix, the merge of a partial update, the stored form, the job quota."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.domain.tenant_limits import (
    BOUNDS,
    LIMIT_FIELDS,
    TenantLimits,
    check_job_quota,
    check_limits,
    limits_from_json,
    limits_to_json,
    merged,
)
from tickwork.errors import InvalidInput, QuotaExceeded

ALL = TenantLimits(
    max_jobs=1000, max_fires_per_s=2.5, max_concurrent_runs=4, max_api_rps=0.5, weight=3
)


def test_no_limit_is_the_default_and_weight_defaults_to_one() -> None:
    assert TenantLimits().empty
    assert TenantLimits().share == 1
    assert TenantLimits(weight=3).share == 3
    assert check_limits(ALL) is ALL


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("max_jobs", 0, "0 is not a limit"),
        ("max_jobs", -3, "-3 is not a limit"),
        ("max_jobs", 1.5, "give a whole number"),
        ("max_jobs", 100_000_001, "above the maximum"),
        ("max_concurrent_runs", 0, "is not a limit"),
        ("weight", 1001, "above the maximum"),
        ("max_api_rps", 0.0, "is not a limit"),
        ("max_api_rps", -1.0, "is not a limit"),
        ("max_api_rps", math.inf, "give a finite number"),
        ("max_fires_per_s", math.nan, "give a finite number"),
        ("max_fires_per_s", 2_000_000.0, "above the maximum"),
        ("max_jobs", True, "give a number"),
        ("max_api_rps", "5", "give a number"),
    ],
)
def test_a_bad_value_names_its_field_and_the_fix(name: str, value: object, said: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        merged(TenantLimits(), {name: value})  # type: ignore[dict-item]
    error = refused.value
    assert error.field == f"limits.{name}"
    assert error.code == "invalid_limit"
    assert said in error.message
    assert f"to {BOUNDS[name].maximum:,.0f} {BOUNDS[name].unit}" in error.message


def test_a_limit_that_can_be_removed_says_how() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_limits(TenantLimits(max_jobs=0))
    assert "null removes the limit" in refused.value.message


def test_the_merge_sets_given_limits_removes_null_ones_and_keeps_the_rest() -> None:
    changed = merged(ALL, {"max_jobs": 10, "max_api_rps": None})
    assert changed == TenantLimits(
        max_jobs=10, max_fires_per_s=2.5, max_concurrent_runs=4, max_api_rps=None, weight=3
    )
    assert merged(ALL, {}) == ALL
    assert merged(ALL, dict.fromkeys(LIMIT_FIELDS)) == TenantLimits()


def test_whole_limits_given_as_whole_floats_become_ints() -> None:
    changed = merged(TenantLimits(), {"max_jobs": 5.0, "weight": 2.0})
    assert changed.max_jobs == 5
    assert isinstance(changed.max_jobs, int)
    assert isinstance(changed.weight, int)


def test_an_unknown_limit_is_refused_by_name() -> None:
    with pytest.raises(InvalidInput) as refused:
        merged(TenantLimits(), {"max_job": 5})
    assert refused.value.field == "limits.max_job"
    assert "max_jobs" in refused.value.message


def test_the_stored_form_keeps_only_the_limits_set() -> None:
    assert limits_to_json(TenantLimits()) == {}
    assert limits_to_json(TenantLimits(max_api_rps=5.0)) == {"max_api_rps": 5.0}
    assert limits_from_json(limits_to_json(ALL)) == ALL
    # A limit a newer version wrote is ignored, so a rollback still reads the tenant.
    assert limits_from_json({"max_jobs": 3, "max_queue_depth": 9}) == TenantLimits(max_jobs=3)


@given(
    max_jobs=st.none() | st.integers(min_value=1, max_value=100_000_000),
    rate=st.none() | st.floats(min_value=1e-6, max_value=100_000),
    weight=st.none() | st.integers(min_value=1, max_value=1000),
)
def test_every_valid_value_round_trips(
    max_jobs: int | None, rate: float | None, weight: int | None
) -> None:
    limits = check_limits(TenantLimits(max_jobs=max_jobs, max_api_rps=rate, weight=weight))
    assert limits_from_json(limits_to_json(limits)) == limits


def test_the_job_quota_counts_up_to_the_limit() -> None:
    check_job_quota("acme", TenantLimits(), 10**9)  # no limit
    check_job_quota("acme", TenantLimits(max_jobs=3), 2)
    with pytest.raises(QuotaExceeded) as refused:
        check_job_quota("acme", TenantLimits(max_jobs=3), 3)
    error = refused.value
    assert (error.code, error.field, error.limit, error.count) == (
        "quota_exceeded",
        "limits.max_jobs",
        3,
        3,
    )
    message = str(error)
    assert "tenant 'acme' has 3 jobs" in message
    assert "delete jobs" in message
    assert "raise the limit" in message
