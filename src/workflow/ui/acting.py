"""The web view's actions: retry a dead run, cancel a live one, send an event
to a waiting one, complete a callback it waits for, replay an ended one from
a step, retry or cancel every run a filter of the list shows, and pause or
resume a schedule (:mod:`stepstone.ui.schedule_acting`).

Off unless the view is started with them (``stepstone ui --allow-actions``),
and then only for an operator (:mod:`stepstone.ui.access`): a viewer is
refused with a 403 that says so. Each is two requests: a GET of
``/act/{verb}`` that changes nothing and answers a page naming what the
action will do, to which runs, with a form; and that form's POST, which
must carry the session's CSRF token (see :mod:`stepstone.ui.guard`), acts
through :mod:`stepstone.ops.actions` (what ``stepstone retry``, ``cancel``
and ``replay`` use), ``runner.send_event`` or ``runner.complete_callback``,
recorded in the audit log
with who acted and from where (:mod:`stepstone.ops.audited`), and
redirects to the page the operator came from with a line saying what was
done. A bulk action acts on the runs its page listed, by id, so the count
confirmed is the count acted on (each refused one is named).
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from stepstone.errors import InspectError, JobError
from stepstone.ops import actions, reads
from stepstone.ops.audited import Said, audited, done, of_bulk
from stepstone.ops.by_attributes import find_runs
from stepstone.records.audit import Actor
from stepstone.records.callbacks import CallbackId
from stepstone.runner import JobRunner
from stepstone.runtime.errors import QueueError
from stepstone.runtime.status import JobStatus
from stepstone.store import StoreError
from stepstone.ui import schedule_acting
from stepstone.ui.access import Visitor
from stepstone.ui.guard import csrf_accepts
from stepstone.ui.present import Filters
from stepstone.ui.respond import render
from stepstone.ui.schedule_acting import SchedulePlan

SINGLE = ("retry", "cancel", "event", "callback", "replay")
BULK = ("retry", "cancel")
KEPT_RESULTS = 200
"""Result lines the view remembers for the pages its actions redirect to."""
PAYLOAD_CHARS = 65_536
"""The longest event payload (JSON text) the form takes."""


class Results:
    """What each action did, under a random id its redirect carries
    (``?result=``): the page shows the lines, and a reload shows them again."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, list[str]] = OrderedDict()

    def keep(self, lines: list[str]) -> str:
        said = secrets.token_urlsafe(8)
        self._kept[said] = lines
        while len(self._kept) > KEPT_RESULTS:
            self._kept.popitem(last=False)
        return said

    def get(self, said: str | None) -> list[str]:
        return [] if said is None else self._kept.get(said, [])


@dataclass(frozen=True, slots=True)
class Plan:
    """An action as its confirmation shows it and its POST does it."""

    verb: str
    question: str
    """What it will do, to which runs, as a question."""
    button: str
    fields: dict[str, str]
    """The form's fields (the token apart)."""
    run_ids: list[str]
    back: str
    """The page the operator came from, and where the result line is shown."""


async def confirm_page(request: Request) -> Response:
    """The confirmation: what the action will do, and the form that does it."""
    if (refused := _refused(request, None)) is not None:
        return refused
    try:
        plan = await _plan(request, dict(request.query_params))
    except InspectError as exc:
        return render(request, "problem.html", {"why": str(exc), "back": _back(request)}, 400)
    return render(
        request,
        "confirm.html",
        {"plan": plan},
        refresh=False,
    )


async def act(request: Request) -> Response:
    """Do what the confirmed form asks; redirect back with a line saying what was done."""
    body = (await request.body())[: PAYLOAD_CHARS * 4]
    form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    if (refused := _refused(request, form.get("csrf"))) is not None:
        return refused
    runner: JobRunner = request.app.state.runner
    actor = request.state.visitor.actor()
    verb = request.path_params["verb"]
    back = _back(request, form)
    try:
        if "schedule" in form:
            confirmed = await schedule_acting.plan(runner, verb, form, back)
            lines = await schedule_acting.do(runner, confirmed, actor)
        elif form.get("run"):
            lines = await _do(runner, await _single_plan(request, form), actor)
        elif verb in BULK:
            lines = await _do_many(runner, verb, form.get("ids", ""), actor)
        else:
            raise InspectError(f"no action {verb!r} on a list (one of: {', '.join(BULK)})")
    except InspectError as exc:
        lines = [f"nothing was done: {exc}"]
    said = request.app.state.results.keep(lines)
    joiner = "&" if "?" in back else "?"
    return RedirectResponse(f"{back}{joiner}result={said}", status_code=303)


async def _single_plan(request: Request, form: dict[str, str]) -> Plan:
    planned = await _plan(request, form)
    assert isinstance(planned, Plan)  # (a form with a run plans an action on it)
    return planned


