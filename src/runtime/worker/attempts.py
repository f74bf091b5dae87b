"""One claimed job's life in the worker, from its claim to the attempt's end.

Each claimed job runs as its own task: its handler runs in a child task the
worker can cancel (a plain handler in the worker's threads), and when it
ends, how it ended (returned, raised, timed out, drained, cancelled, its
lease lost) goes through the pure :func:`stepstone.runtime.decide.decide`,
and the decision is settled (:mod:`stepstone.runtime.worker.settle`). This
runs in the job's task, not the loop, so a slow settlement never holds up
claiming. Last, the observer and ``attempt_over`` hear how the attempt
ended, and the job leaves what is in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from ..backoff import Backoff
from ..clock import Clock
from ..decide import AttemptEnd, Expired, NoHandler, Raised, Returned, TimedOut, decide
from ..decision import Decision
from ..error_text import format_traceback, reported_error
from ..observer import AttemptReport, WorkerObserver, claim_result, error_type
from ..queue import Delivery, LeaseQueue, Settlement
from ..suspension import Suspend
from .callbacks import AttemptCallbacks
from .handlers import Registration, call_handler
from .heartbeats import Heartbeats
from .in_flight import InFlight, InFlightJob, Stop
from .lease import Attempt, Lease
from .logs import JobLog
from .settle import Settler
from .stats import WorkerStats
from .threads import JobThreads


class Attempts:
    """Starts and sees through the attempts of one worker's claimed jobs."""

    def __init__(
        self,
        queue: LeaseQueue,
        clock: Clock,
        jobs: InFlight,
        handlers: Mapping[str, Registration],
        *,
        heartbeats: Heartbeats,
        settler: Settler,
        threads: JobThreads,
        callbacks: AttemptCallbacks | None,
        observer: WorkerObserver | None,
        backoff: Backoff,
        attempt_timeout: float | None,
        lease: float,
        heartbeat: float,
        max_lapses: int,
        stats: WorkerStats,
        log: JobLog,
        wake: Callable[[], None],
    ) -> None:
        self._queue = queue
        self._clock = clock
        self._jobs = jobs
        self._handlers = handlers
        self._heartbeats = heartbeats
        self._settler = settler
        self._threads = threads
        self._callbacks = callbacks
        self._observer = observer
        self._backoff = backoff
        self._attempt_timeout = attempt_timeout
        self._lease = lease
        self._heartbeat = heartbeat
        self._max_lapses = max_lapses
        self._stats = stats
        self._log = log
        self._wake = wake
        self._heard = observer is not None or callbacks is not None
        """Someone hears of each attempt's end (so its time is taken)."""

    def begin(self, delivery: Delivery, claimed_at: float) -> None:
        """Start a claimed job: its handler task (unless it cannot run) and its job task."""
        loop = asyncio.get_running_loop()
        registration = self._handlers.get(delivery.kind)
        timeout = None
        renew_to, beat_every = self._lease, self._heartbeat
        if registration is not None:
            timeout = registration.timeout or self._attempt_timeout
            if registration.lease is not None and self._heartbeat > 0:
                # Claimed for the worker's lease: renewed to the kind's at once
                # (the first beat's rule below makes it due now).
                renew_to, beat_every = registration.lease, registration.lease / 3
        # The first beat is due when the lease has as much left as a beat on
        # schedule leaves (renew_to - beat_every), and never later than a
        # beat from now: a claim the store was slow to answer landed with less
        # than a whole lease (its end was set when the claim was sent).
        left = delivery.lease_expires_at - self._clock.now()
        first_beat = loop.time() + min(beat_every, left - (renew_to - beat_every))
        job: InFlightJob
        lease = Lease(delivery, self._queue, self._clock, lambda: self.stop(job, Stop.LOST))
        job = InFlightJob(
            delivery=delivery,
            registration=registration,
            lease=lease,
            deadline=None if timeout is None else self._clock.now() + timeout,
            next_beat=first_beat,
            renew_to=renew_to,
            beat_every=beat_every,
            next_check=loop.time() + self._heartbeats.check_interval(),
            claimed_at=claimed_at,
        )
        self._jobs.add(job)
        self._heartbeats.poke()
        self._stats.claimed += 1
        self._stats.peak_in_flight = max(self._stats.peak_in_flight, len(self._jobs))
        if self._heard:
            job.began = loop.time()
        if self._observer is not None:
            self._observe(delivery, lambda observer: observer.claimed(delivery))
        runnable = registration is not None and self._expired(delivery) is None
        if runnable:
            assert registration is not None
            job.attempt = Attempt(delivery, lease)
            job.handler_task = asyncio.create_task(
                call_handler(registration, job.attempt, self._threads),
                name=f"handler {delivery.kind} {delivery.id}",
            )
        job.task = asyncio.create_task(self._execute(job), name=f"job {delivery.id}")
        self._log(delivery, logging.DEBUG, "claimed")

    def _expired(self, delivery: Delivery) -> Expired | None:
        """Why ``delivery`` must not run: its run's leases lapsed
        ``max_lapses`` times (this claim took over the last), or an earlier
        release counted its lapses as attempts past ``max_attempts``."""
        if delivery.lapses >= self._max_lapses:
            return Expired(delivery.lapses, self._max_lapses)
        if delivery.attempt > delivery.max_attempts:
            return Expired(delivery.lapses)
        return None

    def stop(self, job: InFlightJob, why: Stop) -> None:
        """Cancel the job's handler for ``why``, unless it already finished."""
        if job.cancel(why):
            self._wake()

    async def _execute(self, job: InFlightJob) -> None:
        """Wait for the handler, then settle what it did. Never raises."""
        ended: AttemptEnd | None = None
        decision: Decision | None = None
        try:
            ended = await self._ended(job)
            if ended is not None:
                decision = decide(job.delivery, ended, self._backoff)
                await self._settler.apply(job, decision, ended)
        except Exception:
            self._log(job.delivery, logging.ERROR, "settling failed", exc_info=True)
        finally:
            if self._heard:
                await self._attempt_over(job, ended, decision)
            for side_task in (job.beat_task, job.check_task):
                if side_task is not None and not side_task.done():
                    side_task.cancel()
            self._jobs.discard(job)
            self._wake()

    async def _ended(self, job: InFlightJob) -> AttemptEnd | None:
        """How the attempt ended, or None when there is nothing to settle
        (the lease was lost, or the drain cut the attempt short and it was released)."""
        delivery = job.delivery
        expired = self._expired(delivery)
        if expired is not None:
            return expired
        if job.handler_task is None:
            return NoHandler()
        handler = job.handler_task
        await asyncio.wait([handler])
        if job.stop is Stop.CANCELLED or (
            (job.stop is Stop.LOST or job.lease.lost) and await self._was_cancelled(job)
        ):
            self._stats.cancelled += 1
            job.stop = Stop.CANCELLED  # (found so after a lost lease, too)
            self._log(delivery, logging.INFO, "cancelled while running; stopped, not settled")
            return None
        if job.stop is Stop.LOST or job.lease.lost:
            self._stats.lost += 1
            self._log(delivery, logging.WARNING, "lease lost while running; not settled")
            return None
        if not handler.cancelled() and handler.exception() is None:
            # It returned: the work is done, even if a timeout or the drain
            # asked it to stop a moment too late (or it ignored the request).
            return Returned(handler.result())
        if job.stop is Stop.DRAIN:
            await self._settler.release(job)
            return None
        if job.stop is Stop.TIMEOUT:
            assert job.registration is not None
            return TimedOut(job.registration.timeout or self._attempt_timeout or 0.0)
        if handler.cancelled():
            # Nobody here cancelled it: the handler raised CancelledError itself
            # (or cancelled its own task). That is its failure, not a shutdown.
            return Raised(asyncio.CancelledError("handler raised CancelledError"))
        error = handler.exception()
        assert error is not None
        if isinstance(error, Suspend):
            return Raised(error)  # no failure, and frequent: no traceback to format
        return Raised(error, format_traceback(reported_error(error)))

    async def _was_cancelled(self, job: InFlightJob) -> bool:
        """Whether a lease found gone was taken by a cancel (asked once, so
        the log can say which; a lost lease is rare)."""
        if self._callbacks is None:
            return False
        try:
            return await self._callbacks.is_cancelled(job.delivery)
        except Exception:
            return False

    async def _attempt_over(
        self, job: InFlightJob, ended: AttemptEnd | None, decision: Decision | None
    ) -> None:
        """Tell the observer and ``attempt_over`` how the attempt ended. Never raises."""
        settled = job.settled
        if settled is None and job.lease.lost:
            settled = Settlement.LOST
        cancelled = job.stop is Stop.CANCELLED
        report = AttemptReport(
            job.delivery,
            settled,
            error_type(ended, decision),
            asyncio.get_running_loop().time() - job.began,
            claimed_at=job.claimed_at,
            ended_at=self._clock.now(),
            decision=decision,
            cancelled=cancelled,
            result=claim_result(decision, settled, cancelled),
        )
        self._observe(job.delivery, lambda observer: observer.attempt_over(report))
        task = asyncio.current_task()
        if self._callbacks is None or (task is not None and task.cancelling()):
            return  # (cancelled: the drain gave up on this job; so do we)
        try:
            await self._callbacks.attempt_over(report)
        except Exception:
            self._log(job.delivery, logging.ERROR, "attempt_over failed", exc_info=True)

    def _observe(self, delivery: Delivery, tell: Callable[[WorkerObserver], None]) -> None:
        """Tell the observer; what it raises is logged, never the job's business."""
        if self._observer is None:
            return
        try:
            tell(self._observer)
        except Exception:
            self._log(delivery, logging.ERROR, "the worker's observer failed", exc_info=True)
