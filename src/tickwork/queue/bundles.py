"""Several envelopes in one queue message (NATS JetStream, Redis Streams).

On a broker every message has a fixed cost: the scheduler publishes it and reads its
acknowledgement, the broker stores and deletes it, the worker pulls it, reads its delivery
count and acks it. In a NATS burst that was about a quarter of the scheduler's and the worker's
CPU per fire, and nats-server's 17 µs (docs/benchmarks.md). A bundle carries up to `size`
consecutive envelopes of one publish, so those costs are paid once per bundle (ADR 0037).

Body of a bundle of n >= 2: the line `B1 <n>`, then the n envelopes' own bodies
(`Envelope.encode`), each on its own line. A single envelope's body is its own encoding, so a
message of one is what `bundle=1` sends, one message per envelope. An envelope whose encoding
holds a newline (a job id or key with one in it) always travels alone: the lines of a bundle
are split on newlines.

Pure functions, no I/O: the backends call them.
"""

from __future__ import annotations

from collections.abc import Sequence

from tickwork.domain.runs import Envelope

BUNDLE_TAG = b"B1 "
# Envelopes per message by default: a claim batch of 1,000 goes out as 16 messages.
DEFAULT_BUNDLE = 64
MAX_BUNDLE = 1000  # no bundle beyond a claim batch: one message stays a few tens of kB at most


def pack(envelopes: Sequence[Envelope], size: int) -> list[tuple[bytes, str]]:
    """The messages for `envelopes`, in order: (body, msg_id) for each group of up to `size`
    consecutive envelopes. A bundle's msg_id is its first envelope's with `+<n>` appended: a
    publish of the same batch again (the only way the same bundle is formed twice) repeats it,
    so a deduplicating broker drops it as it drops a single envelope sent twice."""
    messages: list[tuple[bytes, str]] = []
    group: list[tuple[bytes, Envelope]] = []

    def close_group() -> None:
        if len(group) == 1:
            messages.append((group[0][0], group[0][1].msg_id))
        elif group:
            head = BUNDLE_TAG + str(len(group)).encode()
            body = b"\n".join([head, *(line for line, _ in group)])
            messages.append((body, f"{group[0][1].msg_id}+{len(group)}"))
        group.clear()

    for envelope in envelopes:
        line = envelope.encode()
        if b"\n" in line:  # it would split: alone, between the bundles around it
            close_group()
            messages.append((line, envelope.msg_id))
            continue
        group.append((line, envelope))
        if len(group) >= size:
            close_group()
    close_group()
    return messages


def unpack(body: bytes) -> list[Envelope]:
    """The envelopes of one message (a bundle, or one envelope alone). Raises ValueError (or
    KeyError, from an incomplete JSON envelope) for anything else: the backends drop such a
    message as poison."""
    if not body.startswith(BUNDLE_TAG):
        return [Envelope.decode(body)]
    head, *lines = body.split(b"\n")
    if not lines or int(head[len(BUNDLE_TAG) :]) != len(lines):
        raise ValueError(f"a bundle whose line count is not its header's: {head[:20]!r}")
    return [Envelope.decode(line) for line in lines]


def messages_for(fires: int, size: int) -> int:
    """How many messages to ask a broker for when there is room for `fires`, each message
    carrying up to `size`: rounded down, so that full bundles fit the room, and at least one,
    so that a room smaller than a bundle is overshot by less than one bundle."""
    return max(1, fires // size)
