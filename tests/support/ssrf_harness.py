"""What the SSRF tests fire with: a tripwire on the event loop and the path fires take.

`install_tripwire` records every address a socket of the running loop connects to and refuses
any outside loopback (a mapped ::ffff:127.x counts as loopback), and refuses any name lookup the
loop is asked for: tests answer names with `StubResolver`, so nothing, not even a DNS query,
leaves the machine when the guard under test is broken. `fire_once` sends one fire through a
real `WebhookRunner` (its `Http1Client` and the guard), as a worker does.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tickwork.domain.jobs import WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.worker.base import Attempt
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.webhook import WebhookRunner

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass
class Tripwire:
    connects: list[tuple[str, int]] = field(default_factory=list)
    lookups: list[str] = field(default_factory=list)  # names the loop was asked to resolve


def _is_loopback(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def install_tripwire(monkeypatch: pytest.MonkeyPatch) -> Tripwire:
    """Put the tripwire on the running loop (undone with `monkeypatch`)."""
    loop = asyncio.get_running_loop()
    real_connect, real_getaddrinfo = loop.sock_connect, loop.getaddrinfo
    wire = Tripwire()

    async def sock_connect(sock: socket.socket, address: Any) -> None:
        wire.connects.append((address[0], address[1]))
        if not _is_loopback(address[0]):
            raise OSError(f"test tripwire: refused to connect to {address[0]}")
        await real_connect(sock, address)

    async def getaddrinfo(host: Any, port: Any, *args: Any, **kw: Any) -> Any:
        try:
            ipaddress.ip_address(str(host))
        except ValueError:
            wire.lookups.append(str(host))
            message = f"test tripwire: no lookup of {host!r}"
            raise socket.gaierror(socket.EAI_NONAME, message) from None
        # A literal: numeric parsing only, never a query.
        kw["flags"] = kw.get("flags", 0) | socket.AI_NUMERICHOST
        return await real_getaddrinfo(host, port, *args, **kw)

    monkeypatch.setattr(loop, "sock_connect", sock_connect)
    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    return wire


# -- firing -------------------------------------------------------------------------------------


class StubResolver:
    """Answers from a table (or a list of successive tables) and counts lookups."""

    def __init__(self, *answers: Mapping[str, Sequence[str]]) -> None:
        self._answers = list(answers)
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        table = self._answers[min(len(self.asked), len(self._answers)) - 1]
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, f"stub resolver: no answer for {host!r}")
        return table[host]


def fire_for(url: str, *, headers: Mapping[str, str] | None = None, method: str = "POST") -> Fire:
    target = WebhookTarget(url=url, method=method, headers=dict(headers or {}), timeout_s=5)
    return Fire(
        run_id=1, job_id="job-ssrf", key="job-ssrf:20260301T120000Z",
        scheduled_for=NOW, fence_token=1, attempt=1, target=target,
        lease_until=NOW + timedelta(minutes=1),
    )  # fmt: skip


async def fire_once(
    url: str, *, allow: Sequence[str] = (), resolve: StubResolver | None = None,
    headers: Mapping[str, str] | None = None, method: str = "POST",
) -> Attempt:  # fmt: skip
    async with WebhookRunner(
        policy=AddressPolicy(allow=allow), resolve=resolve or StubResolver({})
    ) as runner:
        return await runner(fire_for(url, headers=headers, method=method))


def assert_refused_by_guard(attempt: Attempt, phrase: str) -> None:
    assert attempt.ok is False
    assert attempt.http_status is None
    assert attempt.retryable is False  # asking again would be refused again
    assert attempt.error is not None
    assert attempt.error.startswith("refused by the SSRF guard: "), attempt.error
    assert phrase in attempt.error, attempt.error
