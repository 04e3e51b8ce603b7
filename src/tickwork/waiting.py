"""Waiting for the first of several asyncio events, with a timeout (the loops' sleeps)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence


async def first_of(events: Sequence[asyncio.Event], timeout_s: float) -> None:
    """Return once one of `events` is set, or after `timeout_s`; at once if one already is."""
    if timeout_s <= 0 or any(event.is_set() for event in events):
        return
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
