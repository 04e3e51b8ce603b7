"""The SSRF guard: webhook requests reach public addresses only, unless an operator allows more.

A job's URL is user input, so without a guard any API user could make tickwork's workers call
the cloud metadata service (169.254.169.254), the database on 10.0.0.5 or an admin port on
127.0.0.1. The guard checks the address that is actually connected to, never the URL's text
(`0x7f000001`, `2130706433` and `127.1` all reach 127.0.0.1).

The worker's own HTTP client (`http1.py`, ADR 0010) applies this module's pieces itself:
`check_url_host` on the URL, one resolution per new connection keeping only the addresses
`AddressPolicy.check` permits, and that check again on the exact address each socket connects
to. `check_url_host` refuses a bad scheme or a forbidden literal address before the request,
with a clear message; the API uses it to reject such URLs when a job is created. Redirects are
not followed, so no hop escapes.

The same guard for code that embeds aiohttp (a resolver and a connector) lives in
`ssrf_aiohttp.py`, apart, so that a worker, which never uses aiohttp, does not import it: that
import cost a restarted worker about 90 ms before its first fire.

Exceptions (all are OSError, so aiohttp reports them as a ClientConnectorError whose
`os_error` is ours; `refusal_of` digs it out):

TickworkError, OSError
 +-- EgressRefused        base: the guard refused the destination; never worth a retry
      +-- ForbiddenAddress   one address is not permitted (`ip`, `reason`)
      +-- ForbiddenHost      every address a name resolved to was refused (`host`, `refused`)
      +-- ForbiddenURL       refused before any lookup: scheme or host form (`url`, `reason`)
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from yarl import URL

from tickwork.domain.masking import mask_url
from tickwork.errors import TickworkError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]

ALLOWED_SCHEMES = frozenset({"http", "https"})

# -- exceptions ---------------------------------------------------------------------------------


class EgressRefused(TickworkError, OSError):
    """The SSRF guard refused a destination. A policy decision: retrying cannot help."""

    code = "egress_refused"

    def __init__(self, message: str) -> None:
        # errno None: this is not an operating-system failure, and OSError's (errno, strerror)
        # form is what aiohttp's ClientConnectorError prints.
        OSError.__init__(self, None, message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ForbiddenAddress(EgressRefused):
    def __init__(self, ip: IPAddress, reason: str) -> None:
        super().__init__(
            f"refused to connect to {ip}: {reason} (webhooks may only reach public addresses;"
            " an operator can allow a network explicitly)"
        )
        self.ip = ip
        self.reason = reason


class ForbiddenHost(EgressRefused):
    def __init__(self, host: str, refused: Sequence[ForbiddenAddress]) -> None:
        detail = "; ".join(f"{r.ip}: {r.reason}" for r in refused) or "no addresses"
        super().__init__(
            f"refused to connect to {host!r}: it resolves only to forbidden addresses ({detail})"
        )
        self.host = host
        self.refused = tuple(refused)


class ForbiddenURL(EgressRefused):
    def __init__(self, url: str, reason: str) -> None:
        # The message reaches run history and logs: never with the URL's password.
        super().__init__(f"refused URL {mask_url(url)[:200]!r}: {reason}")
        self.url = url
        self.reason = reason


def refusal_of(exc: BaseException) -> EgressRefused | None:
    """The guard's refusal behind an aiohttp error (or the error itself), else None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, EgressRefused):
            return current
        seen.add(id(current))
        os_error = getattr(current, "os_error", None)  # aiohttp.ClientConnectorError
        current = os_error if isinstance(os_error, BaseException) else current.__cause__
    return None


# -- the address policy -------------------------------------------------------------------------

# Checked in order; the first match names the reason. Explicit CIDRs rather than only
# `ipaddress.is_global`, which has gaps (Python 3.11: 192.0.0.192 and 64:ff9b::7f00:1 count as
# global) and changes between Python releases. `is_global` still runs afterwards as a backstop.
_IPV4_DENY: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "'this network' (0/8, includes the unspecified address 0.0.0.0)"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private network (RFC 1918)"),
    ("172.16.0.0/12", "private network (RFC 1918)"),
    ("192.168.0.0/16", "private network (RFC 1918)"),
    # Carrier-grade NAT space; also where Alibaba Cloud's metadata service lives (100.100.100.200).
    ("100.64.0.0/10", "shared address space (CGNAT, RFC 6598)"),
    # 169.254.169.254 is the metadata service of AWS, GCP, Azure, OpenStack and others.
    ("169.254.0.0/16", "link-local (cloud metadata services live here)"),
    ("192.0.0.0/24", "IETF protocol assignments (RFC 6890)"),
    ("192.0.2.0/24", "documentation (TEST-NET-1)"),
    ("198.51.100.0/24", "documentation (TEST-NET-2)"),
    ("203.0.113.0/24", "documentation (TEST-NET-3)"),
    ("192.88.99.0/24", "6to4 relay anycast (deprecated, RFC 7526)"),
    ("198.18.0.0/15", "benchmarking (RFC 2544)"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved (240/4)"),
)

_IPV6_DENY: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified address"),
    ("::1/128", "loopback"),
    ("100::/64", "discard-only (RFC 6666)"),
    # Local-use NAT64 (RFC 8215): translates into whatever the local network routes.
    ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
    # Teredo tunnels to an obfuscated IPv4 client address; obsolete, never a webhook endpoint.
    ("2001::/32", "Teredo tunnel (RFC 4380)"),
    ("2001:2::/48", "benchmarking (RFC 5180)"),
    ("2001:db8::/32", "documentation (RFC 3849)"),
    ("3fff::/20", "documentation (RFC 9637)"),
    # The rest of 2001::/23 (ORCHID, AMT, AS112, ...): infrastructure, not webhook endpoints.
    ("2001::/23", "IETF protocol assignments (RFC 2928)"),
    # fd00:ec2::254 is AWS's IPv6 metadata endpoint.
    ("fc00::/7", "unique local address (ULA, the IPv6 private range)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
)

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")