def _refused(request: Request, token: str | None) -> Response | None:
    """Why this request may not act: actions are off, the visitor is no
    operator, or a POST lacks the session's token."""
    visitor: Visitor = request.state.visitor
    why = None
    if not request.app.state.access.actions:
        why = "actions are off: start the view with stepstone ui --allow-actions to use them"
    elif visitor.role != "operator":
        why = (
            f"refused: your role, {visitor.role}, cannot act on runs; an operator can "
            "(roles are given in the view's users file)"
        )
    elif request.method == "POST" and not csrf_accepts(request.state.session.csrf, token):
        why = "refused: the form did not carry this view's token (reload the page and try again)"
    if why is None:
        return None
    return render(request, "problem.html", {"why": why, "back": _back(request)}, 403)


def _back(request: Request, given: dict[str, str] | None = None) -> str:
    """Where to go back to: the run's page, or the list (with its filters)."""
    fields = given if given is not None else dict(request.query_params)
    if "schedule" in fields:
        return str(request.url_for("schedules").path)
    run_id = fields.get("run")
    if run_id:
        return str(request.url_for("run", run_id=run_id).path)
    query = urlencode({k: v for k, v in fields.items() if k in Filters.FIELDS and v})
    root = str(request.url_for("runs").path)
    return f"{root}?{query}" if query else root


async def _plan(request: Request, fields: dict[str, str]) -> Plan | SchedulePlan:
    verb = request.path_params["verb"]
    runner: JobRunner = request.app.state.runner
    if "schedule" in fields:
        return await schedule_acting.plan(runner, verb, fields, _back(request, fields))
    if fields.get("run"):
        if verb not in SINGLE:
            raise InspectError(f"no action {verb!r} on a run (one of: {', '.join(SINGLE)})")
        return await _single(runner, verb, fields, _back(request, fields))
    if verb not in BULK:
        raise InspectError(f"no action {verb!r} on a list (one of: {', '.join(BULK)})")
    return await _bulk(runner, verb, fields, _back(request, fields))


async def _single(runner: JobRunner, verb: str, fields: dict[str, str], back: str) -> Plan:
    run_id = fields["run"]
    found = await reads.detail(runner, run_id)
    status = found.status.value if found.status is not None else "unknown"
    what = f"{status} run {run_id} ({found.kind or 'of no known kind'})"
    keep = {"run": run_id}
    if verb == "retry":
        if found.status is not JobStatus.DEAD:
            raise InspectError(f"run {run_id} is {status}; only a dead run can be retried")
        question = (
            f"Retry {what}? Its failed outcome is removed and it is queued again; "
            "the steps it finished replay from their memos."
        )
        return Plan(verb, question, "Retry this run", keep, [run_id], back)
    if verb == "cancel":
        if found.status is None or not found.status.queued:
            raise InspectError(f"run {run_id} is {status}: there is nothing to cancel")
        if found.status is JobStatus.DEAD:
            question = f"Discard {what} from the queue? Its failed outcome stays."
            return Plan(verb, question, "Discard this run", keep, [run_id], back)
        question = (
            f"Cancel {what}? It is recorded cancelled and leaves the queue, and the "
            "children it created that have not finished are cancelled with it; an "
            "attempt under way stops at its next cancel check."
        )
        return Plan(verb, question, "Cancel this run", keep, [run_id], back)
    if verb == "replay":
        if found.status is None or not (found.status.finished or found.status is JobStatus.DEAD):
            raise InspectError(f"run {run_id} is {status}: only an ended run can be replayed")
        step = fields.get("step", "")
        keep |= {"step": step}
        if step:
            question = (
                f"Replay {what} from step {step!r}? It runs again as a new incarnation, with "
                "the input it was submitted with: the steps before that one replay from "
                "their memos, and it and every later step run again."
            )
        else:
            question = (
                f"Replay {what} from the start? It runs again as a new incarnation, with "
                "the input it was submitted with, every step run again."
            )
        return Plan(verb, question, "Replay this run", keep, [run_id], back)
    if verb == "callback":
        callback, payload = fields.get("callback", "").strip(), fields.get("payload", "")
        try:
            CallbackId.parse(callback)
        except ValueError as exc:
            raise InspectError(str(exc)) from None
        _payload(payload)
        question = f"Complete callback {callback} of {what} with {payload.strip() or 'null'}?"
        keep |= {"callback": callback, "payload": payload}
        return Plan(verb, question, "Complete this callback", keep, [run_id], back)
    name, payload = fields.get("name", "").strip(), fields.get("payload", "")
    if not name:
        raise InspectError("an event needs a name")
    _payload(payload)
    shown = payload.strip() or "no payload"
    question = f"Send event {name!r} with {shown} to {what}?"
    keep |= {"name": name, "payload": payload}
    return Plan(verb, question, "Send this event", keep, [run_id], back)


