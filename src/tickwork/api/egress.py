"""The SSRF guard's rules applied when a job is created or changed, to what they can already
decide: a URL whose host is a literal address (in any of the forms the guard reads: dotted,
IPv6, IPv4-mapped, NAT64, 6to4, and the decimal, octal and hex integer forms it refuses
outright), and `localhost`, which always means this machine (RFC 6761).

The worker's guard (`tickwork.worker.executors.ssrf`) stays the last word at fire time: a name
is only known by what it resolves to when the request is made, and that can change.
Both use the same `AddressPolicy`, so the `webhook_allow` setting admits the same networks here
as there.
"""

from __future__ import annotations

import ipaddress

from yarl import URL

from tickwork.errors import InvalidInput
from tickwork.worker.executors.ssrf import (
    AddressPolicy,
    ForbiddenAddress,
    ForbiddenURL,
    check_url_host,
)

CODE = "forbidden_address"
_HINT = (
    "webhooks may only reach public addresses (an operator can allow a network with the"
    " webhook_allow setting)"
)
_LOOPBACK = (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))


def check_destination(field: str, url: str, policy: AddressPolicy) -> None:
    """Raise InvalidInput (code `forbidden_address`, naming `field`) if the guard would refuse
    `url` whatever its host resolves to; names that must be resolved pass."""
    try:
        check_url_host(url, policy)
    except ForbiddenAddress as exc:
        message = f"{exc.ip} is not a public address: {exc.reason}; {_HINT}"
        raise InvalidInput(field, message, code=CODE) from None
    except ForbiddenURL as exc:
        raise InvalidInput(field, f"{exc.reason}; {_HINT}", code=CODE) from None
    host = (URL(url).host or "").rstrip(".").lower()
    if (host == "localhost" or host.endswith(".localhost")) and not any(
        policy.allows(ip) for ip in _LOOPBACK
    ):
        message = f"{host!r} always means this machine (loopback, RFC 6761); {_HINT}"
        raise InvalidInput(field, message, code=CODE)
