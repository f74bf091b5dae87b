"""Who the web view answers: the Host names it serves, how it knows its
visitors (:class:`Access`), and the CSRF token its forms carry.

A page the operator visits elsewhere can point a name it controls at
127.0.0.1 (DNS rebinding) and then read the view as if it were that site:
the browser sends the attacker's name in the ``Host`` header. So the view
answers only the names that reach it by right (the localhost names, the
address it is bound to, and the names the operator adds), with a 400 to
any other.

Every POST (an action, signing in or out) carries the token of the
browser's session (:mod:`stepstone.ui.sessions`), which only the view's own
pages show it: another site can make the browser send a POST, but it cannot
read a page to learn the token.

Standard library only: ``stepstone ui`` checks its options with it before
it needs the ``ui`` extra.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from stepstone.ui.users import Users

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
    if is_loopback(bound):
        return "this machine only"
    return f"anyone who can reach {bound} port {port}"


def csrf_accepts(expected: str, sent: str | None) -> bool:
    """Whether a form's token ``sent`` is the session's ``expected`` one
    (compared in constant time)."""
    return sent is not None and hmac.compare_digest(sent.encode(), expected.encode())


class CannotServeSo(ValueError):
    """The options ask for a view the access rules do not allow; says why and what to give."""


@dataclass(frozen=True, slots=True)
class Access:
    """How the view knows its visitors, and whether it acts at all."""

    users: Users | None = None
    trusted_proxies: tuple[str, ...] = ()
    """Addresses or networks (``10.0.0.0/8``) whose forwarded headers are believed."""
    user_header: str | None = None
    actions: bool = False

    @property
    def signs_in(self) -> bool:
        """Whether a visitor must be known (else everyone is, anonymously)."""
        return self.users is not None or self.user_header is not None

    def networks(self) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
        return [ipaddress.ip_network(given, strict=False) for given in self.trusted_proxies]

    def described(self) -> str:
        """How visitors are known, for the view's first line."""
        ways = []
        if self.users is not None:
            ways.append(f"password (users in {self.users.path})")
        if self.user_header is not None:
            ways.append(f"{self.user_header} from {', '.join(self.trusted_proxies)}")
        signing = "sign-in by " + " or ".join(ways) if ways else "no sign-in"
        if not self.actions:
            return f"{signing}, read-only"
        return f"{signing}, actions on for {'operators' if ways else 'anyone'}"


def check_serving(host: str, access: Access, *, no_sign_in: bool) -> None:
    """Refuse a view that would serve other machines with nobody signed in:
    raises CannotServeSo saying what to give instead."""
    if access.user_header is not None and not access.trusted_proxies:
        raise CannotServeSo(
            "--user-header needs --trusted-proxy ADDRESS: the header is believed only from it"
        )
    for given in access.trusted_proxies:
        try:
            ipaddress.ip_network(given, strict=False)
        except ValueError:
            raise CannotServeSo(
                f"--trusted-proxy {given!r} is not an IP address or network"
            ) from None
    if no_sign_in and access.signs_in:
        raise CannotServeSo("--no-sign-in goes with neither --users nor --user-header")
    if access.signs_in or is_loopback(host):
        return
    if not no_sign_in:
        raise CannotServeSo(
            f"--host {host} serves other machines, so the view needs sign-in: --users FILE "
            "(stepstone ui-user makes one), or a proxy that signs users in "
            "(--trusted-proxy ADDRESS --user-header NAME); or --no-sign-in to let anyone "
            "who reaches it read every run"
        )
    if access.actions:
        raise CannotServeSo(
            "--allow-actions needs sign-in when the view serves other machines: "
            "--users FILE, or --trusted-proxy ADDRESS --user-header NAME"
        )


def is_loopback(host: str) -> bool:
    if host in ANY_ADDRESS:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
