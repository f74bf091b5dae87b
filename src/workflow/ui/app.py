"""The web view's ASGI application: Starlette routes over Jinja2 templates.

Read-only unless started with actions on: every page is a GET that reads
through :mod:`stepstone.ops.reads` (what ``stepstone ls`` and ``show`` use);
the only writes are the POSTs of :mod:`stepstone.ui.acting`, each by an
operator, with a CSRF token, and recorded in the audit log. Who a request
is from, and whether they must sign in first, is :mod:`stepstone.ui.access`'s
to say. Everything a job
wrote reaches a page through the templates, which autoescape HTML; control
characters (terminal escapes, bidirectional overrides) are made visible first
by the same :func:`~stepstone.telemetry.escaping.escape_controls` the CLI uses, so a
job's message can neither inject markup nor disguise itself.

It answers only the ``Host`` names :mod:`stepstone.ui.guard` allows (DNS
rebinding would otherwise let any site the operator visits read it). Each
response carries a Content-Security-Policy that allows only this
server's own script and stylesheet: were a template ever to print something
unescaped, the browser would still run none of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from stepstone.ops.finished import FinishedListing
from stepstone.ops.glance import user_first
from stepstone.ops.throughput import Statuses
from stepstone.ops.timeline import took
from stepstone.records.audit_log import AuditLog
from stepstone.runner import JobRunner
from stepstone.telemetry.escaping import escape_controls
from stepstone.ui import acting, fleet, routes, signin, throughput
from stepstone.ui.access import Gate
from stepstone.ui.guard import Access
from stepstone.ui.present import ago, pretty, when
from stepstone.ui.sessions import Sessions

HERE = Path(__file__).parent


def _visible(value: Any) -> Any:
    """Every ``{{ value }}`` passes here before autoescaping: a string's control
    characters are written as escapes (line breaks kept, for tracebacks)."""
    if isinstance(value, str) and not isinstance(value, Markup):  # (Markup: drawn here)
        return escape_controls(value, newlines=True)
    return value


@jinja2.pass_context
def _path_for(context: dict[str, Any], name: str, /, **params: Any) -> str:
    """A route's path, not its absolute URL: behind a proxy the ``Host`` the
    view hears is not the name the browser used, and a link by path works
    under any name."""
    return str(context["request"].app.url_path_for(name, **params))


def templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        finalize=_visible,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(when=when, took=took, ago=ago, pretty=pretty, user_first=user_first)
    env.globals["url_for"] = _path_for
    return Jinja2Templates(env=env)


class _PagesFirst:
    """Each request served with the listing of finished runs paused
    (:meth:`FinishedListing.serving`): a page never shares the interpreter
    with it, so a refresh takes as long with one under way as without."""

    def __init__(self, app: ASGIApp, finished: FinishedListing) -> None:
        self._app = app
        self._finished = finished

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        with self._finished.serving():
            await self._app(scope, receive, send)


def create_app(
    runner: JobRunner,
    *,
    refresh: float,
    hosts: Sequence[str],
    access: Access | None = None,
    sessions: Sessions | None = None,
) -> Starlette:
    """The application over ``runner`` (open on the loop that will serve it);
    its pages refresh themselves every ``refresh`` seconds (0: never). It
    answers a request only when its ``Host`` is one of ``hosts`` (see
    :mod:`stepstone.ui.guard`), 400 otherwise. ``access`` says how it knows
    its visitors and whether its pages change runs (by default: nobody signs
    in, read-only); ``sessions`` signs its cookies (by default with a key
    drawn now)."""
    access = access if access is not None else Access()
    sessions = sessions if sessions is not None else Sessions.from_environment()
    finished = FinishedListing(runner)
    app = Starlette(
        middleware=[
            Middleware(TrustedHostMiddleware, allowed_hosts=hosts, www_redirect=False),
            Middleware(Gate, access=access, sessions=sessions, refuse=signin.refuse),
            Middleware(_PagesFirst, finished=finished),
        ],
        routes=[
            Route("/", routes.runs_page, name="runs"),
            Route("/runs/{run_id}", routes.run_page, name="run"),
            Route("/runs/{run_id}/streams/{name:path}", routes.stream_page, name="stream"),
            Route("/workers", fleet.workers_page, name="workers"),
            Route("/schedules", fleet.schedules_page, name="schedules"),
            Route("/throughput", throughput.throughput_page, name="throughput"),
            Route("/audit", routes.audit_page, name="audit"),
            Route("/signin", signin.signin_page, methods=["GET"], name="signin"),
            Route("/signin", signin.sign_in, methods=["POST"], name="sign_in"),
            Route("/signout", signin.sign_out, methods=["POST"], name="signout"),
            Route("/act/{verb}", acting.confirm_page, methods=["GET"], name="confirm"),
            Route("/act/{verb}", acting.act, methods=["POST"], name="act"),
            Route("/static/{name}", routes.static, name="static"),
        ],
    )
    app.state.runner = runner
    app.state.finished = finished
    app.state.statuses = Statuses()
    app.state.templates = templates()
    app.state.refresh = refresh
    app.state.access = access
    app.state.sessions = sessions
    app.state.failures = signin.Failures()
    app.state.audit = AuditLog(runner.store, runner.layout, runner.clock)
    app.state.results = acting.Results()
    app.state.static = {path.name: path.read_bytes() for path in (HERE / "static").iterdir()}
    return app
