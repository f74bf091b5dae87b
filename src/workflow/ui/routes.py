"""The web view's pages: the runs list, one run, one stream of a run, the
audit log, and the two static files.

Each page reads through :mod:`stepstone.ops.reads` on every request (the
pages refresh themselves, so what they show is at most one refresh old) and
renders a template. A request the store cannot answer (an unknown id, a
queue that cannot list) is a page that says why, never a traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from stepstone.errors import InspectError
from stepstone.ops import actions, listing, reads, run_ids, talk
from stepstone.ops.by_attributes import list_by_attributes
from stepstone.ops.finished import FinishedListing
from stepstone.records.audit_log import AuditLog, Found
from stepstone.runner import JobRunner
from stepstone.runtime.capabilities import Survey
from stepstone.runtime.status import JobStatus
from stepstone.store import StoreError
from stepstone.ui.present import SINCE, Filters, run_view
from stepstone.ui.respond import HEADERS, render

OUTCOME_READS = 1000
"""Outcome records the runs list reads at most per refresh: a filter few
finished runs match shows those among the newest this many, and says so."""
QUEUE_READS = 1000
"""Queue records the runs list reads at most per refresh (those read before
cost nothing until they change): a view just started over more live runs
than this shows those read so far, says how many it has not, and knows them
all after a few refreshes."""
LISTING_WAIT = 0.25
"""Seconds the runs list waits for the listing of finished runs it starts
(:mod:`stepstone.ops.finished`) before it answers with the last one."""

AUDIT_OF_RUN = 20
"""Actions a run's page shows, the newest (``stepstone audit --run`` lists all)."""
AUDIT_LISTED = 100
AUDIT_DAYS = 7
"""The audit page shows the newest ``AUDIT_LISTED`` actions of the last
``AUDIT_DAYS`` days (``stepstone audit`` lists every one kept)."""

STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


async def runs_page(request: Request) -> Response:
    """Runs newest first, filtered by state, job type, age, version, key and
    attributes (through :func:`stepstone.ops.listing.list_runs`, or
    :func:`stepstone.ops.by_attributes.list_by_attributes` given
    attributes, as ``stepstone ls``); the
    queue's counts. ``?q=`` finds a run by its id, the start of it, or its
    idempotency key (:func:`stepstone.ops.run_ids.find_run`) and goes to its
    page; failing that, it lists the runs whose key starts with it.

    What a refresh reads: the queue listed (a LIST per thousand), at most
    ``QUEUE_READS`` of its records (those new or changed since the last;
    the queue keeps copies by etag), at most ``OUTCOME_READS`` outcome
    records, and the outcome listing of :mod:`stepstone.ops.finished`,
    listed beside the page."""
    runner: JobRunner = request.app.state.runner
    filters = Filters.from_query(request.query_params)
    problems = list(filters.problems)
    searched = request.query_params.get("q", "").strip()
    if searched:
        try:
            found = await run_ids.find_run(runner, searched)
        except InspectError as exc:
            problems.append(str(exc))
        else:
            if found is not None:
                return RedirectResponse(request.app.url_path_for("run", run_id=found), 303)
            # No run has it as its id or key: the runs whose key starts with it.
            filters = dataclasses.replace(filters, key=searched)
    rows: list[listing.RunSummary] = []
    unreadable: list[reads.Unreadable] = []
    unread = 0
    kinds = sorted({filters.kind} - {""})
    finished: FinishedListing = request.app.state.finished
    outcomes = await finished.latest(wait=LISTING_WAIT)
    surveyed: Survey | None = None
    if not problems:
        try:
            chosen = filters.chosen(runner.clock.now())
            if chosen.attributes:  # (the index names the runs to read)
                listed = await list_by_attributes(runner, chosen, limit=filters.limit)
            else:
                if chosen.status is None or chosen.status.queued:
                    surveyed = await listing.survey_queue(runner, reads=QUEUE_READS)
                listed = await listing.list_runs(
                    runner,
                    chosen,
                    limit=filters.limit,
                    listed=[] if outcomes is None else outcomes.infos,
                    reads=OUTCOME_READS,
                    surveyed=surveyed,
                )
        except InspectError as exc:
            problems.append(str(exc))
        else:
            kinds = sorted({row.kind for row in listed.rows} | {filters.kind} - {""})
            rows = listed.rows
            unreadable = listed.unreadable
            unread = listed.unread
    if surveyed is None:  # the list took no queue record: the counts still do
        surveyed = await listing.survey_queue(runner, reads=QUEUE_READS)
    counts: dict[str, int] | None = None
    if surveyed is not None:
        counts = listing.surveyed_counts(surveyed)
    else:
        try:
            counts = await listing.queue_counts(runner)
        except InspectError:
            counts = None  # a queue that cannot count (the page says nothing of it)
    return render(
        request,
        "runs.html",
        {
            "filters": filters,
            "states": [status.value for status in JobStatus],
            "kinds": kinds,
            "ages": list(SINCE),
            "rows": rows,
            "bulk": _bulk_offered(filters, rows) if not problems else [],
            "counts": counts,
            "problems": problems,
            "searched": searched if searched and not problems else "",
            "unreadable": unreadable,
            "unread": unread,
            "reads": OUTCOME_READS,
            "surveyed": surveyed,
            "queue_reads": QUEUE_READS,
            "live_states": [status.value for status in JobStatus if status.queued],
            "outcomes": outcomes,
            "listing_failed": finished.failed,
        },
        status=400 if problems and not rows else 200,
    )


