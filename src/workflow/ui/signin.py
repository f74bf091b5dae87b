"""Signing in and out of the web view, and the page that asks for it.

``/signin`` shows a form (name, password) carrying the browser's CSRF
token, so another site cannot sign a browser in under an account of its
choosing. Its POST checks the password against the users file's hash
(:mod:`stepstone.ui.passwords`, in a thread: a check takes a third of a
second) and, right, gives the browser a new session naming the user and
goes on to the page asked for; wrong, answers the form again with a 401
saying the name or the password is wrong (never which). An unknown name
costs as long as a wrong password. After ``FAILURES_ALLOWED`` failures
within ``FAILURE_WINDOW`` seconds from one address, or for one name, the
form is refused with a 429 until the oldest of them is that old.

``/signout`` (a POST, with the token) ends the session. A visitor the view
does not know gets the sign-in page in place of the page they asked for,
with a 401 (:class:`stepstone.ui.access.Gate`); behind a proxy that signs
users in and no passwords, it says the request did not come through it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from stepstone.ui.guard import Access, csrf_accepts
from stepstone.ui.passwords import BadHash, decoy_hash, verify_password
from stepstone.ui.respond import render
from stepstone.ui.sessions import Sessions

log = logging.getLogger("stepstone.ui.signin")

FAILURES_ALLOWED = 5
FAILURE_WINDOW = 900.0
"""Seconds a failed sign-in counts against its address and its name."""
KEPT_FAILURES = 10_000
"""Addresses and names whose failures are remembered, at most (the oldest go)."""
FORM_BYTES = 8192


class Failures:
    """Failed sign-ins by address and by name, over the last ``FAILURE_WINDOW`` s."""

    def __init__(self) -> None:
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def wait(self, *who: str, now: float) -> float:
        """Seconds before ``who`` (an address, a name) may try again; 0: now."""
        waits = [0.0]
        for key in who:
            times = self._recent(key, now)
            if len(times) >= FAILURES_ALLOWED:
                waits.append(times[0] + FAILURE_WINDOW - now)
        return max(waits)

    def failed(self, *who: str, now: float) -> None:
        for key in who:
            self._recent(key, now).append(now)
            self._seen.move_to_end(key)
        while len(self._seen) > KEPT_FAILURES:
            self._seen.popitem(last=False)

    def forgive(self, *who: str, now: float) -> None:
        """Take back the failure :meth:`failed` counted at ``now`` (the attempt succeeded)."""
        for key in who:
            times = self._seen.get(key)
            if times and now in times:
                times.remove(now)

    def _recent(self, key: str, now: float) -> deque[float]:
        times = self._seen.setdefault(key, deque())
        while times and times[0] <= now - FAILURE_WINDOW:
            times.popleft()
        return times


def _next(given: str | None) -> str:
    """Where to go once signed in: a path of this view, never another site
    (``//host``, ``/\\host`` and ``/<tab>/host`` all lead elsewhere in a browser)."""
    if (
        not given
        or not given.startswith("/")
        or given.startswith("//")
        or "\\" in given
        or not given.isprintable()
        or any(char.isspace() for char in given)
    ):
        return "/"
    return given


async def refuse(request: Request) -> Response:
    """The sign-in page in place of a page asked for by nobody the view knows (401)."""
    query = request.url.query
    wanted = request.url.path + (f"?{query}" if query else "")
    if request.method != "GET":
        wanted = "/"
    return _form(request, "Sign in to use this view.", wanted, 401)


async def signin_page(request: Request) -> Response:
    return _form(request, "", _next(request.query_params.get("next")), 200)


def _form(request: Request, why: str, wanted: str, status: int) -> Response:
    access: Access = request.app.state.access
    passwords = access.users is not None and access.users.any_password()
    if not passwords and access.user_header is not None:
        why = (
            "This view signs users in through its proxy, and this request did not "
            "come through it with a user named."
        )
    elif not passwords:
        why = "No user of this view has a password yet: add one with stepstone ui-user."
    return render(
        request,
        "signin.html",
        {"why": why, "next": wanted, "passwords": passwords},
        status,
        refresh=False,
    )


async def sign_in(request: Request) -> Response:
    """Check the form's name and password; sign the browser in, or say why not."""
    form = dict(parse_qsl((await request.body())[:FORM_BYTES].decode("utf-8", "replace")))
    wanted = _next(form.get("next"))
    if not csrf_accepts(request.state.session.csrf, form.get("csrf")):
        why = "Refused: the form did not carry this browser's token. Reload the page and try again."
        return _form(request, why, wanted, 403)
    access: Access = request.app.state.access
    failures: Failures = request.app.state.failures
    name = form.get("name", "").strip()
    address = request.client.host if request.client is not None else "-"
    now = time.monotonic()
    wait = failures.wait(f"address {address}", f"name {name}", now=now)
    if wait > 0:
        minutes = max(1, round(wait / 60))
        why = (
            "Too many failed sign-ins from this address or for this name: "
            f"try again in {minutes} minute(s)."
        )
        return _form(request, why, wanted, 429)
    user = access.users.get(name) if access.users is not None and name else None
    hashed = user.hashed if user is not None and user.hashed else decoy_hash()
    # Counted as failed from the start: tries sent at once cannot all pass the check above.
    who = (f"address {address}", f"name {name}")
    failures.failed(*who, now=now)
    try:
        right = await asyncio.to_thread(verify_password, form.get("password", ""), hashed)
    except BadHash:
        right = False
    if user is None or user.hashed is None or not right:
        log.warning("failed sign-in for %r from %s", name[:80], address)
        return _form(request, "Wrong name or password.", wanted, 401)
    failures.forgive(*who, now=now)
    sessions: Sessions = request.app.state.sessions
    request.state.new_session = sessions.signed_in(user.name, hashed)
    return RedirectResponse(wanted, status_code=303)


async def sign_out(request: Request) -> Response:
    """End the session (a POST with the token); back to the sign-in page."""
    form = dict(parse_qsl((await request.body())[:FORM_BYTES].decode("utf-8", "replace")))
    if csrf_accepts(request.state.session.csrf, form.get("csrf")):
        sessions: Sessions = request.app.state.sessions
        request.state.new_session = sessions.fresh()
    return RedirectResponse(f"{request.app.url_path_for('signin')}?{urlencode({'next': '/'})}", 303)
