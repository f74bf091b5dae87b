"""The fleet's pages: the workers, from the records they keep
(:mod:`stepstone.ops.workers`), and the schedules, from their markers and
the application's definitions (:mod:`stepstone.ops.schedules`).

Like every page, each reads on every request (it refreshes itself), a
bounded number of records, and a store that cannot answer is a page that
says why, never a traceback.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from stepstone.ops.schedules import OVERDUE_AFTER, read_schedules
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


async def schedules_page(request: Request) -> Response:
    """Each schedule: how it ticks, its missed-tick policy, its last tick and
    the run that tick started, and its next tick."""
    runner: JobRunner = request.app.state.runner
    try:
        listed, problem = await read_schedules(runner, runner.scheduler.schedules), ""
    except StoreError as exc:
        listed, problem = None, f"the store did not answer: {exc}"
    return render(
        request,
        "schedules.html",
        {
            "listed": listed,
            "problem": problem,
            "overdue_after": OVERDUE_AFTER,
            "with_app": bool(runner.scheduler.schedules),
        },
        status=503 if problem else 200,
    )