def _bulk_offered(filters: Filters, rows: list[listing.RunSummary]) -> list[str]:
    """The bulk actions the list offers for what it shows: each whose runs
    (:func:`stepstone.ops.actions.bulk_choice`) are among its rows."""
    offered: list[str] = []
    verbs: tuple[actions.BulkVerb, ...] = ("retry", "cancel")
    for verb in verbs:
        try:
            taken, keep = actions.bulk_choice(verb, filters.chosen(0.0))
        except InspectError:
            continue
        if any(taken.status in (None, row.status) and keep(row) for row in rows):
            offered.append(verb)
    return offered


async def run_page(request: Request) -> Response:
    """Everything stored about one run."""
    runner: JobRunner = request.app.state.runner
    run_id = request.path_params["run_id"]
    try:
        found = await reads.detail(runner, run_id)
    except InspectError as exc:
        return render(request, "missing.html", {"run_id": run_id, "why": str(exc)}, 404)

    def link(run: str) -> str:
        return str(request.app.url_path_for("run", run_id=run))

    trail, problem = await _audit(request.app.state.audit.of_run(run_id, limit=AUDIT_OF_RUN))
    streams, callbacks = await asyncio.gather(
        talk.streams_of(runner, found), talk.callbacks_of(runner, found)
    )
    return render(
        request,
        "run.html",
        {
            "run": run_view(found, runner.clock.now(), link),
            "audit": trail,
            "audit_problem": problem,
            "audit_shown": AUDIT_OF_RUN,
            "streams": streams,
            "callbacks": callbacks,
        },
    )


async def stream_page(request: Request) -> Response:
    """One stream of a run: ``PAGE_ITEMS`` of its items from ``?from=`` (by
    default its last ones), refreshed with the page while the run writes."""
    runner: JobRunner = request.app.state.runner
    run_id, name = request.path_params["run_id"], request.path_params["name"]
    start_text = request.query_params.get("from", "")
    start = int(start_text) if start_text.isdigit() else None
    try:
        found = await reads.detail(runner, run_id)
    except InspectError as exc:
        return render(request, "missing.html", {"run_id": run_id, "why": str(exc)}, 404)
    if found.incarnation is None:
        why = "the run's records do not say which incarnation it is: no stream can be read"
        return render(request, "missing.html", {"run_id": run_id, "why": why}, 404)
    items, stored = await talk.stream_items(runner, run_id, found.incarnation, name, start)
    first = items[0].offset if items else (start or 0)
    return render(
        request,
        "stream.html",
        {
            "d": found,
            "name": name,
            "items": items,
            "stored": stored,
            "earlier": max(0, first - talk.PAGE_ITEMS) if first > 0 else None,
            "later": items[-1].offset + 1 if items and len(items) == talk.PAGE_ITEMS else None,
            "start": start,
        },
    )


async def audit_page(request: Request) -> Response:
    """The operators' actions, newest first: who, when, from where, what, how it ended."""
    journal: AuditLog = request.app.state.audit
    since = journal.clock.now() - AUDIT_DAYS * 86_400
    trail, problem = await _audit(journal.listed(since=since, limit=AUDIT_LISTED))
    return render(
        request,
        "audit.html",
        {"audit": trail, "audit_problem": problem, "days": AUDIT_DAYS, "listed": AUDIT_LISTED},
    )


async def _audit(reading: Awaitable[Found]) -> tuple[Found, str | None]:
    """What an audit read found, or nothing and why the store would not answer."""
    try:
        return await reading, None
    except StoreError as exc:
        return Found(), f"the audit log could not be read: {exc}"


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    body = request.app.state.static.get(name)
    suffix = name[name.rfind(".") :] if "." in name else ""
    if body is None or suffix not in STATIC_TYPES:
        return Response("not found", status_code=404, headers=HEADERS)
    return Response(body, media_type=STATIC_TYPES[suffix], headers=HEADERS)
