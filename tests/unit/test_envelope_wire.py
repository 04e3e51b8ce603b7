"""An envelope's bytes on a queue (domain/runs.py `Envelope.encode`/`decode`): every envelope
comes back whole, the JSON an earlier release published still reads, and anything else is
refused with ValueError (the queues drop such a message as poison)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.clock import from_us, to_us
from tickwork.domain.runs import Envelope

INSTANT = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=UTC)


def envelope(job_id: str = "job-1", key: str = "job-1:1893499200123") -> Envelope:
    return Envelope(
        run_id=42, job_id=job_id, key=key, scheduled_for=INSTANT, fence_token=7, attempt=3
    )


@given(
    run_id=st.integers(min_value=1, max_value=2**63 - 1),
    job_id=st.text(min_size=1, max_size=80),
    key=st.text(min_size=1, max_size=120),
    at_us=st.integers(min_value=0, max_value=to_us(datetime(9999, 1, 1, tzinfo=UTC))),
    fence=st.integers(min_value=0, max_value=2**63 - 1),
    attempt=st.integers(min_value=0, max_value=10_000),
)
def test_every_envelope_comes_back_whole(
    run_id: int, job_id: str, key: str, at_us: int, fence: int, attempt: int
) -> None:
    # Job ids and keys holding spaces, digits or any other character: neither is split.
    sent = Envelope(
        run_id=run_id,
        job_id=job_id,
        key=key,
        scheduled_for=from_us(at_us),
        fence_token=fence,
        attempt=attempt,
    )
    assert Envelope.decode(sent.encode()) == sent


def test_a_job_id_with_spaces_and_a_key_starting_with_digits_stay_apart() -> None:
    sent = envelope(job_id="nightly 12 backup", key="12 nightly:0")
    assert Envelope.decode(sent.encode()) == sent


def test_the_json_an_earlier_release_published_still_reads() -> None:
    sent = envelope()
    earlier = json.dumps(
        {"r": 42, "j": "job-1", "k": sent.key, "s": to_us(INSTANT), "f": 7, "a": 3}
    ).encode()
    assert Envelope.decode(earlier) == sent


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"garbage",
        b"E2 42 7 3 1893499200123456 5 job-1job-1:0",  # a layout this release does not know
        b"E1 42 7 3 1893499200123456 5 job-1",  # no key after the job id
        b"E1 42 7 3 1893499200123456 0 job-1:0",  # no job id
        b"E1 42 seven 3 1893499200123456 5 job-1job-1:0",
        b"E1 42 7 3",
        b"\xff\xfe",
        b'{"r": 1}',
    ],
)
def test_anything_else_is_refused_with_value_error(data: bytes) -> None:
    # KeyError is what an incomplete JSON object raises; the queues drop both kinds as poison.
    with pytest.raises((ValueError, KeyError)):
        Envelope.decode(data)
