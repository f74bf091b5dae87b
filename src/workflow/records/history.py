"""Attempt history: every claim of a run, who made it, when, and how it ended.

What is stored, and what it costs:

- **The claim that settles a run** (it succeeded, or failed for good) is
  described by the outcome record, which carries its claim number, its
  worker and when it was claimed (:class:`OutcomeRecord`): no request more.
- **Every other claim** (a failure that is retried, an attempt handed back
  uncounted, a durable sleep or wait, a drain, a lost lease, a claim that
  found the outcome already recorded) writes one small object when it ends,
  create-if-absent::

      attempts/<run_id>/<incarnation>/<claim>

  ``JobRunner(history=False)`` writes none of these.
- **A claim whose worker stopped** (a crash, a lease that lapsed) before it
  ended leaves nothing: a gap in the claim numbers, which reads as
  :attr:`AttemptResult.UNRECORDED`.

So a run that succeeds on its first attempt costs nothing here; one that
fails twice and then succeeds, two PUTs. Reading a run's history is a LIST
and a GET per object, beside the outcome and queue record (which say which
incarnation is the run's). Retention and purge remove it with the run.

Claims, not attempts, number the records: a suspended run's claims share
an attempt (a durable sleep spends none), and every claim is a line of the
history. Each record has both numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import Enum, StrEnum
from typing import Any

from stepstone.records.codec import pack, unpack
from stepstone.records.envelope import incarnation_of
from stepstone.records.layout import Layout
from stepstone.records.outcome import OutcomeRecord
from stepstone.runtime.clock import Clock
from stepstone.runtime.decide import Ack, Dead, Decision, Retry, Suspended
from stepstone.runtime.observer import AttemptReport
from stepstone.runtime.queue import Delivery, JobStatus, Settlement
from stepstone.runtime.worker import Worker
from stepstone.store import AlreadyExists, NotFound, ObjectStore

log = logging.getLogger("stepstone")

HISTORY_VERSION = 1
READ_CONCURRENCY = 16


class AttemptResult(StrEnum):
    """How one claim of a run ended."""

    SUCCEEDED = "succeeded"
    """The run succeeded: its outcome is recorded."""
    FAILED = "failed"
    """The attempt failed and the run will be tried again (the attempt counted)."""
    DEFERRED = "deferred"
    """Handed back without spending the attempt, to run again later: the job
    raised RetryLater, or the store failed (the attempt's own, or the outcome's write)."""
    DEAD = "dead"
    """The run failed for good (its outcome records the error)."""
    SUSPENDED = "suspended"
    """The run went to sleep or to wait (for a time, an event, children);
    another claim resumes it."""
    RELEASED = "released"
    """A drain (a worker stopping) cut the attempt short and gave the run back uncounted."""
    LOST = "lost"
    """The worker lost its lease (it stalled, or the store was out of reach
    too long): the run may be another worker's now; nothing was settled."""
    CANCELLED = "cancelled"
    """The run was cancelled while this attempt ran (its lease was lost to the cancel)."""
    ANSWERED = "answered"
    """The run's outcome was already recorded (a worker stopped after writing
    it, before acking): the claim settled the run without running it."""
    UNSETTLED = "unsettled"
    """The queue refused the settlement; the run came back when its lease lapsed."""
    UNRECORDED = "unrecorded"
    """No record of this claim: its worker stopped before it could write one
    (a crash, a lapsed lease), or the history was off when it ended."""


@dataclass(frozen=True, slots=True)
class AttemptInfo:
    """One claim of a run: ``runner.history(job_id)`` lists them in order."""

    claim: int | None
    """The claim's number: 1 for the run's first, counting every claim,
    suspensions and drains included. (None only for the last claim of a run
    recorded by an older release of stepstone.)"""
    number: int | None
    """The attempt it was: attempts count failures, so the claims of a
    suspended run share one. None for an unrecorded claim."""
    result: AttemptResult
    claimed_at: float | None = None
    """When the worker claimed it (epoch seconds, the worker's clock)."""
    ended_at: float | None = None
    worker: str | None = None
    """The worker's id (``worker-<hex>``, also in its log lines)."""
    host: str | None = None
    pid: int | None = None
    error_type: str | None = None
    """The exception's qualified class name, when an error ended it."""
    message: str | None = None
    """The error (``ExcType: text``), or what it waits for when suspended."""
    traceback: str | None = None
    """Where the error was raised: its last frames, at most 8,000 characters."""

    @property
    def seconds(self) -> float | None:
        """How long the claim lasted, when both ends are known."""
        if self.claimed_at is None or self.ended_at is None:
            return None
        return max(0.0, self.ended_at - self.claimed_at)


def encode(info: AttemptInfo) -> bytes:
    return pack(
        {
            "v": HISTORY_VERSION,
            "claim": info.claim,
            "attempt": info.number,
            "result": info.result.value,
            "claimed_at": info.claimed_at,
            "ended_at": info.ended_at,
            "worker": [info.host, info.pid, info.worker],
            "error_type": info.error_type,
            "message": info.message,
            "traceback": info.traceback,
        }
    )


