"""Settling a claim: carrying out what :func:`stepstone.runtime.decide.decide`
made of an attempt's end, on the queue, and counting what the queue did.

A terminal decision goes to ``on_terminal`` first (the workflow layer
writes the run's outcome record there), then to the queue. An
``on_terminal`` that fails because the store is out sends the job round
again, uncounted; one that fails for any other reason makes it dead, so no
job is claimed forever for a result that can never be recorded. Every
decision reaches the queue through its one verb,
:meth:`~stepstone.runtime.queue.LeaseQueue.settle`; a drain's is a
:class:`~stepstone.runtime.decision.Release`.

Given ``seal_text`` (a worker told to seal errors' texts: the layer above
makes it from its payload codecs), the settler seals every error text the
queue is to keep of a claim (a retry's last error, a dead job's reason)
before it hands the decision over (:func:`kept`); its log lines keep the
text as it is. A dead job's reason keeps its kind readable
(``exhausted: <sealed>``).

Every settlement is fenced by the delivery's token. A worker that lost its
lease (it hung, the lease lapsed, another worker reclaimed the job) gets
``Settlement.LOST`` back: that is logged and counted, never reported to the
user as a success. A settlement that raises is tried a few times (the
heartbeat keeps the lease meanwhile); one that never lands leaves the job
claimed, to come back when its lease lapses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from stepstone.store.errors import StoreUnavailable

from ..backoff import Backoff
from ..clock import Clock
from ..decide import AttemptEnd, Raised, uncounted_step
from ..decision import Ack, Dead, Decision, Release, Retry, Suspended
from ..error_text import describe, reported_error, truncate
from ..queue import LeaseQueue, Settlement
from .callbacks import OnTerminal
from .in_flight import InFlightJob
from .logs import JobLog
from .pauses import error_pause
from .stats import WorkerStats

SETTLE_TRIES = 3
"""Tries of one settlement call that raises before leaving the job to its lease."""

SealText = Callable[[str], str]
"""What seals an error's text for the queue to keep (see the module docstring)."""


