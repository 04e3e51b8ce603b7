"""Which outbound proxy, if any, a webhook request goes through: pure rules, no I/O.

Sources, the first that says something wins:

1. the `webhook_proxy` setting: a proxy URL (`http://user:pass@proxy.internal:3128`) for every
   target, or `direct` (also `none`) for no proxy whatever the environment says;
2. the standard environment variables: `HTTPS_PROXY` for https:// targets, `HTTP_PROXY` for
   http:// ones (the lowercase spellings win over the uppercase ones, as in curl and Python's
   urllib).

`NO_PROXY` (or `no_proxy`) names the targets that go direct in either case: `*` (all), a host
name that also covers the names below it (`example.com` and `.example.com` both cover
`a.example.com`), an IP address or CIDR network (compared with a literal address host), each
optionally with `:port`.

A proxy is an `http://` URL (the connection to the proxy itself is plain TCP; https targets
still get end-to-end TLS inside a CONNECT tunnel). Credentials in the URL become a
`Proxy-Authorization: Basic` header; they are kept out of every repr and message.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote

from yarl import URL

__all__ = [
    "DIRECT_WORDS",
    "BadProxy",
    "NoProxy",
    "Proxy",
    "ProxyRoutes",
    "parse_proxy",
    "routes_from",
]

DIRECT_WORDS: Final = frozenset({"direct", "none"})
_DEFAULT_PROXY_PORT = 80


class BadProxy(ValueError):
    """A proxy URL that cannot be used; `source` names the setting or variable. The message
    never repeats the URL (it may hold a password)."""

    def __init__(self, source: str, detail: str) -> None:
        super().__init__(f"{source}: {detail}")
        self.source = source
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Proxy:
    """One proxy: where it is, and the header that authenticates to it (if any)."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)

    @property
    def shown(self) -> str:
        """The proxy as it may appear in a message or a log: never its credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def key(self) -> str:
        """Tells proxies apart in the connection pool (credentials included: two users of one
        proxy do not share a tunnel)."""
        return f"{self.host}:{self.port}:{self.authorization or ''}"


def parse_proxy(text: str, *, source: str) -> Proxy:
    """A proxy URL; raises BadProxy naming `source` (the setting or variable) and the fix."""
    candidate = text.strip()
    if "://" not in candidate:
        candidate = f"http://{candidate}"  # `proxy:3128`, as curl and most tools accept
    hint = "give an http:// URL such as http://proxy.internal:3128 (or direct for no proxy)"
    try:
        url = URL(candidate)
        port = url.port
    except ValueError as exc:
        raise BadProxy(source, f"not a URL ({type(exc).__name__}); {hint}") from None
    if url.scheme != "http":
        raise BadProxy(source, f"scheme {url.scheme!r} is not supported; {hint}")
    if not url.raw_host:
        raise BadProxy(source, f"no host; {hint}")
    if url.raw_path not in ("", "/") or url.raw_query_string or url.raw_fragment:
        raise BadProxy(source, f"a proxy URL has no path, query or fragment; {hint}")
    authorization = None
    if url.raw_user is not None:
        pair = f"{unquote(url.raw_user)}:{unquote(url.raw_password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    return Proxy(
        host=url.raw_host.lower(), port=port or _DEFAULT_PROXY_PORT, authorization=authorization
    )


@dataclass(frozen=True, slots=True)
class _NoProxyEntry:
    name: str | None  # a host name, covering the names below it
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    port: int | None

    def covers(self, host: str, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            try:
                address = ipaddress.ip_address(host)
            except ValueError:
                return False
            return address.version == self.network.version and address in self.network
        assert self.name is not None
        return host == self.name or host.endswith(f".{self.name}")


@dataclass(frozen=True, slots=True)
class NoProxy:
    """The parsed NO_PROXY list."""

    everything: bool = False
    entries: tuple[_NoProxyEntry, ...] = ()

    @classmethod
    def parse(cls, text: str) -> NoProxy:
        entries: list[_NoProxyEntry] = []
        for raw in text.split(","):
            item = raw.strip().lower()
            if not item:
                continue
            if item == "*":
                return cls(everything=True)
            entries.append(_no_proxy_entry(item))
        return cls(entries=tuple(entries))

    def covers(self, host: str, port: int) -> bool:
        host = host.lower().strip("[]").rstrip(".")
        return self.everything or any(e.covers(host, port) for e in self.entries)


def _no_proxy_entry(item: str) -> _NoProxyEntry:
    port: int | None = None
    host = item
    if item.startswith("["):  # [2001:db8::1]:8080
        inside, _, rest = item[1:].partition("]")
        host = inside
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
    elif item.count(":") == 1:  # name:port or v4:port (more colons: a bare IPv6 address)
        name, _, digits = item.partition(":")
        if digits.isdigit():
            host, port = name, int(digits)
    try:
        return _NoProxyEntry(None, ipaddress.ip_network(host, strict=False), port)
    except ValueError:
        return _NoProxyEntry(host.lstrip("*").lstrip(".").rstrip("."), None, port)


@dataclass(frozen=True, slots=True)
class ProxyRoutes:
    """The proxy for each target scheme, and the targets that skip it."""

    http: Proxy | None = None
    https: Proxy | None = None
    no_proxy: NoProxy = field(default_factory=NoProxy)

    @property
    def any(self) -> bool:
        return self.http is not None or self.https is not None

    def proxy_for(self, scheme: str, host: str, port: int) -> Proxy | None:
        """The proxy a request to scheme://host:port goes through; None: direct."""
        proxy = self.https if scheme == "https" else self.http
        if proxy is None or self.no_proxy.covers(host, port):
            return None
        return proxy


def routes_from(setting: str | None, environ: Mapping[str, str]) -> ProxyRoutes:
    """The routes from the `webhook_proxy` setting (None or empty: not set) and the process's
    environment. Raises BadProxy naming the setting or variable that is malformed."""
    no_proxy = NoProxy.parse(_env(environ, "no_proxy") or "")
    if setting is not None and setting.strip():
        if setting.strip().lower() in DIRECT_WORDS:
            return ProxyRoutes()
        proxy = parse_proxy(setting, source="webhook_proxy")
        return ProxyRoutes(http=proxy, https=proxy, no_proxy=no_proxy)
    routes: dict[str, Proxy | None] = {}
    for scheme in ("http", "https"):
        name = f"{scheme}_proxy"
        text = _env(environ, name)
        routes[scheme] = None if not text else parse_proxy(text, source=_env_name(environ, name))
    return ProxyRoutes(http=routes["http"], https=routes["https"], no_proxy=no_proxy)


def _env(environ: Mapping[str, str], lower: str) -> str | None:
    """The lowercase variable if set, else the uppercase one."""
    value = environ.get(lower)
    if value is None:
        value = environ.get(lower.upper())
    return value.strip() if value is not None else None


def _env_name(environ: Mapping[str, str], lower: str) -> str:
    return lower if lower in environ else lower.upper()
