"""The SSRF guard's rules, with stub resolvers: no socket is opened anywhere in this file."""

from __future__ import annotations

import ipaddress
import socket

import aiohttp
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.client_reqrep import ConnectionKey

from tickwork.errors import TickworkError
from tickwork.worker.executors.ssrf import (
    AddressPolicy,
    EgressRefused,
    ForbiddenAddress,
    ForbiddenHost,
    ForbiddenURL,
    check_url_host,
    embedded_ipv4,
    refusal_of,
)
from tickwork.worker.executors.ssrf_aiohttp import (
    GuardedResolver,
    guarded_connector,
    guarded_socket_factory,
)

DEFAULT = AddressPolicy()

# (address, reason fragment) for everything a webhook must not reach by default.
FORBIDDEN = [
    ("0.0.0.0", "this network"),
    ("0.1.2.3", "this network"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.0.0.1", "RFC 1918"),
    ("172.16.0.1", "RFC 1918"),
    ("172.31.255.255", "RFC 1918"),
    ("192.168.1.1", "RFC 1918"),
    ("100.64.0.1", "CGNAT"),
    ("100.100.100.200", "CGNAT"),  # Alibaba Cloud metadata
    ("169.254.169.254", "link-local"),  # AWS/GCP/Azure metadata
    ("169.254.0.1", "link-local"),
    ("192.0.0.192", "IETF protocol assignments"),  # is_global says True on 3.11
    ("192.0.2.1", "documentation"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("192.88.99.1", "6to4 relay"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.255", "benchmarking"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, loopback"),
    ("::ffff:a9fe:a9fe", "IPv4-mapped form of 169.254.169.254"),
    ("::127.0.0.1", "IPv4-compatible form of 127.0.0.1, loopback"),
    ("::10.0.0.1", "IPv4-compatible form of 10.0.0.1"),
    ("64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254, link-local"),
    ("64:ff9b::7f00:1", "NAT64 form of 127.0.0.1, loopback"),  # is_global says True on 3.11
    ("64:ff9b:1::1", "local-use NAT64"),
    ("2002:a9fe:a9fe::", "6to4 form of 169.254.169.254, link-local"),
    ("2002:7f00:1::", "6to4 form of 127.0.0.1, loopback"),
    ("2002:a00:1::1", "6to4 form of 10.0.0.1"),
    ("2001::1", "Teredo"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ("2001:2::1", "benchmarking"),
    ("2001:10::1", "IETF protocol assignments"),  # ORCHID
    ("2001:db8::1", "documentation"),
    ("3fff::1", "documentation"),
    ("100::1", "discard-only"),
    ("fc00::1", "unique local"),
    ("fd00::1", "unique local"),
    ("fd00:ec2::254", "unique local"),  # AWS metadata over IPv6
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("::ffff:0:7f00:1", "outside IPv6 global unicast"),  # SIIT form, not routable
    ("4000::1", "outside IPv6 global unicast"),
]

PERMITTED = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.215.14",
    "172.32.0.1",  # just past 172.16/12
    "100.128.0.1",  # just past 100.64/10
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",  # NAT64 of a public address
    "2002:808:808::1",  # 6to4 of a public address
]


@pytest.mark.parametrize(("address", "reason"), FORBIDDEN)
def test_forbidden_by_default(address: str, reason: str) -> None:
    ip = ipaddress.ip_address(address)
    with pytest.raises(ForbiddenAddress) as info:
        DEFAULT.check(ip)
    assert reason in info.value.reason
    assert info.value.ip == ip
    assert f"refused to connect to {ip}" in str(info.value)


@pytest.mark.parametrize("address", PERMITTED)
def test_public_addresses_pass(address: str) -> None:
    DEFAULT.check(ipaddress.ip_address(address))


@pytest.mark.parametrize(
    ("allow", "address", "permitted"),
    [
        (["127.0.0.1/32"], "127.0.0.1", True),
        (["127.0.0.1"], "127.0.0.1", True),  # a bare address is a /32
        (["127.0.0.1/32"], "127.0.0.2", False),
        (["127.0.0.1/32"], "::ffff:127.0.0.1", True),  # the same destination
        (["127.0.0.1/32"], "::1", False),
        (["10.20.0.0/16"], "10.20.3.4", True),
        (["10.20.0.0/16"], "10.21.0.1", False),
        (["10.20.0.0/16"], "169.254.169.254", False),
        (["fd00::/8"], "fd00::1", True),
        (["fd00::/8"], "fc00::1", False),
    ],
)
def test_allow_list(allow: list[str], address: str, permitted: bool) -> None:
    policy = AddressPolicy(allow=allow)
    ip = ipaddress.ip_address(address)
    if permitted:
        policy.check(ip)
    else:
        with pytest.raises(ForbiddenAddress):
            policy.check(ip)


@pytest.mark.parametrize(
    ("allow", "message"),
    [(["nonsense"], "not a network in CIDR form"), (["127.0.0.1/24"], "host bits set")],
)
def test_allow_list_rejects_bad_networks(allow: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        AddressPolicy(allow=allow)


def test_allow_list_must_be_a_list() -> None:
    with pytest.raises(TypeError, match="list of networks"):
        AddressPolicy(allow="127.0.0.1/32")


def test_policy_is_a_frozen_value() -> None:
    assert AddressPolicy(allow=["127.0.0.1/32"]) == AddressPolicy(allow=("127.0.0.1/32",))
    assert AddressPolicy().allow == ()


@pytest.mark.parametrize(
    ("address", "embedded", "form"),
    [
        ("::ffff:1.2.3.4", "1.2.3.4", "IPv4-mapped"),
        ("64:ff9b::102:304", "1.2.3.4", "NAT64"),
        ("2002:102:304::", "1.2.3.4", "6to4"),
        ("::1.2.3.4", "1.2.3.4", "IPv4-compatible"),
        ("2606:4700::1", None, None),
        ("::1", None, None),
    ],
)
def test_embedded_ipv4(address: str, embedded: str | None, form: str | None) -> None:
    got = embedded_ipv4(ipaddress.IPv6Address(address))
    if embedded is None:
        assert got is None
    else:
        assert got == (ipaddress.IPv4Address(embedded), form)


def test_refusals_are_oserrors_and_tickwork_errors() -> None:
    exc = ForbiddenAddress(ipaddress.ip_address("10.0.0.1"), "private")
    assert isinstance(exc, OSError)
    assert isinstance(exc, TickworkError)
    assert exc.errno is None
    assert exc.strerror == str(exc)  # what aiohttp's ClientConnectorError prints


# -- URLs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/hook",
        "http://example.com:8080/x?y=1",
        "https://8.8.8.8/",
        "https://[2606:4700:4700::1111]/",
        "http://localhost/",  # a name: its addresses are checked when it is resolved
    ],
)
def test_check_url_host_passes(url: str) -> None:
    check_url_host(url, DEFAULT)


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        ("http://127.0.0.1:8080/", ForbiddenAddress, "loopback"),
        ("http://[::1]/", ForbiddenAddress, "loopback"),
        ("http://[::ffff:127.0.0.1]/", ForbiddenAddress, "IPv4-mapped"),
        ("http://[fe80::1%25eth0]/", ForbiddenAddress, "link-local"),
        ("http://169.254.169.254/latest/meta-data/", ForbiddenAddress, "link-local"),
        ("http://a@10.0.0.1/", ForbiddenAddress, "RFC 1918"),
        ("http://127.1/", ForbiddenURL, "non-canonical IPv4"),
        ("http://2130706433/", ForbiddenURL, "non-canonical IPv4"),
        ("http://0x7f000001/", ForbiddenURL, "non-canonical IPv4"),
        ("http://0177.0.0.1/", ForbiddenURL, "non-canonical IPv4"),
        ("file:///etc/passwd", ForbiddenURL, "scheme 'file'"),
        ("gopher://example.com/", ForbiddenURL, "scheme 'gopher'"),
        ("ftp://example.com/", ForbiddenURL, "scheme 'ftp'"),
        ("data:text/plain,hi", ForbiddenURL, "scheme 'data'"),
        ("/relative/path", ForbiddenURL, "scheme ''"),
        ("http:///nohost", ForbiddenURL, "no host"),
        ("http://[example.com]/", ForbiddenURL, "not a valid URL"),
    ],
)
def test_check_url_host_refuses(url: str, error: type[EgressRefused], message: str) -> None:
    with pytest.raises(error, match=message):
        check_url_host(url, DEFAULT)


