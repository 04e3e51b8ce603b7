"""Pure: which parts of a target are secret, how they are shown, and how a shown mask is read
back on an edit.

A webhook target's URL may carry a password (`https://user:pw@host/`) and its headers a
credential (`Authorization: Bearer ...`). tickwork stores both encrypted (store/sql/sealed.py)
and never shows them: an answer has the header's name with `MASK` as its value, and the URL
with `MASK` as its password. A client that reads a job and sends it back unchanged (the usual
read-modify-write edit) sends those masks; `restore_*` put the stored values back in their
place, so an edit never overwrites a credential with asterisks.

Which headers are secret is decided by name, never by value (ADR 0019): the names that carry
credentials by standard (Authorization, Proxy-Authorization, Cookie) and any name containing
one of the words in `SECRET_NAME_WORDS` (X-Api-Key, X-Auth-Token, X-Shopify-Access-Token,
X-Client-Secret, ...). Every header of a dead-letter alert (`on_failure`) counts as secret:
an alert's headers exist to authenticate to a paging or chat service.
"""

from __future__ import annotations

from collections.abc import Mapping

from yarl import URL

MASK = "********"
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
SECRET_NAME_WORDS = (
    "auth",
    "token",
    "secret",
    "key",
    "password",
    "passwd",
    "credential",
    "session",
    "signature",
    "cookie",
)


def is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_HEADERS or any(word in lowered for word in SECRET_NAME_WORDS)


def has_secret_headers(headers: Mapping[str, str]) -> bool:
    return any(is_secret_header(name) for name in headers)


def mask_headers(headers: Mapping[str, str], *, all_secret: bool = False) -> dict[str, str]:
    """The headers as an answer shows them: secret values (every value if `all_secret`)
    replaced by MASK."""
    return {
        name: MASK if all_secret or is_secret_header(name) else value
        for name, value in headers.items()
    }


def url_password(url: str) -> str | None:
    """The password in the URL's userinfo, if it has one (an unparsable URL has none)."""
    try:
        return URL(url).password
    except ValueError:
        return None


def mask_url(url: str) -> str:
    """The URL with its password (if any) replaced by MASK; anything else unchanged."""
    if url_password(url) is None:
        return url
    return str(URL(url).with_password(MASK))


def restore_headers(
    given: Mapping[str, str], stored: Mapping[str, str], *, all_secret: bool = False
) -> dict[str, str]:
    """`given` with every MASK value of a secret header replaced by the stored value of the
    same header (names compared without case). A MASK with nothing stored under that name is
    kept as given: the caller's validation (`unrestored_masks`) refuses it."""
    by_name = {name.lower(): value for name, value in stored.items()}
    restored: dict[str, str] = {}
    for name, value in given.items():
        secret = all_secret or is_secret_header(name)
        if secret and value == MASK and name.lower() in by_name:
            restored[name] = by_name[name.lower()]
        else:
            restored[name] = value
    return restored


def restore_url(given: str, stored: str | None) -> str:
    """`given` with a MASK password replaced by the stored URL's password (when it has one)."""
    if stored is None or url_password(given) != MASK:
        return given
    password = url_password(stored)
    if password is None:
        return given
    return str(URL(given).with_password(password))


def unrestored_masks(headers: Mapping[str, str], url: str | None = None) -> list[str]:
    """Where a MASK is still present after restoring: header names, and "url" for a password.
    Storing a literal mask would silently replace a credential with asterisks."""
    found = [name for name, value in headers.items() if value == MASK]
    if url is not None and url_password(url) == MASK:
        found.append("url")
    return found
