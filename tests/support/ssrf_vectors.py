"""The SSRF vector table: URL forms a webhook could use to reach an address it must not, as data.

Two test modules read it: tests/integration/test_ssrf_vectors.py fires each vector through the
worker's real client against counting servers on loopback, and
tests/integration/test_api_ssrf_vectors.py sends each to the API's create-time check.

`{port}` in a URL stands for the counting servers' port (the same on every loopback address they
listen on), so a vector that slipped through would land on a socket that counts it. Names are
answered by the table in `names` only (a stub resolver: no DNS query ever leaves the machine);
each maps to the address that makes the vector dangerous, the worst a resolver could answer.

Public destinations are never used: the stand-in for "a public receiver" is 127.0.0.2 with the
policy allowing exactly 127.0.0.2/32, so a permitted connection still stays on this machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

# What POST /v1/jobs answers for the vector's URL: 422 `forbidden_address` (the create-time
# check can already tell), 422 `invalid_url` (not an http(s) URL at all), or 201 (a name: only
# its answer at fire time can tell).
AtCreate = Literal["forbidden_address", "invalid_url", "accepted"]

PUBLIC_STAND_IN = "127.0.0.2"  # the permitted receiver: a second loopback address
ALLOW_STAND_IN = (f"{PUBLIC_STAND_IN}/32",)
ALLOW_ALL_LOOPBACK = ("127.0.0.0/8", "::1/128")


@dataclass(frozen=True, kw_only=True)
class Vector:
    """One URL form the guard must refuse before any connection."""

    id: str
    family: str
    url: str  # with {port}
    refusal: str  # a phrase the guard's refusal must contain (names the rule that applied)
    at_create: AtCreate
    names: Mapping[str, Sequence[str]] = field(default_factory=dict)  # the stub resolver
    allow: tuple[str, ...] = ()  # networks the policy allows (refused all the same)


@dataclass(frozen=True, kw_only=True)
class Control:
    """A permitted request of a family: it must land on `lands_on`, so the harness can fail."""

    id: str
    family: str
    url: str
    allow: tuple[str, ...]
    lands_on: str  # the receiver's address that must count the one connection
    connects_to: str  # the address the client's socket connects to (its form may differ)
    host_header: str
    names: Mapping[str, Sequence[str]] = field(default_factory=dict)


def _literal(id: str, host: str, refusal: str) -> Vector:
    return Vector(
        id=id,
        family="literal",
        url=f"http://{host}:{{port}}/hook",
        refusal=refusal,
        at_create="forbidden_address",
    )


def _integer(id: str, host: str) -> Vector:
    # Allowed destination, refused form: getaddrinfo reads these as 127.0.0.1 (or 0.0.0.0),
    # and the guard never connects to an ambiguous form, whatever the allow-list says.
    return Vector(
        id=id,
        family="integer",
        url=f"http://{host}:{{port}}/",
        refusal="non-canonical IPv4 address",
        at_create="forbidden_address",
        allow=ALLOW_ALL_LOOPBACK,
    )


def _ipv6(id: str, host: str, refusal: str) -> Vector:
    return Vector(
        id=id,
        family="ipv6",
        url=f"http://[{host}]:{{port}}/",
        refusal=refusal,
        at_create="forbidden_address",
    )


def _name(id: str, url: str, answers: Mapping[str, Sequence[str]], at_create: AtCreate) -> Vector:
    return Vector(
        id=id,
        family="name",
        url=url,
        refusal="resolves only to forbidden addresses",
        at_create=at_create,
        names=answers,
    )


def _dns(id: str, answers: Sequence[str], refusal: str) -> Vector:
    return Vector(
        id=id,
        family="dns",
        url="http://hooks.test:{port}/hook",
        refusal=refusal,
        at_create="accepted",
        names={"hooks.test": answers},
        allow=ALLOW_STAND_IN,
    )


LOOPBACK_ANSWERS = ("127.0.0.1", "::1")

VECTORS: tuple[Vector, ...] = (
    # -- literal IPv4 addresses of every refused range ------------------------------------------
    _literal("v4-loopback", "127.0.0.1", "127.0.0.1: loopback"),
    _literal("v4-loopback-2", "127.0.0.2", "127.0.0.2: loopback"),
    _literal("v4-loopback-top", "127.255.255.254", "loopback"),
    _literal("v4-unspecified", "0.0.0.0", "'this network'"),
    _literal("v4-rfc1918-10", "10.0.0.5", "private network (RFC 1918)"),
    _literal("v4-rfc1918-172.16", "172.16.3.4", "private network (RFC 1918)"),
    _literal("v4-rfc1918-172.31", "172.31.255.254", "private network (RFC 1918)"),
    _literal("v4-rfc1918-192.168", "192.168.1.1", "private network (RFC 1918)"),
    _literal("v4-cgnat", "100.64.0.1", "shared address space"),
    _literal("v4-alibaba-metadata", "100.100.100.200", "shared address space"),
    _literal("v4-metadata", "169.254.169.254", "link-local (cloud metadata"),
    _literal("v4-oracle-metadata", "192.0.0.192", "IETF protocol assignments"),
    _literal("v4-benchmarking", "198.18.0.1", "benchmarking"),
    _literal("v4-multicast", "224.0.0.1", "multicast"),
    _literal("v4-broadcast", "255.255.255.255", "broadcast"),
    _literal("v4-reserved", "240.0.0.1", "reserved"),
    _literal("v4-documentation", "192.0.2.1", "documentation"),
    # -- integer, octal, hex, short and mixed forms of 127.0.0.1 ----------------------------------
    _integer("int-short-2", "127.1"),
    _integer("int-short-3", "127.0.1"),
    _integer("int-zero", "0"),
    _integer("int-decimal", "2130706433"),
    _integer("int-hex", "0x7f000001"),
    _integer("int-hex-upper", "0X7F000001"),
    _integer("int-octal", "017700000001"),
    _integer("int-hex-short", "0x7f.1"),
    _integer("int-octal-dotted", "0177.0.0.1"),
    _integer("int-hex-dotted", "0x7f.0.0.1"),
    _integer("int-mixed", "0177.0.0x1"),
    _integer("int-octal-short", "0177.1"),
    _integer("int-zero-padded", "127.000.000.001"),
    # -- IPv6 literals, and IPv6 forms that carry an IPv4 address -------------------------------
    _ipv6("v6-loopback", "::1", "::1: loopback"),
    _ipv6("v6-unspecified", "::", "unspecified address"),
    _ipv6("v6-loopback-long", "0:0:0:0:0:0:0:1", "::1: loopback"),
    _ipv6("v6-loopback-zone", "::1%25lo", "loopback"),
    _ipv6("v6-mapped-dotted", "::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, loopback"),
    _ipv6("v6-mapped-hex", "::ffff:7f00:1", "IPv4-mapped form of 127.0.0.1, loopback"),
    _ipv6("v6-mapped-metadata", "::ffff:169.254.169.254", "IPv4-mapped form of 169.254.169.254"),
    _ipv6("v6-nat64", "64:ff9b::7f00:1", "NAT64 form of 127.0.0.1, loopback"),
    _ipv6("v6-nat64-metadata", "64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254"),
    _ipv6("v6-6to4", "2002:7f00:1::", "6to4 form of 127.0.0.1, loopback"),
    _ipv6("v6-6to4-private", "2002:a00:5::1", "6to4 form of 10.0.0.5"),
    _ipv6("v6-compatible", "::127.0.0.1", "IPv4-compatible form of 127.0.0.1"),
    _ipv6("v6-translated", "::ffff:0:7f00:1", "outside IPv6 global unicast"),
    _ipv6("v6-link-local-zone", "fe80::1%25lo", "link-local"),
    _ipv6("v6-ula", "fc00::1", "unique local address"),
    _ipv6("v6-aws-metadata", "fd00:ec2::254", "unique local address"),
    _ipv6("v6-multicast", "ff02::1", "multicast"),
    _ipv6("v6-documentation", "2001:db8::1", "documentation"),
    # -- names and URL spellings ------------------------------------------------------------------
    _name("localhost", "http://localhost:{port}/", {"localhost": LOOPBACK_ANSWERS},
          "forbidden_address"),
    _name("localhost-upper-dot", "http://LOCALHOST.:{port}/", {"localhost.": LOOPBACK_ANSWERS},
          "forbidden_address"),
    _name("localhost-dot", "http://localhost.:{port}/", {"localhost.": LOOPBACK_ANSWERS},
          "forbidden_address"),
    _name("localhost-subdomain", "http://api.localhost:{port}/",
          {"api.localhost": LOOPBACK_ANSWERS}, "forbidden_address"),
    # A trailing dot makes the literal a name (getaddrinfo reads it as 127.0.0.1 all the same).
    _name("v4-trailing-dot", "http://127.0.0.1.:{port}/", {"127.0.0.1.": ["127.0.0.1"]},
          "accepted"),
    # A resolver that decoded percent escapes in a host would read 127.0.0.1.
    _name("percent-encoded-host", "http://%31%32%37.0.0.1:{port}/",
          {"%31%32%37.0.0.1": ["127.0.0.1"]}, "accepted"),
    # Wildcard DNS services answer the address spelled in the name.
    _name("wildcard-dns", "http://127.0.0.1.nip.test:{port}/",
          {"127.0.0.1.nip.test": ["127.0.0.1"]}, "accepted"),
    Vector(id="fullwidth-digits", family="spelling",
           url="http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11:{port}/",
           refusal="127.0.0.1: loopback", at_create="forbidden_address"),
    Vector(id="ideographic-dots", family="spelling", url="http://127\u30020\u30020\u30021:{port}/",
           refusal="127.0.0.1: loopback", at_create="forbidden_address"),
    Vector(id="circled-digits", family="spelling", url="http://\u246b\u2466.0.0.1:{port}/",
           refusal="127.0.0.1: loopback", at_create="forbidden_address"),
    Vector(id="upper-scheme", family="spelling", url="HTTP://127.0.0.1:{port}/",
           refusal="127.0.0.1: loopback", at_create="forbidden_address"),
    Vector(id="userinfo-public-name", family="spelling",
           url="http://public.example@127.0.0.1:{port}/", refusal="127.0.0.1: loopback",
           at_create="forbidden_address"),
    Vector(id="userinfo-after-fragment", family="spelling",
           url="http://127.0.0.1:{port}#@public.example/", refusal="127.0.0.1: loopback",
           at_create="forbidden_address"),
    Vector(id="userinfo-after-query", family="spelling",
           url="http://127.0.0.1:{port}?@public.example/", refusal="127.0.0.1: loopback",
           at_create="forbidden_address"),
    Vector(id="backslash-before-at", family="spelling",
           url="http://public.example\\@127.0.0.1:{port}/", refusal="not a valid URL",
           at_create="forbidden_address"),
    Vector(id="backslash-after-port", family="spelling",
           url="http://127.0.0.1:{port}\\@public.example/", refusal="not a valid URL",
           at_create="forbidden_address"),
    Vector(id="backslash-path", family="spelling",
           url="http://127.0.0.1\\.public.example:{port}/", refusal="not a valid URL",
           at_create="forbidden_address"),
    Vector(id="scheme-gopher", family="spelling", url="gopher://127.0.0.1:{port}/_GET",
           refusal="scheme 'gopher' is not http or https", at_create="invalid_url"),
    Vector(id="scheme-file", family="spelling", url="file:///etc/passwd",
           refusal="scheme 'file' is not http or https", at_create="invalid_url"),
    Vector(id="scheme-relative", family="spelling", url="//127.0.0.1:{port}/",
           refusal="scheme '' is not http or https", at_create="invalid_url"),
    Vector(id="one-slash", family="spelling", url="http:/127.0.0.1:{port}/",
           refusal="no host", at_create="invalid_url"),
    # -- what a name resolves to ---------------------------------------------------------------
    _dns("dns-loopback", ["127.0.0.1"], "127.0.0.1: loopback"),
    _dns("dns-loopback-v6", ["::1"], "::1: loopback"),
    _dns("dns-private", ["10.0.0.5"], "10.0.0.5: private network"),
    _dns("dns-metadata", ["169.254.169.254"], "169.254.169.254: link-local"),
    _dns("dns-mapped", ["::ffff:127.0.0.1"], "IPv4-mapped form of 127.0.0.1"),
    _dns("dns-zone", ["fe80::1%lo"], "fe80::1: link-local"),
    _dns("dns-mix-none-permitted", ["203.0.113.7", "10.0.0.5", "127.0.0.1"],
         "203.0.113.7: documentation (TEST-NET-3); 10.0.0.5"),
    _dns("dns-no-answer", [], "(no addresses)"),
)  # fmt: skip

CONTROLS: tuple[Control, ...] = (
    Control(id="literal", family="literal", url="http://127.0.0.1:{port}/hook",
            allow=("127.0.0.1/32",), lands_on="127.0.0.1", connects_to="127.0.0.1",
            host_header="127.0.0.1:{port}"),
    # The canonical spelling of what the integer forms mean, under the very same policy.
    Control(id="integer", family="integer", url="http://127.0.0.1:{port}/",
            allow=ALLOW_ALL_LOOPBACK, lands_on="127.0.0.1", connects_to="127.0.0.1",
            host_header="127.0.0.1:{port}"),
    Control(id="ipv6", family="ipv6", url="http://[::1]:{port}/", allow=("::1/128",),
            lands_on="::1", connects_to="::1", host_header="[::1]:{port}"),
    # The mapped form really lands on the IPv4 server: the refused vectors were live.
    Control(id="ipv6-mapped", family="ipv6", url="http://[::ffff:127.0.0.1]:{port}/",
            allow=("127.0.0.1/32",), lands_on="127.0.0.1", connects_to="::ffff:7f00:1",
            host_header="[::ffff:7f00:1]:{port}"),
    Control(id="name", family="name", url="http://hooks.test:{port}/",
            names={"hooks.test": [PUBLIC_STAND_IN]}, allow=ALLOW_STAND_IN,
            lands_on=PUBLIC_STAND_IN, connects_to=PUBLIC_STAND_IN,
            host_header="hooks.test:{port}"),
    Control(id="spelling", family="spelling", url="http://public.example@127.0.0.2:{port}/",
            allow=ALLOW_STAND_IN, lands_on=PUBLIC_STAND_IN, connects_to=PUBLIC_STAND_IN,
            host_header="127.0.0.2:{port}"),
    Control(id="dns-mix", family="dns", url="http://hooks.test:{port}/",
            names={"hooks.test": ["169.254.169.254", "127.0.0.1", "10.0.0.5", PUBLIC_STAND_IN]},
            allow=ALLOW_STAND_IN, lands_on=PUBLIC_STAND_IN, connects_to=PUBLIC_STAND_IN,
            host_header="hooks.test:{port}"),
)  # fmt: skip

FAMILIES = frozenset(v.family for v in VECTORS)
