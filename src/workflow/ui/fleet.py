"""The fleet's pages: the workers, from the records they keep
(:mod:`stepstone.ops.workers`).

Like every page, each reads on every request (it refreshes itself), a
bounded number of records, and a store that cannot answer is a page that
says why, never a traceback.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from stepstone.ops.workers import read_workers
from stepstone.runner import JobRunner
from stepstone.runtime.worker.presence import GONE_AFTER
from stepstone.store.errors import StoreError
from stepstone.ui.respond import render

RUNS_LINKED = 5
"""Runs a worker's row links to (the record lists up to 50; the count is whole)."""


async def workers_page(request: Request) -> Response:
    """Each worker life: live ones first, then gone (missed beats), then stopped."""
    runner: JobRunner = request.app.state.runner
    try:
        fleet, problem = await read_workers(runner), ""
    except StoreError as exc:
        fleet, problem = None, f"the store did not answer: {exc}"
    return render(
        request,
        "workers.html",
        {"fleet": fleet, "problem": problem, "gone_after": GONE_AFTER, "runs_linked": RUNS_LINKED},
        status=503 if problem else 200,
    )
