"""Who the web view answers: the Host names it serves, and its CSRF token.

A page the operator visits elsewhere can point a name it controls at
127.0.0.1 (DNS rebinding) and then read the view as if it were that site:
the browser sends the attacker's name in the ``Host`` header. So the view
answers only the names that reach it by right (the localhost names, the
address it is bound to, and the names the operator adds), with a 400 to
any other.

With actions on, every request that changes a run is a POST carrying the
token of this server's process, which only its own pages hold: another site
can make the browser send a POST, but it cannot read a page to learn the
token.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
"""The names a browser on this machine reaches a loopback-bound view by."""

ANY_ADDRESS = ("0.0.0.0", "::", "")


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> list[str]:
    """The ``Host`` names the view answers when bound to ``bound``: the local
    names, the bound address itself (an IPv6 one in brackets, as a ``Host``
    header writes it), and ``extra`` (``*.example.com`` matches its subdomains,
    ``*`` anything)."""
    names = list(LOCAL_NAMES)
    if bound not in ANY_ADDRESS:
        names.append(f"[{bound}]" if ":" in bound else bound)
    names.extend(name.strip().lower() for name in extra)
    return list(dict.fromkeys(name.lower() for name in names if name))


def who_can_reach(bound: str, port: int) -> str:
    """Who can open a view listening on ``bound``, for its first log line."""
    if bound in ANY_ADDRESS:
        return f"anyone who can reach port {port} of this machine, on any of its addresses"
    try:
        loopback = ipaddress.ip_address(bound).is_loopback
    except ValueError:
        loopback = bound == "localhost"
    if loopback:
        return "this machine only"
    return f"anyone who can reach {bound} port {port}"


@dataclass(frozen=True, slots=True)
class Csrf:
    """The token the view's forms carry; a POST without it changes nothing."""

    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def accepts(self, sent: str | None) -> bool:
        return sent is not None and hmac.compare_digest(sent.encode(), self.token.encode())
