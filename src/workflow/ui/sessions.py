"""The web view's session cookie: who signed in, and the token its forms carry.

The cookie holds a small JSON document signed with the view's key by
itsdangerous (as Starlette's SessionMiddleware does), with the time it was
signed: one changed by the browser, or older than ``SESSION_SECONDS``, is
ignored. It is ``HttpOnly`` (no script reads it), ``SameSite=Lax`` (another
site's form posts arrive without it) and, when the page was asked for over
HTTPS (the request's own scheme, or a trusted proxy's ``X-Forwarded-Proto``),
``Secure`` and named with the ``__Host-`` prefix, which a browser keeps to
this host and path ``/``.

It holds no password and no role: the user's name, a seal of their
password's hash (so a password changed in the users file ends the sessions
signed in with the old one) and the CSRF token the view's forms must carry.
The key comes from ``STEPSTONE_UI_SESSION_KEY`` (for sessions that outlive
a restart, or several views behind one name), else is drawn at random when
the view starts.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

COOKIE = "stepstone_session"
SECURE_COOKIE = "__Host-stepstone_session"
SESSION_SECONDS = 12 * 3600
"""How long a sign-in lasts: then the user signs in again."""
KEY_ENV = "STEPSTONE_UI_SESSION_KEY"
SHORTEST_KEY = 32


class BadSessionKey(ValueError):
    """``STEPSTONE_UI_SESSION_KEY`` is too short to sign sessions with."""


@dataclass(frozen=True, slots=True)
class Session:
    csrf: str
    """The token this browser's forms carry."""
    user: str | None = None
    seal: str | None = None
    """Ties the session to the password the user signed in with."""


class Sessions:
    """Makes and reads the session cookie, signed with ``key``."""

    def __init__(self, key: bytes) -> None:
        self._key = key
        self._signer = URLSafeTimedSerializer(key, salt="stepstone.ui.session")

    @classmethod
    def from_environment(cls) -> Sessions:
        """Signed with ``$STEPSTONE_UI_SESSION_KEY``, or a random key."""
        given = os.environ.get(KEY_ENV)
        if given is None:
            return cls(secrets.token_bytes(32))
        if len(given) < SHORTEST_KEY:
            raise BadSessionKey(f"${KEY_ENV} must have at least {SHORTEST_KEY} characters")
        return cls(given.encode())

    def read(self, cookies: Mapping[str, str], *, secure: bool) -> Session | None:
        """The session the request's cookie holds, if it is one this view
        signed within ``SESSION_SECONDS``."""
        raw = cookies.get(SECURE_COOKIE if secure else COOKIE)
        if not raw:
            return None
        try:
            fields = self._signer.loads(raw, max_age=SESSION_SECONDS)
        except BadSignature:  # (its subclass SignatureExpired too)
            return None
        if not isinstance(fields, dict) or not isinstance(fields.get("csrf"), str):
            return None
        user, seal = fields.get("user"), fields.get("seal")
        if not (isinstance(user, str) and isinstance(seal, str)):
            user = seal = None
        return Session(fields["csrf"], user, seal)

    def fresh(self) -> Session:
        """A session for a browser new to the view: a token, nobody signed in."""
        return Session(secrets.token_urlsafe(32))

    def signed_in(self, user: str, hashed: str) -> Session:
        """The session of ``user``, who gave the password of ``hashed`` (a new token)."""
        return Session(secrets.token_urlsafe(32), user, self.seal(hashed))

    def seal(self, hashed: str) -> str:
        return hmac.new(self._key, hashed.encode(), hashlib.sha256).hexdigest()[:32]

    def cookie(self, session: Session, *, secure: bool) -> str:
        """The ``Set-Cookie`` value that keeps ``session`` in the browser."""
        fields = {"csrf": session.csrf}
        if session.user is not None and session.seal is not None:
            fields |= {"user": session.user, "seal": session.seal}
        value = self._signer.dumps(fields)
        name = SECURE_COOKIE if secure else COOKIE
        flags = "; Secure" if secure else ""
        return f"{name}={value}; Path=/; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Lax{flags}"
