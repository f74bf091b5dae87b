"""Heartbeats over what is in flight: lease renewals, attempt timeouts, and
checks for cancelled jobs.

The heartbeats keep their own task (:meth:`Heartbeats.keep`), beside the
worker's loop, from the worker's start until its drain is over. Each look at
every job in flight starts a lease renewal whose heartbeat is due, cancels a
handler past its attempt timeout, and starts a cancellation check of an
attempt that has run ``cancel_check`` seconds since its last; each of these
runs as a task of its own, and the task sleeps until it next has something
to do (:meth:`Heartbeats.pause`) or is poked (a job claimed, the clock
moved). A task of their own, not a step of the loop's round: the loop waits
on its claims, and a claim that takes seconds (S3 answering a burst of
conflicts, a slow store) must not hold back the renewals of the jobs already
running, or their leases lapse under a live worker and the jobs run twice.

Heartbeats go on after a handler returns, while its outcome is recorded and
it is settled: the lease must outlive the whole attempt. A renewal that
finds the lease gone stops the handler at once (through the lease's
``on_lost``), and nothing is settled: the job belongs to someone else.

Cancellation: a job cancelled while it runs loses its queue record, so the
next heartbeat would find the lease gone, up to a heartbeat later. Sooner:
``Worker.cancel_running`` stops the handler at once (the runner calls it
when it cancels a job its own worker holds), and ``is_cancelled`` is asked
about each attempt that has run ``cancel_check`` seconds, every
``cancel_check`` seconds after that (the workflow layer reads the run's
outcome record: one GET). A cancelled attempt is stopped and not settled;
the log says it was cancelled.

A timeout and the cancellation checks read the injected clock and the
loop's time respectively: when an attempt is due to end is about the job,
how often this process looks is about its liveness.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from ..clock import Clock
from ..error_text import describe
from ..queue import Delivery
from .in_flight import InFlight, InFlightJob, Stop
from .logs import JobLog
from .pauses import MIN_SLEEP, Wakeup
from .stats import WorkerStats

IsCancelled = Callable[[Delivery], Awaitable[bool]]
"""Asked about an attempt that has run a while: was its job cancelled meanwhile?"""


class Heartbeats:
    """Heartbeats, timeouts and cancellation checks over ``jobs``.

    Each job's heartbeat renews it to its ``renew_to`` every ``beat_every``
    seconds (0: never); ``is_cancelled`` (None: never asked) is asked every
    ``cancel_check`` seconds of an attempt (None: never). ``wake`` tells the
    worker's loop that a handler was stopped."""

    def __init__(
        self,
        jobs: InFlight,
        clock: Clock,
        *,
        is_cancelled: IsCancelled | None,
        cancel_check: float | None,
        stats: WorkerStats,
        log: JobLog,
        wake: Callable[[], None],
    ) -> None:
        self._jobs = jobs
        self._clock = clock
        self._is_cancelled = is_cancelled
        self._cancel_check = cancel_check
        self._stats = stats
        self._log = log
        self._wake = wake
        self._wakeup: Wakeup | None = None

    async def keep(self) -> None:
        """Look whenever something falls due or :meth:`poke` is called, until cancelled."""
        wakeup = self._wakeup = Wakeup(asyncio.get_running_loop())
        try:
            while True:
                wakeup.clear()
                self.look()
                await wakeup.sleep(max(MIN_SLEEP, self.pause()))
        finally:
            self._wakeup = None

    def poke(self) -> None:
        """Something changed (a job claimed, a beat over, the clock moved):
        look again now. Safe from any thread."""
        if self._wakeup is not None:
            self._wakeup.set()

    def check_interval(self) -> float:
        """Seconds between cancellation checks of one attempt (inf: none)."""
        if self._is_cancelled is None or self._cancel_check is None:
            return math.inf
        return self._cancel_check

    def look(self) -> None:
        """Start due heartbeats and cancellation checks, and cancel handlers
        past their deadline."""
        now_real = asyncio.get_running_loop().time()
        now = self._clock.now()
        for job in self._jobs:
            if job.stop is not None:
                continue
            late = job.deadline is not None and now >= job.deadline
            if late and job.running:
                self._stop(job, Stop.TIMEOUT)
                continue
            # Beats go on after the handler returns, while on_terminal and the
            # settlement run: the lease must outlive the whole attempt.
            if job.beat_every > 0 and now_real >= job.next_beat and not job.renewing:
                job.renewing = True
                job.next_beat = now_real + job.beat_every
                job.beat_task = asyncio.create_task(
                    self._beat(job), name=f"heartbeat {job.delivery.id}"
                )
            if now_real >= job.next_check and job.running:
                job.next_check = now_real + self.check_interval()
                if self._is_cancelled is not None and _idle(job.check_task):
                    job.check_task = asyncio.create_task(
                        self._check_cancelled(job, self._is_cancelled),
                        name=f"cancel check {job.delivery.id}",
                    )

    def pause(self) -> float:
        """Real seconds until :meth:`look` next has something to do (inf: nothing)."""
        now_real, now = asyncio.get_running_loop().time(), self._clock.now()
        wait = float("inf")
        for job in self._jobs:
            if job.stop is not None:
                continue
            running = job.running
            if job.deadline is not None and running:
                wait = min(wait, job.deadline - now)
            if job.beat_every > 0 and not job.renewing:
                wait = min(wait, job.next_beat - now_real)
            if running:
                wait = min(wait, job.next_check - now_real)
        return wait

    def _stop(self, job: InFlightJob, why: Stop) -> None:
        if job.cancel(why):
            self._wake()

    async def _check_cancelled(self, job: InFlightJob, is_cancelled: IsCancelled) -> None:
        """Stop the attempt if its job was cancelled. A check that fails is
        tried again at the next one (the heartbeat is the backstop)."""
        try:
            if await is_cancelled(job.delivery):
                self._stop(job, Stop.CANCELLED)
        except Exception as error:
            self._log(job.delivery, logging.DEBUG, "cancellation check failed: %s", describe(error))

    async def _beat(self, job: InFlightJob) -> None:
        """Renew one job's lease; a lost token cancels its handler (via Lease.on_lost)."""
        try:
            await job.lease.renew(job.renew_to)
        except Exception as error:
            self._stats.queue_errors += 1
            self._log(job.delivery, logging.WARNING, "lease renewal failed: %s", describe(error))
            # Try again sooner than a full heartbeat: the lease is running down.
            soon = asyncio.get_running_loop().time() + job.beat_every / 4
            job.next_beat = min(job.next_beat, soon)
        finally:
            job.renewing = False
            self.poke()


def _idle(task: asyncio.Task[None] | None) -> bool:
    """No such task is under way (never started, or done)."""
    return task is None or task.done()
