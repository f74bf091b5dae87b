"""Writing attempt records: the one place a run's history is written.

The attempt runner tells :class:`AttemptLog` when a handler begins, and
whether the run's outcome record describes a claim's end (or answered the
claim before it ran); the worker reports each claim's end with its
:class:`~stepstone.runtime.decision.AttemptResult`
(``AttemptCallbacks.attempt_over``); the log writes a record of every claim
the outcome record does not describe (:func:`write_attempt`, which
``stepstone retry`` also writes through, with :func:`keep_final_attempt`, to
keep the claim a dead run's outcome describes before that outcome goes). The
records' format is :mod:`stepstone.records.attempts`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from dataclasses import replace

from stepstone.records.attempts import AttemptInfo, AttemptResult, encode, final_attempt
from stepstone.records.envelope import incarnation_of
from stepstone.records.error_texts import ErrorSealing
from stepstone.records.layout import Layout
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime.clock import Clock
from stepstone.runtime.decision import Ack, Dead, Retry, Suspended
from stepstone.runtime.observer import AttemptReport
from stepstone.runtime.queue import Delivery
from stepstone.store import AlreadyExists, ObjectStore

log = logging.getLogger("stepstone")


class AttemptLog:
    """Writes the history of the claims one runner's worker makes.

    The attempt runner tells it when a handler begins (:meth:`begun`, the claim
    time an outcome record keeps), which claims' ends the outcome record
    describes (:meth:`described`: the claim that recorded it, or any claim
    of a run swept meanwhile, of which nothing is kept) and which claims
    found the outcome recorded by another (:meth:`answered`); the worker
    tells it how each claim ended (:meth:`attempt_over`), and it writes a
    record of each claim the outcome record does not describe, its error's
    texts sealed when ``sealing`` is on (:mod:`stepstone.records.error_texts`).
    """

    def __init__(
        self,
        store: ObjectStore,
        layout: Layout,
        clock: Clock,
        *,
        worker: Callable[[], str],
        enabled: bool,
        sealing: ErrorSealing | None = None,
    ) -> None:
        self.store = store
        self._sealing = sealing
        self.layout = layout
        self._worker = worker
        """This process's worker's id (a default id settles when the worker starts)."""
        self._clock = clock
        self.enabled = enabled
        self._host = socket.gethostname()
        self._begun: dict[str, float] = {}
        self._noted: dict[str, AttemptResult | None] = {}
        """By claim token: None, the outcome describes the claim; ANSWERED,
        another claim's outcome answered it."""

    def worker_id(self) -> tuple[str, int, str]:
        """This process's worker: host, pid, id (as an outcome record keeps it)."""
        return self._host, os.getpid(), self._worker()

    def begun(self, delivery: Delivery) -> None:
        self._begun[delivery.token] = self._clock.now()

    def claimed_at(self, delivery: Delivery) -> float | None:
        """When the claim's handler began (None: it never ran)."""
        return self._begun.get(delivery.token)

    def described(self, delivery: Delivery) -> None:
        """The run's outcome record describes the claim's end (it recorded
        it), or the run was swept while the claim ran: no record of its own."""
        self._noted[delivery.token] = None

    def answered(self, delivery: Delivery) -> None:
        """Another claim's outcome answered the run, before this claim ran or
        while it ran: it ends ``ANSWERED``, unless it had lost its lease."""
        self._noted[delivery.token] = AttemptResult.ANSWERED

    async def attempt_over(self, report: AttemptReport) -> None:
        """Write the record of a claim that ended, unless the outcome describes it."""
        token = report.delivery.token
        self._begun.pop(token, None)
        noted = self._noted.pop(token, report.result)
        if noted is None or not self.enabled:
            return
        delivery = report.delivery
        incarnation = incarnation_of(delivery.payload)
        if incarnation is None:
            return  # a payload that is no job's: its run has no history to keep
        answered = noted is AttemptResult.ANSWERED
        result = report.result
        if answered and result not in _STANDS:
            result = AttemptResult.ANSWERED
        info = replace(
            _info(report, result, answered, self._sealing),
            host=self._host,
            pid=os.getpid(),
            worker=self._worker(),
        )
        await write_attempt(self.store, self.layout, delivery.id, delivery.kind, incarnation, info)


_STANDS = frozenset({AttemptResult.CANCELLED, AttemptResult.LOST})
"""How a claim ended that stands even when another claim's outcome answered
its run: a cancel stopped it, or its lease was lost (nothing was settled)."""


async def write_attempt(
    store: ObjectStore, layout: Layout, run_id: str, kind: str, incarnation: str, info: AttemptInfo
) -> None:
    """Write the record of one claim of run ``run_id`` (of ``kind``),
    create-if-absent. Never raises: a record of the claim number that stands
    (a duplicate delivery's) is kept, and a failed write is logged (the
    history informs; it never fails a run). A record without its claim
    number (the last claim of a run recorded by an older release) is not written."""
    if info.claim is None:
        return
    try:
        await store.put_if_absent(layout.attempt(run_id, incarnation, info.claim), encode(info))
    except AlreadyExists:
        pass
    except Exception as exc:
        log.warning(
            "run %s: attempt record not written: %s",
            run_id,
            exc,
            extra={"run_id": run_id, "kind": kind, "attempt": info.number},
        )


def _info(
    report: AttemptReport, result: AttemptResult, answered: bool, sealing: ErrorSealing | None
) -> AttemptInfo:
    """The record of a claim that the outcome record does not describe (an
    error's texts sealed when ``sealing`` is on)."""
    delivery, decision = report.delivery, report.decision
    number: int | None = delivery.attempt
    message = traceback = None
    if isinstance(decision, Retry):
        message, traceback = decision.error, decision.traceback
        if sealing is not None and sealing.on:
            message, traceback = sealing.seal(message), sealing.seal_optional(traceback)
    elif isinstance(decision, Dead) and decision.terminal is not None:
        failure = decision.terminal
        message, traceback, number = failure.message, failure.traceback, failure.attempt
        if sealing is not None and sealing.on:
            message, traceback = sealing.seal(message), sealing.seal_optional(traceback)
    elif isinstance(decision, Suspended):
        wait = decision.wait
        message = f"{wait.status.value}: {wait.shown}" if wait.shown else wait.status.value
    elif isinstance(decision, Ack) and not answered:
        message = "its outcome could not be recorded"
    return AttemptInfo(
        claim=delivery.claims,
        number=number,
        result=result,
        claimed_at=report.claimed_at,
        ended_at=report.ended_at,
        error_type=report.error_type,
        message=message,
        traceback=traceback,
    )


async def keep_final_attempt(store: ObjectStore, layout: Layout, outcome: OutcomeRecord) -> None:
    """Write the claim ``outcome`` describes as a record of its own: for an
    outcome about to be removed (a dead run retried), so its history keeps it."""
    info = final_attempt(outcome)
    if info is None or not outcome.incarnation:
        return
    await write_attempt(store, layout, outcome.run_id, outcome.kind, outcome.incarnation, info)
