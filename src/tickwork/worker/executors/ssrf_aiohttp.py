"""The SSRF guard (`ssrf.py`) for code that embeds aiohttp: a resolver and a connector.

tickwork's worker sends webhooks with its own client (`http1.py`) and does not use these; they
are kept apart from `ssrf.py` so that a worker does not import aiohttp. They guard an aiohttp
client at two points (with `ssrf.check_url_host` on the URL as the third):

1. `GuardedResolver` resolves a hostname once and hands aiohttp only the permitted addresses.
   aiohttp connects to exactly the addresses its resolver returned, so there is no window in
   which a second DNS answer (rebinding) could swap in a private address.
2. aiohttp does not call the resolver for IP-literal hosts (`TCPConnector._resolve_host`
   short-circuits them), so `guarded_connector` also installs a socket factory that checks
   every address just before a socket is created for it: the last word, whatever path the
   address took (literal IP, DNS cache, happy-eyeballs fallback, a proxy).

The guard's refusals are OSErrors, so aiohttp reports them as a ClientConnectorError whose
`os_error` is ours; `ssrf.refusal_of` digs it out. Pass `allow_redirects=False` so that no
redirect hop escapes the guard.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from tickwork.worker.executors.ssrf import AddressPolicy, AddrInfo, ForbiddenAddress, ForbiddenHost


class GuardedResolver(AbstractResolver):
    """Resolves with `inner` once and returns only the addresses `policy` permits.

    The default inner resolver is aiohttp's ThreadedResolver (the system's getaddrinfo, so
    /etc/hosts applies), chosen explicitly so behaviour does not change if aiodns gets installed.
    """

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._inner = inner

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self._inner is None:
            # Created on first use: ThreadedResolver needs the running loop.
            self._inner = ThreadedResolver()
        results = await self._inner.resolve(host, port, family)
        kept, refused = self._partition(results)
        if not kept:
            raise ForbiddenHost(host, refused)
        return kept

    def _partition(
        self, results: Sequence[ResolveResult]
    ) -> tuple[list[ResolveResult], list[ForbiddenAddress]]:
        kept: list[ResolveResult] = []
        refused: list[ForbiddenAddress] = []
        for result in results:
            try:
                self._policy.check(ipaddress.ip_address(result["host"]))
            except ForbiddenAddress as exc:
                refused.append(exc)
            else:
                kept.append(result)
        return kept, refused

    async def close(self) -> None:
        if self._inner is not None:
            await self._inner.close()


def guarded_socket_factory(policy: AddressPolicy) -> Callable[[AddrInfo], socket.socket]:
    """A socket factory for aiohttp that refuses to create a socket for a forbidden address."""

    def create(addr_info: AddrInfo) -> socket.socket:
        family, kind, proto, _canonname, sockaddr = addr_info
        policy.check(ipaddress.ip_address(sockaddr[0]))
        return socket.socket(family, kind, proto)

    return create


def guarded_connector(
    policy: AddressPolicy, *, resolver: AbstractResolver | None = None, **kw: Any
) -> aiohttp.TCPConnector:
    """A TCPConnector that reaches only addresses `policy` permits.

    `resolver`, if given, becomes the inner resolver; other keywords go to TCPConnector.
    The connector does not close a resolver it was handed: close `resolver` yourself if it
    holds resources (the default one holds none).
    """
    if "socket_factory" in kw:
        raise TypeError("guarded_connector: socket_factory is the guard's own; do not pass one")
    return aiohttp.TCPConnector(
        resolver=GuardedResolver(policy, resolver),
        socket_factory=guarded_socket_factory(policy),
        **kw,
    )
