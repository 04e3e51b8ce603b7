"""A tenant's destination lists: which hosts its webhooks and alerts may reach (issue 19).

Pure logic, no I/O: the API checks a job's URLs against its tenant's lists when the job is
created or changed, and the worker checks again at fire time (the lists may have changed).

Patterns (case-insensitive, a trailing dot ignored):

* `api.partner.io`: exactly that host;
* `*.example.com`: any name below example.com, at any depth (`a.example.com`,
  `a.b.example.com`), but not `example.com` itself: list both to mean both;
* `203.0.113.7`, `2001:db8::1`, `203.0.113.0/24`: a URL whose host is written as a literal
  address inside that network. A pattern never matches a name by what it resolves to: the
  lists judge the URL as written, and the SSRF guard judges addresses.

Rules: deny wins over allow; an empty allow list means "any host" (the SSRF guard still
applies). The lists only narrow what the process's guard permits, never widen it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from yarl import URL

MAX_PATTERNS: Final = 100  # per list
MAX_PATTERN_CHARS: Final = 253  # the longest DNS name
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")  # LDH labels; IDNs as their xn-- form

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class BadPattern(ValueError):
    """A host pattern that is not one of the accepted forms; the message says which to use.
    `where` names the list and index (`allow[2]`) when a whole list was parsed."""

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message if where is None else f"{where}: {message}")
        self.where = where
        self.detail = message


@dataclass(frozen=True, slots=True)
class EgressRules:
    """A tenant's lists, as given (normalised: lower case, no trailing dot, no duplicates)."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    # Patterns with their network parsed once: the worker checks every fire against them.
    _allow: tuple[_Matcher, ...] = field(init=False, repr=False, compare=False)
    _deny: tuple[_Matcher, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allow", tuple(_Matcher.of(p) for p in self.allow))
        object.__setattr__(self, "_deny", tuple(_Matcher.of(p) for p in self.deny))

    @property
    def empty(self) -> bool:
        return not self.allow and not self.deny

    def refusal(self, host: str) -> str | None:
        """Why `host` (a URL's host, as written) is refused by these lists, or None."""
        name = normalise_host(host)
        address = _address(name)
        for matcher in self._deny:
            if matcher.matches(name, address):
                return f"host {name!r} matches {matcher.pattern!r} on the deny list"
        if self._allow and not any(m.matches(name, address) for m in self._allow):
            shown = ", ".join(self.allow[:10]) + (", ..." if len(self.allow) > 10 else "")
            return f"host {name!r} is not on the allow list ({shown})"
        return None


def parse_rules(allow: Iterable[str], deny: Iterable[str]) -> EgressRules:
    """Check and normalise both lists; raises BadPattern naming `allow[i]` or `deny[i]`."""
    return EgressRules(allow=_parse_list("allow", allow), deny=_parse_list("deny", deny))


def _parse_list(name: str, patterns: Iterable[str]) -> tuple[str, ...]:
    kept: list[str] = []
    for index, text in enumerate(patterns):
        try:
            pattern = parse_pattern(text)
        except BadPattern as exc:
            raise BadPattern(exc.detail, where=f"{name}[{index}]") from None
        if pattern not in kept:
            kept.append(pattern)
    if len(kept) > MAX_PATTERNS:
        raise BadPattern(f"at most {MAX_PATTERNS} patterns (got {len(kept)})", where=name)
    return tuple(kept)


def parse_pattern(text: str) -> str:
    """One pattern in its normal form; raises BadPattern saying which forms are accepted."""
    hint = (
        "write an exact host (api.partner.io), a wildcard for the names below a domain"
        " (*.example.com) or an IP address or network (203.0.113.0/24)"
    )
    candidate = text.strip().lower().removesuffix(".")
    if not candidate or len(candidate) > MAX_PATTERN_CHARS:
        raise BadPattern(f"{text[:80]!r} is empty or too long; {hint}")
    network = _network(candidate)
    if network is not None:
        return str(network) if "/" in candidate else str(network.network_address)
    if "/" in candidate or ":" in candidate:
        raise BadPattern(f"{text[:80]!r} is not an IP address or network; {hint}")
    name = candidate.removeprefix("*.")
    if "*" in name:
        raise BadPattern(f"{text[:80]!r}: '*' may only start a pattern, as in '*.example.com'")
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise BadPattern(f"{text[:80]!r} is not a host name (letters, digits, '-', '.'); {hint}")
    if labels[-1].isdigit():
        raise BadPattern(f"{text[:80]!r} is neither an IP address nor a host name; {hint}")
    if candidate.startswith("*.") and len(labels) < 2:
        raise BadPattern(f"{text[:80]!r} matches a whole top-level domain; name a domain")
    return candidate


def normalise_host(host: str) -> str:
    """A URL's host as patterns compare it: lower case, no brackets, no trailing dot."""
    return host.strip().lower().removeprefix("[").removesuffix("]").removesuffix(".")


def matches(pattern: str, host: str) -> bool:
    """Whether a normalised `pattern` (see parse_pattern) matches a normalised `host`."""
    return _Matcher.of(pattern).matches(host, _address(host))


@dataclass(frozen=True, slots=True)
class _Matcher:
    pattern: str
    network: IPNetwork | None

    @classmethod
    def of(cls, pattern: str) -> _Matcher:
        return cls(pattern, _network(pattern))

    def matches(self, host: str, address: IPAddress | None) -> bool:
        if self.network is not None:
            return (
                address is not None
                and address.version == self.network.version
                and address in self.network
            )
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:])
        return host == self.pattern


def _network(text: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def url_host(url: str) -> str:
    """The host of a URL as the lists judge it ('' when it has none)."""
    try:
        return normalise_host(URL(url).raw_host or "")
    except ValueError:
        return ""


def tenant_refusal(tenant: str, rules: EgressRules, url: str) -> str | None:
    """Why `tenant`'s lists refuse `url`, in words naming the tenant and its list; or None."""
    reason = rules.refusal(url_host(url))
    return None if reason is None else f"{reason} of tenant {tenant!r}"


def rules_to_json(rules: EgressRules) -> dict[str, list[str]]:
    return {"allow": list(rules.allow), "deny": list(rules.deny)}


def rules_from_json(data: object) -> EgressRules:
    """Stored lists back (they were checked when set); unknown shapes read as no lists."""
    if not isinstance(data, dict):
        return EgressRules()
    return EgressRules(allow=_strings(data.get("allow")), deny=_strings(data.get("deny")))


def _strings(value: object) -> tuple[str, ...]:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return ()
    return tuple(str(v) for v in value)
