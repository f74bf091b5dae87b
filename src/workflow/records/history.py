"""Reading a run's attempt history: its claims in order, gaps filled.

The records are :mod:`stepstone.records.attempts`'s; the claim that settled
the run is described by its outcome record instead, and a claim whose worker
stopped before it could write one reads as ``AttemptResult.UNRECORDED``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, replace

from stepstone.records.attempts import AttemptInfo, AttemptResult, decode, final_attempt
from stepstone.records.error_texts import open_optional
from stepstone.records.layout import Layout
from stepstone.records.outcome import OutcomeRecord
from stepstone.records.payloads import Payloads
from stepstone.runtime.status import JobStatus
from stepstone.store import NotFound, ObjectStore

READ_CONCURRENCY = 16
"""Attempt records read at once."""
LONGEST_GAP = 100
"""A gap of more claims than this is one entry, not one per claim (the
first unrecorded claim, its message saying how many): a history is as long
as its records, whatever their claim numbers."""


@dataclass(frozen=True, slots=True)
class History:
    """A run's claims in order, and the records among them that would not decode."""

    attempts: list[AttemptInfo]
    unreadable: list[tuple[str, str]]
    """(key, why) of each record that would not decode."""


async def read_history(
    store: ObjectStore,
    layout: Layout,
    run_id: str,
    incarnation: str | None,
    outcome: OutcomeRecord | None,
    payloads: Payloads | None = None,
) -> History:
    """The history of the run's ``incarnation`` (with its outcome, when it has
    one of that incarnation): its records and the outcome's claim, in claim
    order, a gap in the claim numbers filled with an UNRECORDED claim. Sealed
    error texts are opened with ``payloads`` (:mod:`stepstone.records.error_texts`)."""
    if not incarnation:
        return History([], [])
    prefix = layout.attempts(run_id, incarnation)
    keys = [info.key async for info in store.scan(prefix)]
    semaphore = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(key: str) -> AttemptInfo | tuple[str, str] | None:
        async with semaphore:
            try:
                data = (await store.get(key)).data
            except NotFound:
                return None
        try:
            return decode(data)
        except ValueError as exc:
            return key, str(exc)

    found = await asyncio.gather(*(one(key) for key in keys))
    attempts = [item for item in found if isinstance(item, AttemptInfo)]
    unreadable = [item for item in found if isinstance(item, tuple)]
    if outcome is not None and outcome.incarnation == incarnation:
        final = final_attempt(outcome)
        if final is not None and all(a.claim != final.claim for a in attempts):
            attempts.append(final)
    opening = payloads if payloads is not None else Payloads()
    return History(_in_order((_opened(a, opening) for a in attempts), outcome), unreadable)


def _opened(attempt: AttemptInfo, payloads: Payloads) -> AttemptInfo:
    """``attempt`` with its sealed error texts opened (itself when it has none)."""
    message = open_optional(payloads, attempt.message)
    traceback = open_optional(payloads, attempt.traceback)
    if message is attempt.message and traceback is attempt.traceback:
        return attempt
    return replace(attempt, message=message, traceback=traceback)


def _in_order(attempts: Iterable[AttemptInfo], outcome: OutcomeRecord | None) -> list[AttemptInfo]:
    """By claim, gaps filled; the claim a cancel ended says so."""
    known = sorted(attempts, key=lambda a: (a.claim is None, a.claim or 0))
    numbered = sorted({a.claim for a in known if a.claim is not None})
    gaps: list[AttemptInfo] = []
    previous = 0
    for claim in numbered:
        missing = claim - previous - 1
        if 0 < missing <= LONGEST_GAP:
            gaps.extend(
                AttemptInfo(n, None, AttemptResult.UNRECORDED) for n in range(previous + 1, claim)
            )
        elif missing > LONGEST_GAP:
            message = f"claims {previous + 1} to {claim - 1} unrecorded ({missing} claims)"
            gaps.append(AttemptInfo(previous + 1, None, AttemptResult.UNRECORDED, message=message))
        previous = claim
    ordered = sorted([*known, *gaps], key=lambda a: (a.claim is None, a.claim or 0))
    if outcome is not None and outcome.status is JobStatus.CANCELLED and ordered:
        ordered[-1] = _cancelled(ordered[-1], outcome.finished_at)
    return ordered


def _cancelled(last: AttemptInfo, cancelled_at: float) -> AttemptInfo:
    """The run's last claim, if the cancel ended it: it was claimed before the
    cancel, and found its lease gone (or the cancelled outcome recorded)."""
    ended_by_cancel = last.result in (AttemptResult.LOST, AttemptResult.ANSWERED)
    if not ended_by_cancel or last.claimed_at is None or last.claimed_at > cancelled_at:
        return last
    return replace(last, result=AttemptResult.CANCELLED, message="the run was cancelled")