def _compile(rules: tuple[tuple[str, str], ...]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(cidr), reason) for cidr, reason in rules)


_DENY_V4 = _compile(_IPV4_DENY)
_DENY_V6 = _compile(_IPV6_DENY)


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address really leads to, with the form's name, if it has one.

    Each form carries an IPv4 destination in its bits, and Python's `is_global` judges the IPv6
    wrapper, not the destination (`64:ff9b::7f00:1` is "global" yet NAT64s to 127.0.0.1).
    """
    if ip.ipv4_mapped is not None:  # ::ffff:a.b.c.d, what a dual-stack socket uses for IPv4
        return ip.ipv4_mapped, "IPv4-mapped"
    if ip in _NAT64:  # 64:ff9b::a.b.c.d, translated to IPv4 by a NAT64 gateway (RFC 6052)
        return ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF), "NAT64"
    if ip.sixtofour is not None:  # 2002:AABB:CCDD::, tunnelled to IPv4 AA.BB.CC.DD (RFC 3056)
        return ip.sixtofour, "6to4"
    if int(ip) >> 32 == 0 and int(ip) > 1:  # ::a.b.c.d, deprecated IPv4-compatible (RFC 4291)
        return ipaddress.IPv4Address(int(ip)), "IPv4-compatible"
    return None


@dataclass(frozen=True, kw_only=True, slots=True)
class AddressPolicy:
    """Which addresses webhooks may connect to: global ones, plus the `allow` networks.

    `allow` takes CIDRs or plain addresses (e.g. "127.0.0.1/32" in tests, "10.20.0.0/16" for a
    private deployment). An allowed network also admits the IPv6 forms that embed an address
    inside it (an allowed 127.0.0.1 admits ::ffff:127.0.0.1): the destination is the same.
    """

    allow: Sequence[str] = ()
    _networks: tuple[IPNetwork, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.allow, str):
            raise TypeError("allow: pass a list of networks, e.g. ['10.0.0.0/8']")
        object.__setattr__(self, "allow", tuple(self.allow))
        object.__setattr__(self, "_networks", tuple(_parse_network(a) for a in self.allow))

    def check(self, ip: IPAddress) -> None:
        """Return if `ip` may be connected to, else raise ForbiddenAddress naming the rule."""
        if self.allows(ip):
            return
        reason = forbidden_reason(ip)
        if reason is not None:
            raise ForbiddenAddress(ip, reason)

    def allows(self, ip: IPAddress) -> bool:
        """True if `ip` (or the IPv4 address it embeds) is inside an allowed network."""
        candidates: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address):
            embedded = embedded_ipv4(ip)
            if embedded is not None:
                candidates.append(embedded[0])
        return any(
            c in net for c in candidates for net in self._networks if c.version == net.version
        )


def forbidden_reason(ip: IPAddress) -> str | None:
    """Why `ip` is not a public destination, or None if it is (allow-lists not considered)."""
    if isinstance(ip, ipaddress.IPv4Address):
        return _ipv4_reason(ip)
    for net, reason in _DENY_V6:
        if ip in net:
            return reason
    embedded = embedded_ipv4(ip)
    if embedded is not None:
        inner, form = embedded
        inner_reason = _ipv4_reason(inner)
        return None if inner_reason is None else f"{form} form of {inner}, {inner_reason}"
    if ip not in _GLOBAL_UNICAST:  # everything else outside 2000::/3 is unassigned or reserved
        return "outside IPv6 global unicast space (2000::/3)"
    return None if ip.is_global else "not globally routable (IANA special-purpose registry)"


def _ipv4_reason(ip: ipaddress.IPv4Address) -> str | None:
    for net, reason in _DENY_V4:
        if ip in net:
            return reason
    return None if ip.is_global else "not globally routable (IANA special-purpose registry)"


def _parse_network(text: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(text.strip(), strict=True)
    except ValueError as exc:
        raise ValueError(
            f"allow: {text!r} is not a network in CIDR form such as '10.0.0.0/8' or"
            f" '127.0.0.1/32' ({exc})"
        ) from None


# -- URL check (for IP literals, which aiohttp never passes to a resolver) -----------------------


def check_url_host(url: str | URL, policy: AddressPolicy) -> None:
    """Refuse a URL whose scheme is not http(s) or whose literal IP host is forbidden.

    Hostnames pass here; their addresses are checked when they are resolved. Parsed with yarl,
    the parser aiohttp itself uses, so both agree on what the host is.
    """
    try:
        parsed = url if isinstance(url, URL) else URL(url)
    except ValueError as exc:
        raise ForbiddenURL(str(url), f"not a valid URL ({exc})") from None
    text = str(url)
    if parsed.scheme not in ALLOWED_SCHEMES:
        raise ForbiddenURL(text, f"scheme {parsed.scheme!r} is not http or https")
    host = parsed.host
    if not host:
        raise ForbiddenURL(text, "no host")
    ip = _literal_ip(host)
    if ip is not None:
        policy.check(ip)
    elif _numeric_ipv4(host):
        # getaddrinfo reads 127.1, 2130706433 and 0x7f000001 as 127.0.0.1; refuse the
        # ambiguity outright (aiohttp refuses the decimal forms too).
        raise ForbiddenURL(text, f"host {host!r} is a non-canonical IPv4 address")


def _literal_ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _numeric_ipv4(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True