class Settler:
    """Settles the claims of one worker on ``queue``; ``on_terminal`` (None:
    nobody) hears each terminal result first; ``seal_text`` (None: kept as
    they are) seals the error texts the queue keeps."""

    def __init__(
        self,
        queue: LeaseQueue,
        clock: Clock,
        *,
        backoff: Backoff,
        lease: float,
        poll_interval: float,
        on_terminal: OnTerminal | None,
        stats: WorkerStats,
        log: JobLog,
        seal_text: SealText | None = None,
    ) -> None:
        self.seal_text = seal_text
        self._queue = queue
        self._clock = clock
        self._backoff = backoff
        self._lease = lease
        self._poll_interval = poll_interval
        self._on_terminal = on_terminal
        self._stats = stats
        self._log = log

    async def apply(self, job: InFlightJob, decision: Decision, ended: AttemptEnd) -> None:
        """Carry out a decision: on_terminal first for a terminal one, then the
        queue. A failed attempt is logged once, with its traceback when the
        attempt counts (an uncounted retry, a store outage or RetryLater, is one line)."""
        delivery = job.delivery
        error = reported_error(ended.error) if isinstance(ended, Raised) else None
        if isinstance(decision, Retry):
            self._log(
                delivery,
                logging.INFO,
                "failed (%s); retrying in %.3gs%s",
                decision.error,
                decision.delay,
                "" if decision.count else " (attempt not counted)",
                exc_info=error if decision.count else None,
            )
            if self.seal_text is not None:
                decision = kept(decision, self.seal_text)
        elif isinstance(decision, Suspended):
            wait = decision.wait
            self._log(delivery, logging.DEBUG, "suspended (%s %s)", wait.status.value, wait.shown)
        elif isinstance(decision, Ack | Dead):
            if not await self._report(job, decision):
                return
            if isinstance(decision, Dead):
                self._log(
                    delivery,
                    logging.WARNING,
                    "failed for good: %s",
                    decision.reason,
                    exc_info=error,
                )
                if self.seal_text is not None:
                    decision = kept(decision, self.seal_text)
        await self._settle(job, decision)

    async def release(self, job: InFlightJob) -> None:
        """Give back a job the drain cut short, its attempt not counted."""
        self._log(
            job.delivery, logging.INFO, "cut short by shutdown; releasing (attempt not counted)"
        )
        try:
            settled = await self._queue.settle(job.delivery, Release())
        except Exception as error:
            self._stats.queue_errors += 1
            self._log(
                job.delivery,
                logging.WARNING,
                "release failed (%s); the job returns when its lease expires",
                describe(error),
            )
            return
        self._count(job, settled, Release())

    async def _settle(self, job: InFlightJob, decision: Decision) -> None:
        """Settle the claim as ``decision`` says, retrying a queue error a few
        times (the heartbeat keeps the lease meanwhile). If it never lands,
        the job stays claimed and comes back when its lease lapses, which is
        the honest outcome for "we could not say how it ended"."""
        for attempt in range(SETTLE_TRIES):
            try:
                settled = await self._queue.settle(job.delivery, decision)
            except Exception as error:
                self._stats.queue_errors += 1
                last = attempt == SETTLE_TRIES - 1
                self._log(
                    job.delivery,
                    logging.ERROR if last else logging.WARNING,
                    "%s failed (%s)%s",
                    _verb(decision),
                    describe(error),
                    "; the job returns when its lease expires" if last else "; retrying",
                )
                if not last:
                    await asyncio.sleep(error_pause(attempt, self._poll_interval))
                continue
            self._count(job, settled, decision)
            return

    async def _report(self, job: InFlightJob, decision: Ack | Dead) -> bool:
        """Hand the terminal result to on_terminal; returns whether to go on
        and settle as decided.

        If on_terminal raises, the result was not recorded. A store outage
        (StoreUnavailable) passes: the job is retried, uncounted, to run again
        later. Anything else would fail the same way on every claim (an
        outcome object that does not decode, a key the store refuses), so the
        job is made dead at once with that error in its reason: a job
        ends in bounded time, never claimed again and again for nothing.
        """
        terminal = decision.terminal
        if self._on_terminal is None or terminal is None:
            return True
        delivery = job.delivery
        if self._clock.now() >= job.lease.expires_at:
            # Our lease ran out while the handler ran: the job may be another
            # worker's now. Check before reporting a result nobody waits for.
            try:
                ours = await job.lease.renew(job.renew_to)
            except Exception:
                ours = True  # cannot tell; the settlement below is fenced anyway
            if not ours:
                self._stats.lost += 1
                self._log(delivery, logging.WARNING, "lease lost before the result was reported")
                return False
        try:
            await self._on_terminal(delivery, terminal)
        except StoreUnavailable as error:
            delay = self._backoff.delay(uncounted_step(delivery), delivery.id)
            message = truncate(f"result not recorded: {describe(error)}")
            self._log(delivery, logging.WARNING, "%s; retrying in %.3gs", message, delay)
            await self._settle(job, self._kept(Retry(delay, count=False, error=message)))
            return False
        except Exception as error:
            message = f"result not recorded: {describe(error)}"
            self._log(delivery, logging.ERROR, "%s; the job is dead", message, exc_info=True)
            reason = message if isinstance(decision, Ack) else f"{decision.reason} ({message})"
            await self._settle(job, self._kept(Dead(truncate(reason))))
            return False
        return True

    def _kept(self, decision: Retry | Dead) -> Retry | Dead:
        """``decision`` as the queue is to keep it (:func:`kept`)."""
        return decision if self.seal_text is None else kept(decision, self.seal_text)

    def _count(self, job: InFlightJob, settled: Settlement, decision: Decision) -> None:
        job.settled = settled
        if settled is Settlement.LOST:
            self._stats.lost += 1
            self._log(
                job.delivery,
                logging.WARNING,
                "%s found the job no longer ours (lease lost or job cancelled); nothing changed",
                _verb(decision),
            )
            return
        if settled is Settlement.ACKED:
            self._stats.succeeded += 1
        elif settled is Settlement.RETRIED:
            self._stats.retried += 1
        elif settled is Settlement.DEAD:
            self._stats.dead += 1
        elif settled is Settlement.RELEASED:
            self._stats.released += 1
        elif settled is Settlement.SUSPENDED:
            self._stats.suspended += 1
        self._log(job.delivery, logging.DEBUG, "%s: %s", _verb(decision), settled.value)


def kept(decision: Retry | Dead, seal: SealText) -> Retry | Dead:
    """``decision`` as the queue is to keep it, its error texts sealed by
    ``seal``: a retry's last error (its message and its traceback's end,
    sealed whole), a dead job's reason (its kind kept readable when known)."""
    if isinstance(decision, Retry):
        return Retry(decision.delay, decision.count, seal(decision.kept_error))
    failure = decision.terminal
    if failure is None:
        return Dead(seal(decision.reason))
    return Dead(f"{failure.reason.value}: {seal(failure.message)}", failure)


def _verb(decision: Decision) -> str:
    """A settlement as a log line names it."""
    match decision:
        case Ack():
            return "ack"
        case Retry():
            return "retry"
        case Suspended():
            return "suspend"
        case Dead():
            return "dead-letter"
        case Release():
            return "release"
