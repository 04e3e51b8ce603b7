"""Which proxy a webhook goes through (worker/executors/proxy.py): the setting, the standard
environment variables, NO_PROXY, and proxy URLs with credentials that never show."""

from __future__ import annotations

import base64

import pytest

from tickwork.worker.executors.proxy import BadProxy, NoProxy, parse_proxy, routes_from


def test_no_setting_and_no_environment_means_direct() -> None:
    routes = routes_from(None, {})
    assert not routes.any
    assert routes.proxy_for("https", "example.com", 443) is None


def test_the_environment_gives_a_proxy_per_scheme_lowercase_first() -> None:
    env = {
        "HTTPS_PROXY": "http://upper:3128",
        "https_proxy": "http://lower:3128",
        "HTTP_PROXY": "plain:8080",  # no scheme: http:// is meant
    }
    routes = routes_from(None, env)
    https = routes.proxy_for("https", "example.com", 443)
    http = routes.proxy_for("http", "example.com", 80)
    assert https is not None
    assert (https.host, https.port) == ("lower", 3128)
    assert http is not None
    assert (http.host, http.port) == ("plain", 8080)
    assert routes_from(None, {"HTTPS_PROXY": "http://p:1"}).proxy_for("http", "a.io", 80) is None


def test_the_setting_wins_over_the_environment_and_direct_turns_proxies_off() -> None:
    env = {"HTTPS_PROXY": "http://env:3128", "HTTP_PROXY": "http://env:3128"}
    routes = routes_from("http://setting:9000", env)
    for scheme in ("http", "https"):
        proxy = routes.proxy_for(scheme, "example.com", 443)
        assert proxy is not None
        assert proxy.host == "setting"
    for word in ("direct", "NONE", " direct "):
        assert not routes_from(word, env).any
    assert routes_from("", env).any  # empty: not set, the environment applies


def test_no_proxy_applies_to_the_setting_too() -> None:
    routes = routes_from("http://p:3128", {"no_proxy": "internal.example.com"})
    assert routes.proxy_for("https", "api.internal.example.com", 443) is None
    assert routes.proxy_for("https", "example.com", 443) is not None


@pytest.mark.parametrize(
    ("no_proxy", "host", "port", "direct"),
    [
        ("*", "anything.io", 443, True),
        ("example.com", "example.com", 443, True),
        ("example.com", "a.b.example.com", 443, True),
        (".example.com", "a.example.com", 443, True),
        (".example.com", "example.com", 443, True),
        ("*.example.com", "a.example.com", 443, True),
        ("example.com", "notexample.com", 443, False),
        ("example.com:8443", "example.com", 8443, True),
        ("example.com:8443", "example.com", 443, False),
        ("10.0.0.0/8", "10.1.2.3", 80, True),
        ("10.0.0.0/8", "11.1.2.3", 80, False),
        ("203.0.113.7", "203.0.113.7", 80, True),
        ("::1", "[::1]", 80, True),
        ("[2001:db8::1]:8080", "2001:db8::1", 8080, True),
        (" a.io , ,B.IO ", "b.io", 443, True),
        ("", "example.com", 443, False),
        ("localhost", "EXAMPLE.com.", 443, False),
        ("example.com", "EXAMPLE.com.", 443, True),
    ],
)
def test_no_proxy_entries(no_proxy: str, host: str, port: int, direct: bool) -> None:
    assert NoProxy.parse(no_proxy).covers(host, port) is direct


def test_credentials_become_a_basic_header_and_never_show() -> None:
    proxy = parse_proxy("http://us%40er:pa%3Ass@proxy.internal:3128", source="webhook_proxy")
    assert proxy.authorization == "Basic " + base64.b64encode(b"us@er:pa:ss").decode()
    assert "pa:ss" not in repr(proxy)
    assert "pa%3Ass" not in repr(proxy)
    assert proxy.shown == "http://proxy.internal:3128"
    assert parse_proxy("http://[::1]", source="x").shown == "http://[::1]:80"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("https://proxy:3128", "scheme 'https' is not supported"),
        ("socks5://user:hunter2@proxy:1080", "scheme 'socks5' is not supported"),
        ("http://proxy:3128/path", "no path"),
        ("http://:3128", "not a URL|no host"),
        ("http://proxy:99999", "not a URL"),
    ],
)
def test_bad_proxy_urls_name_the_source_and_hide_the_url(text: str, says: str) -> None:
    with pytest.raises(BadProxy, match=says) as caught:
        routes_from(None, {"HTTPS_PROXY": text})
    assert caught.value.source == "HTTPS_PROXY"
    assert "hunter2" not in str(caught.value)
    assert "give an http:// URL" in str(caught.value)