def test_check_url_host_respects_the_allow_list() -> None:
    check_url_host("http://127.0.0.1:8080/", AddressPolicy(allow=["127.0.0.1/32"]))


# -- the resolver -------------------------------------------------------------------------------


class StubResolver(AbstractResolver):
    """Answers from a fixed table; counts lookups. Never touches DNS or sockets."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.lookups: list[str] = []
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups.append(host)
        if host not in self.table:
            raise OSError(f"stub: no such host {host}")
        return [stub_result(host, address, port) for address in self.table[host]]

    async def close(self) -> None:
        self.closed = True


def stub_result(host: str, address: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return ResolveResult(hostname=host, host=address, port=port, family=family, proto=0, flags=0)


STUB = StubResolver(
    {
        "mixed.test": ["10.0.0.5", "93.184.215.14", "169.254.169.254", "2606:4700::1", "::1"],
        "private.test": ["10.0.0.5", "fd00::1"],
        "metadata.test": ["169.254.169.254"],
        "public.test": ["93.184.215.14"],
        "loopback.test": ["127.0.0.1"],
        "empty.test": [],
    }
)


async def test_resolver_keeps_only_permitted_addresses() -> None:
    got = await GuardedResolver(DEFAULT, STUB).resolve("mixed.test", 443)
    assert [r["host"] for r in got] == ["93.184.215.14", "2606:4700::1"]
    assert all(r["port"] == 443 and r["hostname"] == "mixed.test" for r in got)


@pytest.mark.parametrize(
    ("host", "reasons"),
    [
        ("private.test", ["10.0.0.5: private network", "fd00::1: unique local"]),
        ("metadata.test", ["169.254.169.254: link-local"]),
        ("empty.test", ["no addresses"]),
    ],
)
async def test_resolver_refuses_a_host_with_no_permitted_address(
    host: str, reasons: list[str]
) -> None:
    with pytest.raises(ForbiddenHost) as info:
        await GuardedResolver(DEFAULT, STUB).resolve(host, 80)
    assert info.value.host == host
    assert isinstance(info.value, OSError)
    for reason in reasons:
        assert reason in str(info.value)


async def test_resolver_resolves_once_per_call() -> None:
    stub = StubResolver({"public.test": ["93.184.215.14"]})
    await GuardedResolver(DEFAULT, stub).resolve("public.test", 80)
    assert stub.lookups == ["public.test"]


async def test_resolver_honours_the_allow_list() -> None:
    policy = AddressPolicy(allow=["127.0.0.1/32"])
    got = await GuardedResolver(policy, STUB).resolve("loopback.test", 80)
    assert [r["host"] for r in got] == ["127.0.0.1"]


async def test_resolver_passes_lookup_errors_through() -> None:
    with pytest.raises(OSError, match="no such host") as info:
        await GuardedResolver(DEFAULT, STUB).resolve("unknown.test", 80)
    assert not isinstance(info.value, EgressRefused)


async def test_resolver_closes_its_inner_resolver() -> None:
    stub = StubResolver({})
    await GuardedResolver(DEFAULT, stub).close()
    assert stub.closed


# -- the socket factory and the connector -------------------------------------------------------


def test_socket_factory_refuses_before_creating_a_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[object] = []
    monkeypatch.setattr(socket, "socket", lambda *a: created.append(a))  # must not be reached
    factory = guarded_socket_factory(DEFAULT)
    with pytest.raises(ForbiddenAddress, match="link-local"):
        factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", 80)))
    with pytest.raises(ForbiddenAddress, match="loopback"):
        factory((socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 80, 0, 0)))
    assert created == []


def test_socket_factory_creates_permitted_sockets() -> None:
    factory = guarded_socket_factory(AddressPolicy(allow=["127.0.0.1/32"]))
    sock = factory((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80)))
    try:
        assert sock.family == socket.AF_INET
    finally:
        sock.close()


async def test_guarded_connector_refuses_a_foreign_socket_factory() -> None:
    with pytest.raises(TypeError, match="socket_factory"):
        guarded_connector(DEFAULT, socket_factory=lambda _: socket.socket())


async def test_guarded_connector_passes_other_options_through() -> None:
    connector = guarded_connector(DEFAULT, resolver=STUB, limit=7)
    try:
        assert connector.limit == 7
    finally:
        await connector.close()


def test_refusal_of_finds_the_guard_behind_aiohttp_errors() -> None:
    refusal = ForbiddenAddress(ipaddress.ip_address("127.0.0.1"), "loopback")
    key = ConnectionKey("127.0.0.1", 80, False, True, None, None, None)
    wrapped = aiohttp.ClientConnectorError(key, refusal)
    assert refusal_of(wrapped) is refusal
    assert refusal_of(refusal) is refusal
    assert refusal_of(aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "no"))) is None
    assert refusal_of(ValueError("x")) is None
