"""A tenant's destination lists (domain/egress.py): pattern syntax and matching."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.domain.egress import (
    MAX_PATTERNS,
    BadPattern,
    EgressRules,
    parse_pattern,
    parse_rules,
    rules_from_json,
    rules_to_json,
)

labels = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True).filter(
    lambda label: not label.isdigit()
)
hosts = st.lists(labels, min_size=2, max_size=4).map(".".join)


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("API.Partner.io", "api.partner.io"),
        ("example.com.", "example.com"),
        (" *.Example.COM ", "*.example.com"),
        ("203.0.113.7", "203.0.113.7"),
        ("203.0.113.9/24", "203.0.113.0/24"),
        ("2001:DB8::1", "2001:db8::1"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ],
)
def test_patterns_are_normalised(text: str, normal: str) -> None:
    assert parse_pattern(text) == normal


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),
        ("a" * 254, "too long"),
        ("a.*.example.com", "'*' may only start"),
        ("*example.com", "'*' may only start"),
        ("*.com", "top-level domain"),
        ("exa mple.com", "not a host name"),
        ("-bad.example.com", "not a host name"),
        ("bücher.example", "not a host name"),
        ("10.0.0.0/33", "not an IP address or network"),
        ("127.1", "neither an IP address nor a host name"),
        ("https://example.com", "not an IP address or network"),
    ],
)
def test_bad_patterns_say_what_to_write(text: str, says: str) -> None:
    with pytest.raises(BadPattern, match=says) as caught:
        parse_pattern(text)
    assert "api.partner.io" in str(caught.value) or "*" in str(caught.value)


def test_a_bad_pattern_is_named_by_its_list_and_index() -> None:
    with pytest.raises(BadPattern, match=r"^deny\[1\]: "):
        parse_rules([], ["ok.example.com", "not ok"])


def test_lists_drop_duplicates_and_have_a_size_limit() -> None:
    rules = parse_rules(["a.example.com", "A.example.com."], [])
    assert rules.allow == ("a.example.com",)
    too_many = [f"h{i}.example.com" for i in range(MAX_PATTERNS + 1)]
    with pytest.raises(BadPattern, match=f"at most {MAX_PATTERNS}"):
        parse_rules(too_many, [])


def test_exact_wildcard_and_network_matching() -> None:
    rules = parse_rules(["api.partner.io", "*.example.com", "203.0.113.0/24", "2001:db8::1"], [])
    for allowed in (
        "api.partner.io",
        "API.PARTNER.IO.",
        "a.example.com",
        "a.b.example.com",
        "203.0.113.200",
        "[2001:db8::1]",
    ):
        assert rules.refusal(allowed) is None, allowed
    for refused in (
        "example.com",  # the wildcard is for names below it only
        "evilexample.com",
        "example.com.evil.io",
        "partner.io",
        "203.0.114.1",
        "2001:db8::2",
    ):
        reason = rules.refusal(refused)
        assert reason is not None
        assert "not on the allow list" in reason


def test_deny_wins_over_allow() -> None:
    rules = parse_rules(["*.example.com"], ["internal.example.com", "*.corp.example.com"])
    assert rules.refusal("www.example.com") is None
    assert "deny list" in (rules.refusal("internal.example.com") or "")
    assert "'*.corp.example.com' on the deny list" in (rules.refusal("a.corp.example.com") or "")


def test_an_empty_allow_list_admits_any_host_the_deny_list_does_not_name() -> None:
    rules = parse_rules([], ["blocked.example.com"])
    assert rules.refusal("anything.io") is None
    assert rules.refusal("blocked.example.com") is not None
    assert EgressRules().empty
    assert EgressRules().refusal("anything.io") is None


@given(hosts, st.lists(hosts, max_size=5), st.lists(hosts, max_size=5))
def test_deny_always_wins_and_allow_only_narrows(
    host: str, allow: list[str], deny: list[str]
) -> None:
    rules = parse_rules(allow, [*deny, host])
    assert rules.refusal(host) is not None
    open_rules = parse_rules(allow, deny)
    if host in deny:
        assert open_rules.refusal(host) is not None
    elif not allow or host in allow:
        assert open_rules.refusal(host) is None
    else:
        assert open_rules.refusal(host) is not None


@given(hosts, labels)
def test_a_wildcard_matches_every_name_below_its_domain_but_not_the_domain(
    domain: str, label: str
) -> None:
    rules = parse_rules([f"*.{domain}"], [])
    assert rules.refusal(f"{label}.{domain}") is None
    assert rules.refusal(domain) is not None
    assert rules.refusal(f"{label}{domain}") is not None


@given(st.lists(hosts, max_size=4), st.lists(hosts, max_size=4))
def test_json_round_trip(allow: list[str], deny: list[str]) -> None:
    rules = parse_rules(allow, deny)
    assert rules_from_json(rules_to_json(rules)) == rules


def test_unreadable_stored_lists_read_as_none() -> None:
    assert rules_from_json(None) == EgressRules()
    assert rules_from_json({"allow": "x"}) == EgressRules()
