"""The web view's pages: the runs list, one run, and the two static files.

Each page reads through :mod:`stepstone.ops.reads` on every request (the
pages refresh themselves, so what they show is at most one refresh old) and
renders a template. A request the store cannot answer (an unknown id, a
queue that cannot list) is a page that says why, never a traceback.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from stepstone.errors import InspectError
from stepstone.ops import listing, reads
from stepstone.runner import JobRunner
from stepstone.runtime.queue import JobStatus
from stepstone.ui.present import SINCE, Filters, run_view

LIMIT = 100
"""Rows the runs list reads unless ``?limit=`` says otherwise (at most MAX_LIMIT)."""
MAX_LIMIT = 1000

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
"""On every response: only this server's own script and stylesheet may run
(see :mod:`stepstone.ui.app`), and nothing is cached."""

STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


def _render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    runner: JobRunner = request.app.state.runner
    now = runner.clock.now()
    base = {"store": runner.store.location, "refresh": request.app.state.refresh, "now": now}
    return request.app.state.templates.TemplateResponse(  # type: ignore[no-any-return]
        request, name, {**base, **context}, status_code=status, headers=HEADERS
    )


async def runs_page(request: Request) -> Response:
    """Runs newest first, filtered by state, job type and age (through
    :func:`stepstone.ops.listing.list_runs`, as ``stepstone ls``); the queue's counts."""
    runner: JobRunner = request.app.state.runner
    query = request.query_params
    filters = Filters(query.get("state", ""), query.get("kind", ""), query.get("since", ""))
    problems = []
    if filters.state and filters.state not in {status.value for status in JobStatus}:
        problems.append(f"unknown state {filters.state!r}")
    if filters.since and filters.since not in SINCE:
        problems.append(f"unknown age {filters.since!r} (one of {', '.join(SINCE)})")
    try:
        limit = min(MAX_LIMIT, max(1, int(query.get("limit", LIMIT))))
    except ValueError:
        problems.append(f"limit must be a number, not {query.get('limit')!r}")
        limit = LIMIT
    rows: list[listing.RunSummary] = []
    unreadable: list[reads.Unreadable] = []
    kinds = sorted({filters.kind} - {""})
    if not problems:
        try:
            chosen = listing.RunFilter(
                status=JobStatus(filters.state) if filters.state else None,
                kind=filters.kind or None,
                since=filters.submitted_after(runner.clock.now()),
            )
            listed = await listing.list_runs(runner, chosen, limit=limit)
        except InspectError as exc:
            problems.append(str(exc))
        else:
            kinds = sorted({row.kind for row in listed.rows} | {filters.kind} - {""})
            rows = listed.rows
            unreadable = listed.unreadable
    counts: dict[str, int] | None = None
    try:
        counts = await listing.queue_counts(runner)
    except InspectError:
        counts = None  # a queue that cannot count (the page says nothing of it)
    return _render(
        request,
        "runs.html",
        {
            "filters": filters,
            "states": [status.value for status in JobStatus],
            "kinds": kinds,
            "ages": list(SINCE),
            "rows": rows,
            "limit": limit,
            "counts": counts,
            "problems": problems,
            "unreadable": unreadable,
        },
        status=400 if problems and not rows else 200,
    )


async def run_page(request: Request) -> Response:
    """Everything stored about one run."""
    runner: JobRunner = request.app.state.runner
    run_id = request.path_params["run_id"]
    try:
        found = await reads.detail(runner, run_id)
    except InspectError as exc:
        return _render(request, "missing.html", {"run_id": run_id, "why": str(exc)}, 404)
    return _render(request, "run.html", {"run": run_view(found)})


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    body = request.app.state.static.get(name)
    suffix = name[name.rfind(".") :] if "." in name else ""
    if body is None or suffix not in STATIC_TYPES:
        return Response("not found", status_code=404, headers=HEADERS)
    return Response(body, media_type=STATIC_TYPES[suffix], headers=HEADERS)
