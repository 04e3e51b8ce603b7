"""The one place time comes from.

Services take a `Clock` instead of calling `datetime.now()`, so tests can drive time by hand
(`ManualClock`) and the fire path can be replayed deterministically. All instants are aware
datetimes in UTC; local time exists only inside cron evaluation (`tickwork.timing`).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware, in UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to; for tests."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def set(self, when: datetime) -> None:
        self._now = when.astimezone(UTC)

    def advance(self, delta: timedelta) -> None:
        self._now += delta


def to_us(when: datetime) -> int:
    """Microseconds since the Unix epoch; how the stores keep instants (see ADR 0003)."""
    if when.tzinfo is None:
        raise ValueError("naive datetime: tickwork only handles aware instants")
    delta = when - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def utc_iso(when: datetime) -> str:
    """ISO-8601 in UTC with a trailing Z, milliseconds (truncated) only when the time has a
    fraction of a second. isoformat, not strftime: this runs for every webhook sent, and
    strftime cost a worker 3-4 % of its CPU (py-spy, 2,000 webhooks/s)."""
    naive = when.astimezone(UTC).replace(tzinfo=None)
    return naive.isoformat(timespec="milliseconds" if naive.microsecond else "seconds") + "Z"


def monotonic_s() -> float:
    return time.monotonic()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
