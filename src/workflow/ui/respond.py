"""A page as the view answers it: a template with what every page shows,
and the headers every response carries."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from stepstone.runner import JobRunner

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""On every response: only this server's own script and stylesheet may run
(see :mod:`stepstone.ui.app`), forms post only to it, no other site may frame
it, and nothing is cached."""


def render(
    request: Request,
    name: str,
    context: dict[str, Any],
    status: int = 200,
    *,
    refresh: bool = True,
) -> Response:
    """The template ``name`` over ``context`` and what every page shows: the
    store, when it was read, who is visiting (None: nobody signed in) and
    whether they may act, the session's CSRF token for the page's forms,
    and the lines saying what an action just did (``?result=``).
    ``refresh``: whether the page refreshes itself (a confirmation does not)."""
    runner: JobRunner = request.app.state.runner
    state = request.app.state
    visitor = request.state.visitor
    base = {
        "store": runner.store.location,
        "refresh": state.refresh if refresh else 0,
        "now": runner.clock.now(),
        "visitor": visitor,
        "signs_in": state.access.signs_in,
        "actions": state.access.actions and visitor is not None and visitor.role == "operator",
        "csrf": request.state.session.csrf,
        "result": state.results.get(request.query_params.get("result")),
    }
    return state.templates.TemplateResponse(  # type: ignore[no-any-return]
        request, name, {**base, **context}, status_code=status, headers=HEADERS
    )
