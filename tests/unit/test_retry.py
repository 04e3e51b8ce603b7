"""Retry rules: tables for the fixed cases, hypothesis properties for the arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.domain.retry import (
    RETRY_AFTER_MAX_MS,
    RetryDecision,
    RetryPolicy,
    backoff_cap_ms,
    backoff_ms,
    classify_http,
    decide,
    http_succeeded,
    parse_retry_after,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
RAND = st.floats(min_value=0.0, max_value=1.0, exclude_max=True)
POLICIES = st.builds(
    lambda attempts, base, extra, mult: RetryPolicy(
        max_attempts=attempts, base_delay_ms=base, max_delay_ms=base + extra, multiplier=mult
    ),
    st.integers(1, 30),
    st.integers(0, 100_000),
    st.integers(0, 10_000_000),
    st.floats(1.0, 10.0),
)

# -- policy validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"base_delay_ms": -1}, "base_delay_ms"),
        ({"base_delay_ms": 10, "max_delay_ms": 9}, "max_delay_ms"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"multiplier": float("nan")}, "multiplier"),
        ({"multiplier": float("inf")}, "multiplier"),
    ],
)
def test_policy_rejects_bad_values_naming_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}:"):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


# -- backoff ------------------------------------------------------------------------------------

DEFAULT = RetryPolicy()


@pytest.mark.parametrize(
    ("attempt", "cap"),
    [(1, 1_000), (2, 2_000), (3, 4_000), (5, 16_000), (9, 256_000), (10, 300_000), (500, 300_000)],
)
def test_cap_doubles_from_base_up_to_max(attempt: int, cap: int) -> None:
    assert backoff_cap_ms(DEFAULT, attempt) == cap


def test_cap_survives_an_exponent_that_overflows_a_float() -> None:
    assert backoff_cap_ms(DEFAULT, 10**6) == DEFAULT.max_delay_ms
    assert backoff_cap_ms(RetryPolicy(base_delay_ms=0), 10**6) == 0


@pytest.mark.parametrize(
    ("rand", "delay"), [(0.0, 0), (0.25, 1_000), (0.5, 2_000), (0.999_999_9, 4_000)]
)
def test_full_jitter_spans_zero_to_cap(rand: float, delay: int) -> None:
    assert backoff_ms(DEFAULT, 3, rand) == delay  # cap 4000 ms


@pytest.mark.parametrize("rand", [-0.1, 1.0, 2.0])
def test_backoff_rejects_rand_outside_unit_interval(rand: float) -> None:
    with pytest.raises(ValueError, match=r"^rand:"):
        backoff_ms(DEFAULT, 1, rand)


def test_attempts_are_numbered_from_one() -> None:
    with pytest.raises(ValueError, match=r"^attempt:"):
        backoff_cap_ms(DEFAULT, 0)


# -- statuses -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (408, True),  # request timeout
        (425, True),  # too early
        (429, True),  # too many requests
        (500, True),
        (502, True),
        (503, True),
        (504, True),
        (599, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (410, False),  # gone: the endpoint was removed on purpose
        (422, False),
        (301, False),  # redirects are not followed, so they fail for good
        (302, False),
        (307, False),
        (308, False),
        (100, False),
    ],
)
def test_classify_http(status: int, retryable: bool) -> None:
    assert classify_http(status) is retryable


@pytest.mark.parametrize("status", [200, 201, 204, 299])
def test_success_is_not_classified(status: int) -> None:
    assert http_succeeded(status)
    with pytest.raises(ValueError, match="success"):
        classify_http(status)


@pytest.mark.parametrize("status", [0, 99, 600, 1000])
def test_classify_rejects_non_statuses(status: int) -> None:
    with pytest.raises(ValueError, match="not an HTTP status"):
        classify_http(status)


# -- Retry-After --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("0", 0),
        ("120", 120_000),
        (" 7 ", 7_000),
        ("3600", RETRY_AFTER_MAX_MS),
        ("86400", RETRY_AFTER_MAX_MS),  # capped, not ignored
        ("9" * 5000, RETRY_AFTER_MAX_MS),  # no big-int conversion
        ("Sun, 01 Mar 2026 12:02:00 GMT", 120_000),  # IMF-fixdate
        ("Sunday, 01-Mar-26 12:00:30 GMT", 30_000),  # RFC 850
        ("Sun Mar  1 12:00:05 2026", 5_000),  # asctime
        ("Sun, 01 Mar 2026 11:00:00 GMT", 0),  # in the past: retry now
        ("Mon, 02 Mar 2026 12:00:00 GMT", RETRY_AFTER_MAX_MS),
        ("-5", None),
        ("+5", None),
        ("1.5", None),
        ("", None),
        ("soon", None),
        ("Sun, 32 Mar 2026 12:00:00 GMT", None),
        ("١٢", None),  # Arabic-Indic digits: str.isdigit() says yes, HTTP says no
    ],
)
def test_parse_retry_after(value: str | None, expected: int | None) -> None:
    assert parse_retry_after(value, NOW) == expected


def test_parse_retry_after_needs_an_aware_now() -> None:
    with pytest.raises(ValueError, match=r"^now:"):
        parse_retry_after("5", NOW.replace(tzinfo=None))


@given(seconds=st.integers(0, 4_000))
def test_retry_after_date_and_seconds_agree(seconds: int) -> None:
    when = NOW + timedelta(seconds=seconds)
    date = when.strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert parse_retry_after(date, NOW) == parse_retry_after(str(seconds), NOW)


# -- decisions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("attempt", "retryable", "retry_after_ms", "rand", "expected"),
    [
        (
            1,
            True,
            None,
            0.5,
            RetryDecision(retry=True, delay_ms=500, dead_letter=False, reason="retry"),
        ),
        (
            4,
            True,
            None,
            0.0,
            RetryDecision(retry=True, delay_ms=0, dead_letter=False, reason="retry"),
        ),
        (
            5,
            True,
            None,
            0.5,
            RetryDecision(retry=False, delay_ms=0, dead_letter=True, reason="attempts_exhausted"),
        ),
        (
            1,
            False,
            None,
            0.5,
            RetryDecision(retry=False, delay_ms=0, dead_letter=True, reason="not_retryable"),
        ),
        (
            1,
            False,
            60_000,
            0.5,
            RetryDecision(retry=False, delay_ms=0, dead_letter=True, reason="not_retryable"),
        ),
        # Retry-After is a floor over the jittered backoff ...
        (
            1,
            True,
            30_000,
            0.5,
            RetryDecision(retry=True, delay_ms=30_000, dead_letter=False, reason="retry"),
        ),
        (
            3,
            True,
            1,
            0.75,
            RetryDecision(retry=True, delay_ms=3_000, dead_letter=False, reason="retry"),
        ),
        # ... that may pass max_delay_ms, up to RETRY_AFTER_MAX_MS.
        (
            1,
            True,
            1_800_000,
            0.1,
            RetryDecision(retry=True, delay_ms=1_800_000, dead_letter=False, reason="retry"),
        ),
        (
            1,
            True,
            10**9,
            0.1,
            RetryDecision(
                retry=True, delay_ms=RETRY_AFTER_MAX_MS, dead_letter=False, reason="retry"
            ),
        ),
    ],
)
def test_decide(
    attempt: int, retryable: bool, retry_after_ms: int | None, rand: float, expected: RetryDecision
) -> None:
    got = decide(
        policy=DEFAULT,
        attempt=attempt,
        retryable=retryable,
        retry_after_ms=retry_after_ms,
        rand=rand,
    )
    assert got == expected


def test_decide_rejects_negative_retry_after() -> None:
    with pytest.raises(ValueError, match=r"^retry_after_ms:"):
        decide(policy=DEFAULT, attempt=1, retryable=True, retry_after_ms=-1, rand=0.0)


def test_single_attempt_policy_never_retries() -> None:
    got = decide(
        policy=RetryPolicy(max_attempts=1), attempt=1, retryable=True, retry_after_ms=None, rand=0
    )
    assert got.dead_letter
    assert not got.retry


# -- properties ---------------------------------------------------------------------------------


@given(policy=POLICIES, attempt=st.integers(1, 10_000), rand=RAND)
def test_delay_is_within_zero_and_cap(policy: RetryPolicy, attempt: int, rand: float) -> None:
    delay = backoff_ms(policy, attempt, rand)
    assert 0 <= delay <= backoff_cap_ms(policy, attempt) <= policy.max_delay_ms


@given(policy=POLICIES, attempt=st.integers(1, 200))
def test_cap_grows_monotonically(policy: RetryPolicy, attempt: int) -> None:
    assert backoff_cap_ms(policy, attempt) <= backoff_cap_ms(policy, attempt + 1)


@given(
    policy=POLICIES,
    attempt=st.integers(1, 100),
    retryable=st.booleans(),
    retry_after_ms=st.none() | st.integers(0, 10**10),
    rand=RAND,
)
def test_decision_is_consistent(
    policy: RetryPolicy, attempt: int, retryable: bool, retry_after_ms: int | None, rand: float
) -> None:
    got = decide(
        policy=policy,
        attempt=attempt,
        retryable=retryable,
        retry_after_ms=retry_after_ms,
        rand=rand,
    )
    assert got.retry != got.dead_letter  # exactly one outcome
    if attempt >= policy.max_attempts or not retryable:
        assert got.dead_letter  # never retries past max_attempts, never retries a permanent failure
        assert got.delay_ms == 0
        return
    assert 0 <= got.delay_ms <= max(policy.max_delay_ms, RETRY_AFTER_MAX_MS)
    if retry_after_ms is None:
        assert got.delay_ms <= backoff_cap_ms(policy, attempt)
    else:
        assert got.delay_ms >= min(retry_after_ms, RETRY_AFTER_MAX_MS)  # Retry-After honoured


@given(policy=POLICIES, rand=RAND)
def test_a_run_of_failures_ends_in_the_dead_letter_after_max_attempts(
    policy: RetryPolicy, rand: float
) -> None:
    attempt = 1
    while decide(
        policy=policy, attempt=attempt, retryable=True, retry_after_ms=None, rand=rand
    ).retry:
        attempt += 1
    assert attempt == policy.max_attempts
