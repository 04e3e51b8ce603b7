"""Outbound webhooks over verified TLS (a throwaway CA given as the CA bundle) and through a
real outbound proxy (tests/support/proxy.py: CONNECT and absolute-form), with real servers on
127.0.0.1. Names are resolved by a stub where a test needs a name to mean something: the
worker's side (what the SSRF guard sees) and the proxy's side (`names`) may differ, as they do
in a real network."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tickwork.domain.jobs import WebhookTarget
from tickwork.domain.runs import Fire
from tickwork.errors import InvalidInput
from tickwork.settings import Settings, webhook_proxies
from tickwork.worker.base import Attempt
from tickwork.worker.executors.http1 import Http1Client, Resolve
from tickwork.worker.executors.proxy import ProxyRoutes, routes_from
from tickwork.worker.executors.ssrf import AddressPolicy
from tickwork.worker.executors.webhook import WebhookRunner

from ..support.pki import Pki, make_pki
from ..support.proxy import ForwardProxy
from ..support.receiver import Receiver

LOOPBACK = AddressPolicy(allow=["127.0.0.1/32"])
PUBLIC = "93.184.215.14"  # what the stub says public names resolve to, on the worker's side
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def plain() -> AsyncIterator[Receiver]:
    rx = await Receiver().start()
    yield rx
    await rx.stop()


@pytest.fixture
async def secure(pki: Pki) -> AsyncIterator[Receiver]:
    rx = await Receiver(tls=pki.server_context()).start()
    yield rx
    await rx.stop()


@pytest.fixture
async def proxy() -> AsyncIterator[ForwardProxy]:
    p = await ForwardProxy().start()
    yield p
    await p.stop()


def resolving(table: dict[str, Sequence[str]]) -> Resolve:
    """A stub of the worker's name lookup: `table`, else "no such name"."""

    async def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} is unknown here")
        return list(table[host])

    return resolve


def fire(url: str) -> Fire:
    return Fire(
        run_id=1,
        job_id="a" * 32,
        key=f"{'a' * 32}:0",
        scheduled_for=T0,
        fence_token=1,
        attempt=1,
        target=WebhookTarget(url=url, body={"n": 1}),
        lease_until=T0 + timedelta(seconds=30),
    )


async def send(runner_kw: dict[str, Any], url: str) -> Attempt:
    async with WebhookRunner(**runner_kw) as runner:
        return await runner(fire(url))


# -- TLS and the CA bundle ------------------------------------------------------------------------


async def test_a_private_ca_is_refused_without_the_bundle_and_not_retried(
    secure: Receiver,
) -> None:
    attempt = await send({"policy": LOOPBACK}, secure.url("/hook"))
    assert not attempt.ok
    assert not attempt.retryable
    assert attempt.error is not None
    assert "TLS certificate verification failed" in attempt.error
    assert "TICKWORK_WEBHOOK_CA_BUNDLE" in attempt.error
    assert secure.deliveries == []


async def test_the_bundle_adds_the_ca_and_the_request_succeeds(secure: Receiver, pki: Pki) -> None:
    attempt = await send({"policy": LOOPBACK, "ca_bundle": str(pki.ca_pem)}, secure.url("/hook"))
    assert attempt.ok, attempt.error
    [hit] = secure.for_path("/hook")
    assert hit.headers["idempotency-key"] == f"{'a' * 32}:0"
    assert hit.key == f"{'a' * 32}:0"


