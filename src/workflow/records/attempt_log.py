"""Writing attempt records: the one place a run's history is written.

The attempt runner tells :class:`AttemptLog` when a handler begins, and how the
run's outcome stood when a claim ended; the worker reports each claim's end
(``AttemptCallbacks.attempt_over``); the log writes a record of every claim
the outcome record does not describe. ``stepstone retry`` keeps the claim a
dead run's outcome describes with :func:`keep_final_attempt`, before that
outcome goes. The records' format is :mod:`stepstone.records.attempts`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import replace
from enum import Enum

from stepstone.records.attempts import AttemptInfo, AttemptResult, encode, final_attempt
from stepstone.records.envelope import incarnation_of
from stepstone.records.layout import Layout
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime.clock import Clock
from stepstone.runtime.decision import Ack, Dead, Decision, Retry, Suspended
from stepstone.runtime.observer import AttemptReport
from stepstone.runtime.queue import Delivery, Settlement
from stepstone.store import AlreadyExists, ObjectStore

log = logging.getLogger("stepstone")


class Noted(Enum):
    """How a run's outcome stood when one of its claims reported its end."""

    DESCRIBED = "the claim recorded the outcome, which describes its end"
    SWEPT = "the run was swept while the claim ran: nothing of it is kept"
    ANSWERED = "the outcome was recorded before the claim: it ran nothing"
    SUPERSEDED = "the claim ran, but another claim's outcome was recorded first"


class AttemptLog:
    """Writes the history of the claims one runner's worker makes.

    The attempt runner tells it when a handler begins (:meth:`begun`, the claim
    time an outcome record keeps) and which claims' ends the outcome record
    describes, or how the run's outcome stood when they ended
    (:meth:`note`); the worker tells it how each claim ended
    (:meth:`attempt_over`), and it writes a record of each claim the
    outcome record does not describe.
    """

    def __init__(
        self,
        store: ObjectStore,
        layout: Layout,
        clock: Clock,
        *,
        worker: Callable[[], str],
        enabled: bool,
    ) -> None:
        self.store = store
        self.layout = layout
        self._worker = worker
        """This process's worker's id (a default id settles when the worker starts)."""
        self._clock = clock
        self.enabled = enabled
        self._host = socket.gethostname()
        self._begun: dict[str, float] = {}
        self._noted: dict[str, Noted] = {}
        """By claim token."""

    def worker_id(self) -> tuple[str, int, str]:
        """This process's worker: host, pid, id (as an outcome record keeps it)."""
        return self._host, os.getpid(), self._worker()

    def begun(self, delivery: Delivery) -> None:
        self._begun[delivery.token] = self._clock.now()

    def claimed_at(self, delivery: Delivery) -> float | None:
        """When the claim's handler began (None: it never ran)."""
        return self._begun.get(delivery.token)

    def note(self, delivery: Delivery, noted: Noted) -> None:
        """How the run's outcome stood when the claim reported its end."""
        self._noted[delivery.token] = noted

    async def attempt_over(self, report: AttemptReport) -> None:
        """Write the record of a claim that ended, unless the outcome describes it."""
        token = report.delivery.token
        self._begun.pop(token, None)
        noted = self._noted.pop(token, None)
        if noted is Noted.DESCRIBED or noted is Noted.SWEPT or not self.enabled:
            return
        delivery = report.delivery
        incarnation = incarnation_of(delivery.payload)
        if incarnation is None:
            return  # a payload that is no job's: its run has no history to keep
        result = None
        if report.cancelled:
            result = AttemptResult.CANCELLED
        elif noted is Noted.ANSWERED:
            result = AttemptResult.ANSWERED
        elif noted is Noted.SUPERSEDED:  # the queue says whether it was still ours to settle
            lost = report.settled is Settlement.LOST
            result = AttemptResult.LOST if lost else AttemptResult.ANSWERED
        info = _info(report, result)
        info = replace(info, host=self._host, pid=os.getpid(), worker=self._worker())
        key = self.layout.attempt(delivery.id, incarnation, delivery.claims)
        try:
            await self.store.put_if_absent(key, encode(info))
        except AlreadyExists:
            pass  # a record of this claim number stands (a duplicate delivery's)
        except Exception as exc:  # the history informs; it never fails a run
            log.warning(
                "run %s: attempt record not written: %s",
                delivery.id,
                exc,
                extra={
                    "run_id": delivery.id,
                    "kind": delivery.kind,
                    "attempt": delivery.attempt,
                },
            )


def _info(report: AttemptReport, noted: AttemptResult | None) -> AttemptInfo:
    """The record of a claim that the outcome record does not describe."""
    delivery, decision, settled = report.delivery, report.decision, report.settled
    number: int | None = delivery.attempt
    message = traceback = None
    if isinstance(decision, Retry):
        message, traceback = decision.error, decision.traceback
    elif isinstance(decision, Dead) and decision.terminal is not None:
        failure = decision.terminal
        message, traceback, number = failure.message, failure.traceback, failure.attempt
    elif isinstance(decision, Suspended):
        wait = decision.wait
        message = f"{wait.status.value}: {wait.shown}" if wait.shown else wait.status.value
    elif isinstance(decision, Ack) and noted is None:
        message = "its outcome could not be recorded"
    return AttemptInfo(
        claim=delivery.claims,
        number=number,
        result=noted or _result(decision, settled),
        claimed_at=report.claimed_at,
        ended_at=report.ended_at,
        error_type=report.error_type,
        message=message,
        traceback=traceback,
    )


def _result(decision: Decision | None, settled: Settlement | None) -> AttemptResult:
    """How a claim ended, from the worker's decision and what the queue did."""
    if settled is None:
        return AttemptResult.UNSETTLED
    by_queue = {
        Settlement.LOST: AttemptResult.LOST,
        Settlement.RELEASED: AttemptResult.RELEASED,
        Settlement.DEAD: AttemptResult.DEAD,  # (or a nack the queue made the last)
        Settlement.SUSPENDED: AttemptResult.SUSPENDED,
    }
    if settled in by_queue:
        return by_queue[settled]
    if isinstance(decision, Retry):
        return AttemptResult.FAILED if decision.count else AttemptResult.DEFERRED
    if isinstance(decision, Suspended):
        return AttemptResult.SUSPENDED  # a wake came while it was held: due again at once
    # Acked or retried after an Ack or Dead whose outcome was not recorded (the
    # store was out: it goes round again).
    return AttemptResult.SUCCEEDED if settled is Settlement.ACKED else AttemptResult.DEFERRED


async def keep_final_attempt(store: ObjectStore, layout: Layout, outcome: OutcomeRecord) -> None:
    """Write the claim ``outcome`` describes as a record of its own: for an
    outcome about to be removed (a dead run retried), so its history keeps it."""
    info = final_attempt(outcome)
    if info is None or info.claim is None or not outcome.incarnation:
        return
    key = layout.attempt(outcome.run_id, outcome.incarnation, info.claim)
    with contextlib.suppress(AlreadyExists):
        await store.put_if_absent(key, encode(info))
