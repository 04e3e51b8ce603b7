"""Partitions of the job space: which one a job belongs to, and the records of their leases.

Every job belongs to one of P partitions (P is set when the database is created; ADR 0015).
A scheduler claims the jobs of the partitions it holds a lease on, so schedulers do not scan or
race for each other's jobs. The partition is a pure function of the job id and P, so every
process, and the SQL that repartitions a database, computes the same one.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from datetime import datetime

DEFAULT_PARTITIONS = 64
MAX_PARTITIONS = 1024  # a due-scan unions one index range per partition held: keep it bounded

_HEX_TAIL = re.compile(r"[0-9a-fA-F]{8}\Z")


def partition_of(job_id: str, partitions: int) -> int:
    """The partition of a job: the last 32 bits of its id, modulo `partitions`.

    tickwork's ids end in random bits (`services.rules.new_job_id`: a millisecond timestamp,
    then 80 random bits, incremented within one millisecond), so this spreads jobs evenly, and
    a burst of ids made in one millisecond goes round the partitions one by one. An id that
    does not end in 8 hex digits (only a caller that builds jobs itself makes one) is hashed
    with CRC-32 instead.
    """
    tail = job_id[-8:]
    bits = int(tail, 16) if _HEX_TAIL.match(tail) else zlib.crc32(job_id.encode())
    return bits % partitions


def check_partitions(partitions: int) -> int:
    """`partitions`, or ValueError saying what a valid count is."""
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be from 1 to {MAX_PARTITIONS}, got {partitions}")
    return partitions


@dataclass(frozen=True, kw_only=True, slots=True)
class DueHead:
    """A partition's oldest due job that nobody has claimed yet. Its age is the partition's
    lag; and since a claim moves a job on (to its next occurrence, or out of the due index), a
    head that stays the same tells that nobody is claiming in that partition."""

    job_id: str
    due_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class PartitionLease:
    """One partition's lease as the store holds it. `epoch` goes up by one at every change of
    owner, so a claim made under an older epoch is a claim by a former owner."""

    partition: int
    owner: str | None  # None: released, or never taken
    epoch: int
    expires_at: datetime  # by the database's clock
    renewed_at: datetime | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeIdentity:
    """Who a process is, for its heartbeat: set once at start."""

    host: str
    pid: int
    version: str
    started_at: datetime


@dataclass(frozen=True, kw_only=True, slots=True)
class Node:
    """A scheduler or worker process as it last announced itself (the cluster view)."""

    id: str
    role: str  # "scheduler" or "worker"
    host: str
    pid: int
    version: str
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime  # no heartbeat by then: the node is gone
    info: dict[str, object]  # role-specific figures (fires per minute, in flight, queue, ...)