async def _bulk(runner: JobRunner, verb: str, fields: dict[str, str], back: str) -> Plan:
    filters = Filters.from_query(fields)
    if filters.problems:
        raise InspectError("; ".join(filters.problems))
    chosen, keep = actions.bulk_choice(
        "retry" if verb == "retry" else "cancel", filters.chosen(runner.clock.now())
    )
    listed = await find_runs(runner, chosen, limit=filters.limit)
    run_ids = [row.id for row in listed.rows if keep(row)]
    words = actions.described(chosen, filters.since or None)
    if not run_ids:
        raise InspectError(f"no {words} in the list to {verb}")
    doing = "Retry" if verb == "retry" else "Cancel"
    question = f"{doing} the {len(run_ids)} {words} this list shows?"
    if len(listed.rows) >= filters.limit:
        question += f" (Only the newest {filters.limit} were listed; others are left.)"
    kept = {k: v for k, v in fields.items() if k in Filters.FIELDS and v}
    return Plan(verb, question, f"{doing} {len(run_ids)} run(s)", kept, run_ids, back)


async def _do_many(runner: JobRunner, verb: str, ids: str, actor: Actor) -> list[str]:
    """A bulk action on the runs its confirmation listed (their ids, posted)."""
    posted = [run_id for run_id in ids.split(",") if run_id]
    act = actions.retry_many if verb == "retry" else actions.cancel_many
    try:
        done = await audited(
            runner,
            actor,
            "retry" if verb == "retry" else "cancel",
            posted,
            lambda: act(runner, posted),
            of_bulk,
        )
    except (InspectError, StoreError, QueueError) as exc:
        return [f"nothing was done: {exc}"]
    lines = [f"{done.verb} {len(done.done)} of {len(posted)} run(s)"]
    lines += [f"not {done.verb} {run_id}: {why}" for run_id, why in done.refused.items()]
    lines += [f"record {bad.key} would not decode: {bad.reason}" for bad in done.unreadable]
    return lines


async def _do(runner: JobRunner, plan: Plan, actor: Actor) -> list[str]:
    """The action on one run, confirmed, recorded as ``actor``'s."""
    run_id = plan.fields["run"]
    try:
        if plan.verb == "retry":
            said = f"requeued {run_id}: its failed outcome was removed; finished steps replay"
            await audited(
                runner, actor, "retry", [run_id], lambda: actions.retry(runner, run_id), done(said)
            )
            return [said]
        if plan.verb == "cancel":
            cancelled = f"cancelled {run_id}"
            discarded = f"discarded dead run {run_id} from the queue (its failed outcome stays)"
            result = await audited(
                runner,
                actor,
                "cancel",
                [run_id],
                lambda: actions.cancel(runner, run_id),
                lambda done: Said("done", cancelled if done == "cancelled" else discarded),
            )
            return [cancelled if result == "cancelled" else discarded]
        if plan.verb == "replay":
            step = plan.fields["step"] or None
            where = "the start" if step is None else f"step {step!r}"
            replayed = await audited(
                runner,
                actor,
                "replay",
                [run_id],
                lambda: runner.replay(run_id, from_step=step),
                lambda done: Said("done", f"replaying from {where} as {done.incarnation}"),
                detail={} if step is None else {"from_step": step},
            )
            return [
                f"replaying {run_id} from {where} as incarnation {replayed.incarnation} "
                f"({replayed.kept_memos} memo(s) kept; the earlier incarnation's stay, linked)"
            ]
        if plan.verb == "callback":
            callback = plan.fields["callback"]
            value = _payload(plan.fields["payload"])
            completed = f"completed callback {callback}; its run is woken"
            stood = f"callback {callback} had been completed already: the first completion stands"
            taken = await audited(
                runner,
                actor,
                "callback",
                [run_id],
                lambda: runner.complete_callback(callback, value),
                lambda done: Said("done" if done else "refused", completed if done else stood),
                detail={"callback": callback},
            )
            return [completed if taken else stood]
        name = plan.fields["name"]
        payload = _payload(plan.fields["payload"])
        sent = f"sent event {name!r} to {run_id}"
        await audited(
            runner,
            actor,
            "event",
            [run_id],
            lambda: runner.send_event(run_id, name, payload),
            done(sent),
            detail={"event": name},
        )
        return [sent]
    except (JobError, StoreError, QueueError) as exc:
        return [f"nothing was done: {exc}"]


def _payload(text: str) -> Any:
    """An event's payload as the form gives it: JSON, or nothing for none."""
    if len(text) > PAYLOAD_CHARS:
        raise InspectError(f"the payload is over {PAYLOAD_CHARS} characters")
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InspectError(f"the payload is not JSON: {exc}") from None
