"""Who is asking: each request's visitor, and the pages they may see.

The view knows a visitor in one of three ways (:class:`Access` holds how it
was started):

- **a password**: with a users file (``--users``), a browser signs in on
  ``/signin`` (:mod:`stepstone.ui.signin`) and its session cookie
  (:mod:`stepstone.ui.sessions`) names the user from then on; the role is
  the file's, read again at each request;
- **a trusted proxy**: with ``--user-header NAME``, a request that comes
  from one of the ``--trusted-proxy`` addresses and carries that header is
  from the user it names (the role the users file gives them, else
  ``viewer``). From any other address the header is ignored, whatever it
  says: only the proxy can vouch for a user. The proxy's
  ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are honoured from those
  addresses alone too (uvicorn's ProxyHeadersMiddleware), so the audit
  records the browser's address, and a session cookie is ``Secure`` when
  the browser used HTTPS;
- **no sign-in**: without either, as a view on this machine only has always
  been: every visitor is anonymous, an operator when the view is started
  with ``--allow-actions`` and a viewer otherwise. ``stepstone ui`` refuses
  to serve other machines so unless told ``--no-sign-in``, and then never
  with actions (:func:`stepstone.ui.guard.check_serving`).

A request from nobody the view knows gets the sign-in page with a 401
(the static files and the sign-in page itself excepted); what a visitor may
not do (a viewer's action) is refused with a 403 by the page that does it
(:mod:`stepstone.ui.acting`).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from stepstone.records.audit import Actor, SignIn
from stepstone.ui.guard import Access
from stepstone.ui.sessions import Session, Sessions
from stepstone.ui.users import Role

ANONYMOUS = "anonymous"
"""Who the audit says acted in a view with no sign-in."""
OPEN_PATHS = ("/static/", "/signin", "/signout")
"""What a visitor nobody knows may still ask for."""
LONGEST_PROXY_NAME = 200


@dataclass(frozen=True, slots=True)
class Visitor:
    """Who a request is from: a name (None with no sign-in), a role, how
    they were known and the address they came from."""

    name: str | None
    role: Role
    sign_in: SignIn
    address: str | None

    def actor(self) -> Actor:
        """The visitor as an audit record names who acted."""
        return Actor(self.name or ANONYMOUS, "web", self.sign_in, self.role, self.address)


Refuse = Callable[[Request], Awaitable[Response]]


class Gate:
    """ASGI middleware: works out each request's visitor (``request.state.visitor``,
    None for nobody known) and its session (``request.state.session``), answers
    ``refuse`` to a visitor nobody knows, and sends the session cookie when a
    page changed it (``request.state.new_session``) or the browser had none."""

    def __init__(self, app: ASGIApp, access: Access, sessions: Sessions, refuse: Refuse) -> None:
        self._app = app
        self._access = access
        self._sessions = sessions
        self._refuse = refuse
        self._networks = access.networks()
        self._inner: ASGIApp = self._resolve
        if access.trusted_proxies:
            proxied = ProxyHeadersMiddleware(self._resolve, list(access.trusted_proxies))  # type: ignore[arg-type]
            self._inner = proxied  # type: ignore[assignment]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        client = scope.get("client")
        # Whether the peer is a trusted proxy is settled before its headers
        # rewrite the client: they cannot vouch for themselves.
        scope.setdefault("state", {})["from_proxy"] = self._trusted(client[0] if client else None)
        await self._inner(scope, receive, send)

    def _trusted(self, peer: str | None) -> bool:
        if peer is None or not self._networks:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self._networks)

    async def _resolve(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        secure = scope.get("scheme") == "https"
        session = self._sessions.read(request.cookies, secure=secure)
        state = request.state
        if session is None:
            session = self._sessions.fresh()
            state.new_session = session
        else:
            state.new_session = None
        state.session = session
        state.secure = secure
        state.visitor = visitor = self.visitor(request, session)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and state.new_session is not None:
                cookie = self._sessions.cookie(state.new_session, secure=secure).encode()
                message = {**message, "headers": [*message["headers"], (b"set-cookie", cookie)]}
            await send(message)

        if visitor is None and not scope["path"].startswith(OPEN_PATHS):
            response = await self._refuse(request)
            await response(scope, receive, sending)
            return
        await self._app(scope, receive, sending)

    def visitor(self, request: Request, session: Session) -> Visitor | None:
        """Who ``request`` is from, as the view was told to know visitors."""
        access = self._access
        address = request.client.host if request.client is not None else None
        if access.user_header is not None and request.state.from_proxy:
            named = request.headers.get(access.user_header, "").strip()
            if named and named.isprintable() and len(named) <= LONGEST_PROXY_NAME:
                listed = access.users.get(named) if access.users is not None else None
                return Visitor(named, listed.role if listed else "viewer", "proxy", address)
        if access.users is not None and session.user is not None and session.seal is not None:
            user = access.users.get(session.user)
            if user is None or user.hashed is None:
                return None  # removed from the file, or left to the proxy since
            if hmac.compare_digest(self._sessions.seal(user.hashed), session.seal):
                return Visitor(user.name, user.role, "password", address)
            return None
        if not access.signs_in:
            return Visitor(None, "operator" if access.actions else "viewer", "none", address)
        return None
