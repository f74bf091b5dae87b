"""Operator actions, recorded: who did what to which runs, and how it ended.

``stepstone retry``, ``cancel``, ``replay`` and ``purge`` and the web view's
buttons each run their action through :func:`audited`, which writes its
audit record (:mod:`stepstone.records.audit_log`) before the action and
again after it with its outcome: ``done``, ``partial`` (a bulk action that
could not do some runs), ``refused`` (the action was not possible: a run
not dead, not found) or ``failed`` (the store or the queue failed under it).
The record comes first so that no action is done unrecorded: when the
store will not take it, nothing is done and the operator is told why.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from stepstone.errors import InspectError, JobError
from stepstone.ops.actions import Bulk
from stepstone.records.audit import Action, Actor, AuditRecord, Outcome
from stepstone.records.audit_log import AuditLog
from stepstone.records.retention import Runs
from stepstone.runtime import plausible
from stepstone.runtime.errors import QueueError
from stepstone.runtime.run_id import is_storable_id
from stepstone.store import StoreError

log = logging.getLogger("stepstone.ops.audited")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Said:
    """How an action ended, for its record: its outcome, a line saying what
    was done, the runs refused with why, and (a purge's) the runs it touched."""

    outcome: Outcome
    result: str
    refused: Mapping[str, str] = field(default_factory=dict)
    runs: Sequence[str] | None = None


def done(result: str) -> Callable[[object], Said]:
    """An action on one run that returned: ``done``, saying ``result``."""
    return lambda value: Said("done", result)


def of_bulk(bulk: Bulk) -> Said:
    """A bulk action's outcome: ``done`` when every run was, else ``partial``
    (``refused`` when none was)."""
    asked = len(bulk.done) + len(bulk.refused)
    outcome: Outcome = "done" if not bulk.refused else "partial" if bulk.done else "refused"
    return Said(outcome, f"{bulk.verb} {len(bulk.done)} of {asked} run(s)", bulk.refused)


async def audited(
    runs: Runs,
    actor: Actor,
    action: Action,
    run_ids: Sequence[str],
    act: Callable[[], Awaitable[T]],
    said: Callable[[T], Said],
    *,
    detail: Mapping[str, str] | None = None,
) -> T:
    """``act()``, recorded as ``actor`` doing ``action`` on ``run_ids``:
    its record written first (a store that refuses it raises InspectError,
    and nothing is done), then ``act`` run, then the record written again
    with what ``said`` makes of its value, or with the error it raised
    (raised again). A record that cannot be written the second time is
    logged as a warning: the action is done, its record says ``started``."""
    for run_id in run_ids:
        if not is_storable_id(run_id):
            raise InspectError(f"nothing was done: {plausible.shown(run_id)} is not a run id")
    journal = AuditLog(runs.store, runs.layout, runs.clock)
    try:
        record = await journal.begin(actor, action, run_ids, detail)
    except StoreError as exc:
        raise InspectError(
            f"nothing was done: its audit record could not be written: {exc}"
        ) from exc
    try:
        value = await act()
    except JobError as exc:  # not possible (InspectError), an event refused, ...
        await _end(journal, record, Said("refused", str(exc)))
        raise
    except (StoreError, QueueError) as exc:
        await _end(journal, record, Said("failed", f"{type(exc).__name__}: {exc}"))
        raise
    except BaseException as exc:
        await _end(journal, record, Said("failed", f"stopped: {type(exc).__name__}: {exc}"))
        raise
    await _end(journal, record, said(value))
    return value


async def _end(journal: AuditLog, record: AuditRecord, said: Said) -> None:
    now = journal.clock.now()
    ended = record.ending(said.outcome, now, said.result, said.refused, runs=said.runs)
    try:
        await journal.end(ended)
    except StoreError as exc:
        log.warning(
            "audit record %s still says started: its outcome (%s) could not be written: %s",
            record.id,
            said.outcome,
            exc,
        )
