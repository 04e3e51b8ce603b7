"""Pure: a job's jittered fire instant, the same on every process and after every restart.

`schedule.jitter` delays each occurrence by a pseudo-random amount so that many jobs on the
same schedule (every hour on the hour) do not hit their targets in the same millisecond. The
delay is a function of the occurrence alone, (job id, nominal instant): a scheduler that
restarts, or another scheduler that takes over the job's partition, computes the same planned
instant, so an occurrence is never fired twice at two different times nor moved by a crash.

Rules (ADR 0022):
- whole milliseconds, uniform over [0, jitter]; never before the nominal instant;
- strictly before the next occurrence: when the jitter reaches the gap to it, the range is
  scaled down to [0, gap - 1 ms], so fires stay evenly spread instead of piling up at a cap;
- the nominal instant stays the occurrence's identity (`tickwork-scheduled-for`, occurrence
  keys); only the instant the scheduler fires at moves.

No I/O, no clock: instants come in as aware datetimes.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from tickwork.clock import to_us

__all__ = [
    "JITTER_PERSON",
    "jitter_delay",
    "jitter_delay_ms",
    "occurrence_digest",
    "planned_instant",
    "uniform_index",
]

# blake2b's personalisation string: a draw for jitter never equals a draw made from the same
# occurrence for another purpose (window placement uses its own). Changing it moves every
# jittered fire of every job: it is part of the stored schedule's meaning, keep it.
JITTER_PERSON = b"tickwork.jitter1"

_US_PER_MS = 1_000


def occurrence_digest(job_id: str, nominal_us: int, *, person: bytes, size: int = 8) -> bytes:
    """`size` bytes that only depend on the occurrence and `person`.

    blake2b, not `hash()`: Python salts str hashes per process, and every process must agree.
    The instant is the last 8 bytes of the input, so no two (job id, instant) pairs collide
    in their encoding; "surrogatepass" so that any str, even one a JSON escape left with a
    lone surrogate, has an encoding."""
    data = job_id.encode("utf-8", "surrogatepass") + nominal_us.to_bytes(8, "big", signed=True)
    return hashlib.blake2b(data, digest_size=size, person=person).digest()


def uniform_index(word: bytes, count: int) -> int:
    """An index in [0, count) from uniformly random bytes: multiply and shift, not modulo, so
    every index gets the same share of the 2**64 words (to within one word)."""
    if count <= 0:
        raise ValueError(f"count must be positive, got {count}")
    return (int.from_bytes(word, "big") * count) >> (8 * len(word))


def jitter_delay_ms(
    job_id: str, nominal_us: int, jitter_ms: int, *, next_nominal_us: int | None
) -> int:
    """The delay in whole milliseconds; the integer form of `jitter_delay`."""
    if jitter_ms < 0:
        raise ValueError(f"jitter_ms must be 0 or more, got {jitter_ms}")
    longest_ms = jitter_ms
    if next_nominal_us is not None:
        gap_us = next_nominal_us - nominal_us
        if gap_us <= 0:
            raise ValueError("next_nominal must be after nominal")
        # The largest whole-millisecond delay strictly shorter than the gap.
        longest_ms = min(longest_ms, -(-gap_us // _US_PER_MS) - 1)
    if longest_ms == 0:
        return 0
    digest = occurrence_digest(job_id, nominal_us, person=JITTER_PERSON)
    return uniform_index(digest, longest_ms + 1)


def jitter_delay(
    job_id: str, nominal: datetime, jitter_ms: int, *, next_nominal: datetime | None
) -> timedelta:
    """How long after `nominal` this occurrence fires: in [0, jitter_ms] ms, below the gap to
    `next_nominal` (None: a one-shot or the last occurrence, nothing to stay clear of)."""
    next_us = None if next_nominal is None else to_us(next_nominal)
    delay_ms = jitter_delay_ms(job_id, to_us(nominal), jitter_ms, next_nominal_us=next_us)
    return timedelta(milliseconds=delay_ms)


def planned_instant(
    job_id: str, nominal: datetime, jitter_ms: int, *, next_nominal: datetime | None
) -> datetime:
    """The instant the scheduler fires this occurrence at: nominal + its jitter delay."""
    return nominal + jitter_delay(job_id, nominal, jitter_ms, next_nominal=next_nominal)