async def test_the_bundle_does_not_replace_host_name_verification(
    secure: Receiver, pki: Pki
) -> None:
    kw: dict[str, Any] = {
        "policy": LOOPBACK,
        "ca_bundle": str(pki.ca_pem),
        "resolve": resolving({"hooks.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]}),
    }
    assert (await send(kw, secure.url("/named", host="hooks.test"))).ok
    wrong = await send(kw, secure.url("/wrong", host="other.test"))
    assert not wrong.ok
    assert not wrong.retryable
    assert "Hostname mismatch" in (wrong.error or "")
    assert secure.for_path("/wrong") == []


def test_verification_cannot_be_turned_off() -> None:
    lax = ssl.create_default_context()
    lax.check_hostname = False
    lax.verify_mode = ssl.CERT_NONE
    with pytest.raises(ValueError, match="always verify"):
        Http1Client(ssl_context=lax)
    no_names = ssl.create_default_context()
    no_names.check_hostname = False
    with pytest.raises(ValueError, match="always verify"):
        Http1Client(ssl_context=no_names)


def test_a_bad_bundle_is_refused_when_the_settings_are_read(tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    for path in (missing, not_pem):
        with pytest.raises(ValueError, match=r"webhook_ca_bundle[\s\S]*BEGIN CERTIFICATE"):
            Settings(webhook_ca_bundle=str(path))
        with pytest.raises(ValueError, match="webhook_ca_bundle"):
            Http1Client(ca_bundle=str(path))


# -- the outbound proxy ---------------------------------------------------------------------------


async def test_http_goes_to_the_proxy_in_absolute_form_and_is_pooled(
    plain: Receiver, proxy: ForwardProxy
) -> None:
    # The worker sees public addresses; the proxy's own DNS sends both names to the receiver.
    proxy.names = {"hooks.test": "127.0.0.1", "more.test": "127.0.0.1"}
    kw: dict[str, Any] = {
        "proxies": routes_from(proxy.url(), {}),
        "resolve": resolving({"hooks.test": [PUBLIC], "more.test": [PUBLIC]}),
    }
    async with WebhookRunner(**kw) as runner:
        for path in ("/a", "/b"):
            attempt = await runner(fire(plain.url(path, host="hooks.test")))
            assert attempt.ok, attempt.error
        assert (await runner(fire(plain.url("/c", host="more.test")))).ok
    port = plain.port
    # One connection per (proxy, origin): /a and /b shared one, /c needed its own.
    assert [(f.kind, f.authority) for f in proxy.forwarded] == [
        ("absolute", f"hooks.test:{port}"),
        ("absolute", f"more.test:{port}"),
    ]
    assert proxy.forwarded[0].request_line == "POST /a HTTP/1.1"
    assert [d.path for d in plain.deliveries] == ["/a", "/b", "/c"]
    assert plain.deliveries[0].headers["host"] == f"hooks.test:{port}"


async def test_https_goes_through_a_connect_tunnel_verified_against_the_target(
    secure: Receiver, proxy: ForwardProxy, pki: Pki
) -> None:
    proxy.names = {"hooks.test": "127.0.0.1", "other.test": "127.0.0.1"}
    kw: dict[str, Any] = {
        "proxies": routes_from(proxy.url(), {}),
        "ca_bundle": str(pki.ca_pem),
        "resolve": resolving({"hooks.test": [PUBLIC], "other.test": [PUBLIC]}),
    }
    async with WebhookRunner(**kw) as runner:
        for path in ("/one", "/two"):
            attempt = await runner(fire(secure.url(path, host="hooks.test")))
            assert attempt.ok, attempt.error
        # A tunnel is no excuse: the certificate must name the host the URL names.
        wrong = await runner(fire(secure.url("/wrong", host="other.test")))
    assert not wrong.ok
    assert "Hostname mismatch" in (wrong.error or "")
    assert [(f.kind, f.authority) for f in proxy.forwarded] == [
        ("connect", f"hooks.test:{secure.port}"),  # one tunnel, reused for /two
        ("connect", f"other.test:{secure.port}"),
    ]
    assert [d.path for d in secure.deliveries] == ["/one", "/two"]


async def test_proxy_credentials_are_sent_to_the_proxy_only(
    plain: Receiver, secure: Receiver, pki: Pki
) -> None:
    proxy = await ForwardProxy(credentials=("svc", "s3cr:t")).start()
    try:
        proxy.names = {"hooks.test": "127.0.0.1"}
        kw: dict[str, Any] = {
            "proxies": routes_from(proxy.url("svc:s3cr%3At@"), {}),
            "ca_bundle": str(pki.ca_pem),
            "resolve": resolving({"hooks.test": [PUBLIC]}),
        }
        assert (await send(kw, plain.url("/p", host="hooks.test"))).ok
        assert (await send(kw, secure.url("/s", host="hooks.test"))).ok
        assert all(f.proxy_authorization for f in proxy.forwarded)
        for delivery in (*plain.deliveries, *secure.deliveries):
            assert "proxy-authorization" not in delivery.headers
        # Wrong credentials: the proxy's 407 is a failure that a retry cannot fix, and the
        # password appears nowhere in it.
        kw["proxies"] = routes_from(proxy.url("svc:wrong-pass@"), {})
        refused = await send(kw, secure.url("/s", host="hooks.test"))
        assert not refused.ok
        assert not refused.retryable
        assert "407" in (refused.error or "")
        assert f"http://127.0.0.1:{proxy.port}" in (refused.error or "")
        assert "wrong-pass" not in (refused.error or "")
        http_refused = await send(kw, plain.url("/p2", host="hooks.test"))
        assert (http_refused.ok, http_refused.http_status) == (False, 407)
    finally:
        await proxy.stop()


async def test_no_proxy_targets_go_direct(plain: Receiver, proxy: ForwardProxy) -> None:
    routes = routes_from(None, {"HTTP_PROXY": proxy.url(), "NO_PROXY": "127.0.0.1,.internal"})
    attempt = await send({"policy": LOOPBACK, "proxies": routes}, plain.url("/direct"))
    assert attempt.ok, attempt.error
    assert proxy.forwarded == []
    assert len(plain.for_path("/direct")) == 1


async def test_the_guard_refuses_what_it_can_see_before_asking_the_proxy(
    plain: Receiver, proxy: ForwardProxy
) -> None:
    # The proxy itself is on 127.0.0.1, which the default policy refuses for targets: an
    # operator chose it, so the worker connects to it anyway.
    proxy.names = {"internal.test": "127.0.0.1", "unknown-here.test": "127.0.0.1"}
    kw: dict[str, Any] = {
        "proxies": routes_from(proxy.url(), {}),
        "resolve": resolving({"internal.test": [PUBLIC, "10.0.0.5"]}),
    }
    for url, says in [
        (plain.url("/literal"), "127.0.0.1"),  # a forbidden literal address
        (plain.url("/named", host="internal.test"), "10.0.0.5"),  # one forbidden address
    ]:
        attempt = await send(kw, url)
        assert not attempt.ok
        assert not attempt.retryable
        assert "SSRF guard" in (attempt.error or "")
        assert says in (attempt.error or "")
    assert proxy.forwarded == []
    # A name the worker cannot resolve is the proxy's to judge: here it lets it through to a
    # loopback address, which is why the proxy must enforce egress itself (docs/security.md).
    passed = await send(kw, plain.url("/proxy-decides", host="unknown-here.test"))
    assert passed.ok, passed.error
    assert [f.authority for f in proxy.forwarded] == [f"unknown-here.test:{plain.port}"]


async def test_a_proxy_that_is_down_is_a_retryable_failure(plain: Receiver) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    kw: dict[str, Any] = {
        "proxies": routes_from(f"http://127.0.0.1:{port}", {}),
        "resolve": resolving({"hooks.test": [PUBLIC]}),
    }
    attempt = await send(kw, plain.url("/x", host="hooks.test"))
    assert not attempt.ok
    assert attempt.retryable
    assert "Connect" in (attempt.error or "") or "refused" in (attempt.error or "").lower()


def test_the_worker_reads_its_proxy_from_the_setting_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://from-env:3128")
    monkeypatch.delenv("https_proxy", raising=False)
    from_env = webhook_proxies(Settings())
    assert from_env.https is not None
    assert from_env.https.host == "from-env"
    from_setting = webhook_proxies(Settings(webhook_proxy="http://from-setting:8080"))
    assert from_setting.https is not None
    assert from_setting.https.host == "from-setting"
    assert webhook_proxies(Settings(webhook_proxy="direct")) == ProxyRoutes()
    monkeypatch.setenv("HTTPS_PROXY", "ftp://user:hunter2@x")
    with pytest.raises(InvalidInput) as caught:
        webhook_proxies(Settings())
    assert caught.value.field == "HTTPS_PROXY"
    assert "hunter2" not in str(caught.value)


async def test_concurrent_requests_through_the_proxy_all_arrive(
    plain: Receiver, proxy: ForwardProxy
) -> None:
    proxy.names = {"hooks.test": "127.0.0.1"}
    kw: dict[str, Any] = {
        "proxies": routes_from(proxy.url(), {}),
        "resolve": resolving({"hooks.test": [PUBLIC]}),
    }
    async with WebhookRunner(**kw) as runner:
        attempts = await asyncio.gather(
            *(runner(fire(plain.url(f"/c{n}", host="hooks.test"))) for n in range(10))
        )
    assert all(a.ok for a in attempts)
    assert sorted(d.path for d in plain.deliveries) == sorted(f"/c{n}" for n in range(10))
    assert 1 <= len(proxy.forwarded) <= 10