def decode(data: bytes) -> AttemptInfo:
    """The record ``data`` holds; ValueError saying what is wrong otherwise."""
    try:
        raw = unpack(data)
    except Exception as exc:
        raise ValueError(f"not a MessagePack document ({type(exc).__name__}: {exc})") from exc
    if not isinstance(raw, dict) or raw.get("v") != HISTORY_VERSION:
        raise ValueError("not an attempt record of a version this library reads")
    try:
        host, pid, worker = raw["worker"]
        info = AttemptInfo(
            claim=int(raw["claim"]),
            number=None if raw["attempt"] is None else int(raw["attempt"]),
            result=AttemptResult(raw["result"]),
            claimed_at=_float(raw["claimed_at"]),
            ended_at=_float(raw["ended_at"]),
            worker=worker,
            host=host,
            pid=pid,
            error_type=raw["error_type"],
            message=raw["message"],
            traceback=raw["traceback"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"a field is missing or malformed ({type(exc).__name__}: {exc})") from exc
    texts = (info.worker, info.host, info.error_type, info.message, info.traceback)
    if not all(text is None or isinstance(text, str) for text in texts):
        raise ValueError("a field has the wrong type")
    return info


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


# -- writing -----------------------------------------------------------------------


class Noted(Enum):
    """How a run's outcome stood when one of its claims reported its end."""

    DESCRIBED = "the claim recorded the outcome, which describes its end"
    SWEPT = "the run was swept while the claim ran: nothing of it is kept"
    ANSWERED = "the outcome was recorded before the claim: it ran nothing"
    SUPERSEDED = "the claim ran, but another claim's outcome was recorded first"


class AttemptLog:
    """Writes the history of the claims one runner's worker makes.

    The executor tells it when a handler begins (:meth:`begun`, the claim
    time an outcome record keeps) and which claims' ends the outcome record
    describes, or how the run's outcome stood when they ended
    (:meth:`note`); the worker tells it how each claim ended
    (:meth:`attempt_over`), and it writes a record of each claim the
    outcome record does not describe.
    """

    def __init__(
        self, store: ObjectStore, layout: Layout, worker: Worker, clock: Clock, *, enabled: bool
    ) -> None:
        self.store = store
        self.layout = layout
        self._worker = worker
        self._clock = clock
        self.enabled = enabled
        self._host = socket.gethostname()
        self._begun: dict[str, float] = {}
        self._noted: dict[str, Noted] = {}
        """By claim token."""

    def worker_id(self) -> tuple[str, int, str]:
        """This process's worker: host, pid, id (as an outcome record keeps it)."""
        return self._host, os.getpid(), self._worker.name

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
        info = replace(info, host=self._host, pid=os.getpid(), worker=self._worker.name)
        key = self.layout.attempt(delivery.id, incarnation, delivery.claims)
        try:
            await self.store.put_if_absent(key, encode(info))
        except AlreadyExists:
            pass  # a record of this claim number stands (a duplicate delivery's)
        except Exception as exc:  # the history informs; it never fails a run
            log.warning(
                "job %s: attempt record not written: %s",
                delivery.id,
                exc,
                extra={
                    "job_id": delivery.id,
                    "job_name": delivery.kind,
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
    elif isinstance(decision, Dead):
        failure = decision.terminal
        message, traceback, number = failure.message, failure.traceback, failure.attempt
    elif isinstance(decision, Suspended):
        wait = decision.wait
        message = f"{wait.status.value}: {wait.detail}" if wait.detail else wait.status.value
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


def final_attempt(outcome: OutcomeRecord) -> AttemptInfo | None:
    """The claim that recorded ``outcome``, as its record describes it; None
    for a cancelled run (a cancel is no claim)."""
    if outcome.status is JobStatus.CANCELLED:
        return None
    host, pid, worker = outcome.worker if outcome.worker is not None else (None, None, None)
    error = outcome.error
    return AttemptInfo(
        claim=outcome.claims,
        number=outcome.attempts,
        result=AttemptResult.SUCCEEDED
        if outcome.status is JobStatus.SUCCEEDED
        else AttemptResult.DEAD,
        claimed_at=outcome.claimed_at,
        ended_at=outcome.finished_at,
        worker=worker,
        host=host,
        pid=pid,
        error_type=None if error is None else error.error_type,
        message=None if error is None else f"{error.kind}: {error.message}",
        traceback=None if error is None else error.traceback,
    )


async def keep_final_attempt(store: ObjectStore, layout: Layout, outcome: OutcomeRecord) -> None:
    """Write the claim ``outcome`` describes as a record of its own: for an
    outcome about to be removed (a dead run retried), so its history keeps it."""
    info = final_attempt(outcome)
    if info is None or info.claim is None or not outcome.incarnation:
        return
    key = layout.attempt(outcome.run_id, outcome.incarnation, info.claim)
    with contextlib.suppress(AlreadyExists):
        await store.put_if_absent(key, encode(info))


# -- reading -----------------------------------------------------------------------


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
) -> History:
    """The history of the run's ``incarnation`` (with its outcome, when it has
    one of that incarnation): its records and the outcome's claim, in claim
    order, a gap in the claim numbers filled with an UNRECORDED claim."""
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
    return History(_in_order(attempts, outcome), unreadable)


def _in_order(attempts: Iterable[AttemptInfo], outcome: OutcomeRecord | None) -> list[AttemptInfo]:
    """By claim, gaps filled; the claim a cancel ended says so."""
    known = sorted(attempts, key=lambda a: (a.claim is None, a.claim or 0))
    numbered = {a.claim for a in known if a.claim is not None}
    gaps = [
        AttemptInfo(claim, None, AttemptResult.UNRECORDED)
        for claim in range(1, max(numbered, default=0) + 1)
        if claim not in numbered
    ]
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
