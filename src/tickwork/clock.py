"""The one place time comes from.

Services take a `Clock` instead of calling `datetime.now()` or `time.monotonic()`, so tests
can drive time by hand (`ManualClock`) and the fire path can be replayed deterministically.
All instants are aware datetimes in UTC; local time exists only inside cron evaluation
(`tickwork.timing`). Intervals that must not jump with the wall clock (the scheduler's
periodic scan from the bottom, the webhook client's idle connections) read `monotonic_s()`.

Some code keeps other clocks on purpose. The store's LISTEN connection logs how long an outage
lasted with `time.monotonic()` (store/pg_listen.py: a log line, not a decision), and the test
harness's start deadlines (testing.py) measure real waiting for a real process, whatever clock
the service under test runs on. Code that arms event-loop timers measures on the loop's own
monotonic clock, `loop.time()` (the executor's scan and heartbeat rounds, task deadlines, the
memory queue), because that is the clock those timers fire on: a ManualClock could not wake
them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware, in UTC."""
        ...

    def monotonic_s(self) -> float:
        """Seconds on a clock that never goes back, from an arbitrary origin: for intervals
        and deadlines, which must not jump when the wall clock is stepped; never for instants."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic_s(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that only moves when told to; for tests.

    Its monotonic reading starts at 0.0 and moves with `now()` while `now()` moves forward:
    `advance(d)` and `set(later)` move both by the same amount. Moving `now()` back (`set` to
    an earlier instant, `advance` by a negative delta) leaves the monotonic reading where it
    is, as a stepped-back system clock leaves `time.monotonic()`: monotonic never decreases.
    """

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("ManualClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._monotonic_s = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic_s(self) -> float:
        return self._monotonic_s

    def set(self, when: datetime) -> None:
        when = when.astimezone(UTC)
        forward_s = (when - self._now).total_seconds()
        if forward_s > 0:
            self._monotonic_s += forward_s
        self._now = when

    def advance(self, delta: timedelta) -> None:
        self.set(self._now + delta)


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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
