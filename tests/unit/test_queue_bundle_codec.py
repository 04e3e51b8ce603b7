"""queue/bundles.py: how envelopes are grouped into messages and read back (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.domain.runs import Envelope
from tickwork.queue.bundles import messages_for, pack, unpack

AT = datetime(2030, 1, 1, tzinfo=UTC)


def envelope(n: int, *, key: str | None = None) -> Envelope:
    return Envelope(
        run_id=n,
        job_id=f"job-{n}",
        key=key if key is not None else f"job-{n}:{n}",
        scheduled_for=AT + timedelta(seconds=n),
        fence_token=1,
        attempt=1,
    )


def read_back(messages: list[tuple[bytes, str]]) -> list[Envelope]:
    return [e for body, _ in messages for e in unpack(body)]


@given(count=st.integers(min_value=0, max_value=200), size=st.integers(min_value=1, max_value=70))
def test_envelopes_come_back_in_order_in_bundles_of_at_most_size(count: int, size: int) -> None:
    sent = [envelope(n) for n in range(count)]
    messages = pack(sent, size)
    assert read_back(messages) == sent
    assert len(messages) == -(-count // size)  # as few messages as the size allows
    assert all(len(unpack(body)) <= size for body, _ in messages)


def test_a_message_of_one_is_the_envelopes_own_encoding() -> None:
    # What a worker of an earlier release reads, and what bundle=1 sends.
    one = envelope(1)
    assert pack([one], 64) == [(one.encode(), one.msg_id)]
    assert pack([one, envelope(2)], 1) == [
        (one.encode(), one.msg_id),
        (envelope(2).encode(), envelope(2).msg_id),
    ]


def test_a_bundles_msg_id_is_its_first_envelopes_and_its_count() -> None:
    sent = [envelope(n) for n in range(5)]
    assert [msg_id for _, msg_id in pack(sent, 3)] == [f"{sent[0].msg_id}+3", f"{sent[3].msg_id}+2"]
    assert pack(sent, 3) == pack(sent, 3)  # the same batch again: the same ids (deduplicated)


def test_an_envelope_with_a_newline_goes_alone_between_bundles() -> None:
    odd = envelope(2, key="job-2:one\ntwo")
    sent = [envelope(0), envelope(1), odd, envelope(3)]
    messages = pack(sent, 64)
    assert [len(unpack(body)) for body, _ in messages] == [2, 1, 1]
    assert read_back(messages) == sent
    assert messages[1] == (odd.encode(), odd.msg_id)


@pytest.mark.parametrize(
    "body",
    [
        b"B1 3\n" + envelope(0).encode() + b"\n" + envelope(1).encode(),  # fewer than it says
        b"B1 1",  # no lines at all
        b"B1 x\n" + envelope(0).encode(),
        b"B1 2\n" + envelope(0).encode() + b"\nnot an envelope",
    ],
)
def test_a_bundle_that_does_not_add_up_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError, match=r"\S"):  # each says what is wrong
        unpack(body)


def test_a_json_envelope_of_an_earlier_release_still_reads() -> None:
    one = envelope(7)
    old = b'{"r":7,"j":"job-7","k":"job-7:7","s":%d,"f":1,"a":1}' % int(
        (AT + timedelta(seconds=7)).timestamp() * 1e6
    )
    assert unpack(old) == [one]
    assert unpack(replace(one, attempt=2).encode()) == [replace(one, attempt=2)]


@pytest.mark.parametrize(
    ("fires", "size", "messages"), [(1000, 64, 15), (64, 64, 1), (63, 64, 1), (1, 64, 1), (9, 1, 9)]
)
def test_a_fetch_asks_for_the_bundles_that_fit_and_at_least_one(
    fires: int, size: int, messages: int
) -> None:
    assert messages_for(fires, size) == messages
