"""Secrets at rest (tickwork.sealing) and how secret parts are shown (domain/masking.py)."""

from __future__ import annotations

import base64
import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tickwork.domain.jobs import AlertTarget, WebhookTarget
from tickwork.domain.masking import (
    MASK,
    is_secret_header,
    mask_headers,
    mask_url,
    restore_headers,
    restore_url,
    unrestored_masks,
)
from tickwork.sealing import Keyring, SealedSecretError, generate_key_line, parse_key_lines

K1 = ("k1", bytes(range(32)))
K2 = ("k2", bytes(range(1, 33)))


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "X-Api-Key",
        "X-Auth-Token",
        "x-client-secret",
        "X-Shopify-Access-Token",
        "apikey",
        "X-Session-Id",
        "PASSWORD",
    ],
)
def test_credential_header_names_are_secret(name: str) -> None:
    assert is_secret_header(name)


@pytest.mark.parametrize("name", ["content-type", "accept", "x-request-id", "user-agent"])
def test_ordinary_header_names_are_shown(name: str) -> None:
    assert not is_secret_header(name)


def test_masking_hides_secret_values_and_url_passwords_only() -> None:
    headers = {"Authorization": "Bearer abc", "content-type": "application/json"}
    assert mask_headers(headers) == {"Authorization": MASK, "content-type": "application/json"}
    assert mask_headers(headers, all_secret=True) == {"Authorization": MASK, "content-type": MASK}
    assert mask_url("https://bob:hunter2@example.com/x?y=1") == (
        f"https://bob:{MASK}@example.com/x?y=1"
    )
    assert mask_url("https://example.com/x") == "https://example.com/x"
    assert mask_url("https://bob@example.com/") == "https://bob@example.com/"


def test_a_mask_sent_back_keeps_the_stored_value_and_a_new_value_replaces_it() -> None:
    stored = {"Authorization": "Bearer old", "x-api-key": "k-old"}
    given = {"authorization": MASK, "X-Api-Key": "k-new", "accept": "*/*"}
    assert restore_headers(given, stored) == {
        "authorization": "Bearer old",
        "X-Api-Key": "k-new",
        "accept": "*/*",
    }
    url = restore_url(mask_url("https://bob:pw@example.com/a"), "https://bob:pw@example.com/b")
    assert url == "https://bob:pw@example.com/a"


def test_a_mask_with_nothing_stored_is_left_for_validation_to_refuse() -> None:
    restored = restore_headers({"Authorization": MASK}, {})
    assert unrestored_masks(restored, f"https://u:{MASK}@example.com/") == ["Authorization", "url"]


def test_reprs_never_show_secret_values() -> None:
    target = WebhookTarget(
        url="https://bob:pw-canary@example.com/", headers={"Authorization": "tok-canary"}
    )
    alert = AlertTarget(url="https://example.com/a", headers={"x-pager": "pager-canary"})
    assert "canary" not in repr(target) + repr(alert)


def test_seal_opens_with_the_same_purpose_only() -> None:
    ring = Keyring([K1])
    sealed = ring.seal('["whsec_x"]', purpose="tw_jobs.webhook_secrets")
    assert sealed.startswith("tw1:k1:")
    assert "whsec" not in sealed
    assert ring.open(sealed, purpose="tw_jobs.webhook_secrets") == '["whsec_x"]'
    with pytest.raises(SealedSecretError, match="did not authenticate"):
        ring.open(sealed, purpose="tw_tenants.webhook_secrets")


def test_two_seals_of_one_text_differ() -> None:
    ring = Keyring([K1])
    assert ring.seal("same", purpose="p") != ring.seal("same", purpose="p")


def test_rotation_new_key_seals_old_key_still_opens() -> None:
    old = Keyring([K1]).seal("secret", purpose="p")
    rotated = Keyring([K2, K1])
    assert rotated.open(old, purpose="p") == "secret"
    assert rotated.seal("secret", purpose="p").startswith("tw1:k2:")
    assert rotated.sealed_with_current(rotated.seal("x", purpose="p"))
    assert not rotated.sealed_with_current(old)
    with pytest.raises(SealedSecretError, match=r"'k1', which this process does not have") as info:
        Keyring([K2]).open(old, purpose="p")
    assert "secret" not in str(info.value).replace("secret key", "")


def test_an_altered_value_does_not_open() -> None:
    ring = Keyring([K1])
    sealed = ring.seal("secret", purpose="p")
    raw = bytearray(base64.urlsafe_b64decode(sealed.split(":")[2]))
    raw[-1] ^= 1
    altered = "tw1:k1:" + base64.urlsafe_b64encode(bytes(raw)).decode()
    with pytest.raises(SealedSecretError):
        ring.open(altered, purpose="p")


def test_key_text_round_trips_and_bad_keys_are_named() -> None:
    line = generate_key_line("prod-2026")
    [(key_id, material)] = parse_key_lines([line, "# comment", ""], source="secrets.key")
    assert key_id == "prod-2026"
    assert len(material) == 32
    with pytest.raises(ValueError, match=r"secrets\.key: item 1"):
        parse_key_lines(["no-colon"], source="secrets.key")
    with pytest.raises(ValueError, match="has 5 bytes"):
        Keyring(
            parse_key_lines(["short:" + base64.urlsafe_b64encode(b"12345").decode()], source="env")
        )
    with pytest.raises(ValueError, match="appears twice"):
        Keyring([K1, K1])
    with pytest.raises(ValueError, match="key id"):
        Keyring([("bad id!", bytes(32))])


@given(text=st.text(max_size=500), purpose=st.sampled_from(["a", "tw_jobs.target"]))
def test_any_text_round_trips(text: str, purpose: str) -> None:
    ring = Keyring([K2, K1])
    assert ring.open(ring.seal(text, purpose=purpose), purpose=purpose) == text


@given(garbage=st.text(max_size=200))
def test_garbage_never_crashes_open(garbage: str) -> None:
    ring = Keyring([K1])
    with contextlib.suppress(SealedSecretError):
        ring.open("tw1:k1:" + garbage, purpose="p")
