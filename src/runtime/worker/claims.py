"""The claim loop's part of a round: fill free capacity by claiming, and say
how long the loop may then sleep.

A fill claims batches until the queue has no more for this worker or its
capacity is full. Kinds at their per-kind cap are left out of the claim, so
their jobs stay queued rather than claimed and idle, and a batch is never
bigger than the smallest room left under a cap, so one claim cannot
overshoot it. A queue error holds off claiming for a pause that grows with
each error in a row (:func:`stepstone.runtime.worker.pauses.error_pause`).

The sleep lasts until something can change: the next job comes due
(``queue.next_due``), the queue would look for others' work
(``queue.next_look``: a StoreQueue's doorbell on a bucket), or
``poll_interval`` passes (other processes enqueue without telling us);
whatever wakes the loop sooner (a handler ending, work this process made,
the clock moving) cuts it short. Heartbeats and timeouts run
on a task of their own, never the loop's (:mod:`stepstone.runtime.worker.heartbeats`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping

from stepstone.store.errors import StepstoneError, StoreConfigError

from ..capabilities import IdleHints
from ..clock import Clock
from ..decision import Release
from ..error_text import describe
from ..queue import Delivery, LeaseQueue
from .handlers import Registration
from .identity import WorkerIdentity
from .in_flight import InFlight
from .logs import extra, logger
from .pauses import MIN_SLEEP, error_pause
from .stats import WorkerStats


class ClaimLoop:
    """The claims of the worker ``identity`` (marked as its): each delivery
    claimed goes to ``begin`` with the clock time of its claim."""

    def __init__(
        self,
        queue: LeaseQueue,
        clock: Clock,
        jobs: InFlight,
        handlers: Mapping[str, Registration],
        *,
        lease: float,
        poll_interval: float,
        only_registered: bool,
        stats: WorkerStats,
        begin: Callable[[Delivery, float], None],
        identity: WorkerIdentity,
    ) -> None:
        self._queue = queue
        self._clock = clock
        self._jobs = jobs
        self._handlers = handlers
        self._lease = lease
        self._poll_interval = poll_interval
        self._only_registered = only_registered
        self._stats = stats
        self._begin = begin
        self._identity = identity
        self._errors = 0
        self._not_before = 0.0
        self._last_claim_at = float("-inf")
        self.claiming = False
        """A claim is under way."""
        self.drained = False
        """The last claim found no more than it took, and no work came since."""

    def work_came(self) -> None:
        """The queue has work for us (or, at a start, may have): the next
        claim takes it, and nothing is handed over meanwhile."""
        self.drained = False

    async def fill(self, capacity: int, stopping: Callable[[], bool]) -> None:
        """Claim jobs into free capacity until the queue has no more or it is full."""
        loop = asyncio.get_running_loop()
        while not stopping() and loop.time() >= self._not_before:
            free = capacity - len(self._jobs)
            kinds, n = self._plan(free)
            if n <= 0:
                return
            claimed_at = self._clock.now()
            self.claiming = True
            try:
                deliveries = await self._queue.claim(
                    n, lease=self._lease, kinds=kinds, holder=self._identity.holder
                )
            except StoreConfigError:
                raise  # (no pause helps: the worker stops)
            except Exception as error:
                self.drained = False
                self._failed("claim", error)
                return
            finally:
                self.claiming = False
            # (work heard of during the claim woke us: the next claim takes it,
            # along with jobs handed over meanwhile, while there is room)
            self.drained = len(deliveries) < n
            self._errors = 0
            self._last_claim_at = claimed_at
            # (jobs handed over while the claim was under way may have taken room)
            room = min(n, capacity - len(self._jobs))
            for delivery in deliveries[:room]:
                self._begin(delivery, claimed_at)
            if len(deliveries) > n:
                logger.warning(
                    "%s: the queue returned %d deliveries for a claim of %d; releasing the extra",
                    self._identity.id,
                    len(deliveries),
                    n,
                )
            if len(deliveries) > room:
                await self._give_back(deliveries[room:])
            if len(deliveries) < n:
                return

    async def _give_back(self, surplus: list[Delivery]) -> None:
        """Release deliveries there is no room for: running them would break
        the concurrency bound."""
        for delivery in surplus:
            try:
                await self._queue.settle(delivery, Release())
            except Exception as error:
                self._stats.queue_errors += 1
                logger.warning(
                    "%s: releasing job %s failed (%s); it returns when its lease expires",
                    self._identity.id,
                    delivery.id,
                    describe(error),
                    extra=extra(delivery),
                )

    def _plan(self, free: int) -> tuple[Collection[str] | None, int]:
        """Which kinds to claim and how many.

        No cap hit: every kind (``None``, so a job of a kind nobody registered
        is claimed and dead-lettered rather than left to sit forever), unless
        ``only_registered``. Some kind at its cap: only the registered kinds
        below theirs. Either way the
        batch is no bigger than the smallest remaining cap among kinds it may
        return, so one claim can never overshoot a cap.
        """
        if free <= 0:
            return None, 0
        room = {
            kind: reg.max_in_flight - self._jobs.of_kind(kind)
            for kind, reg in self._handlers.items()
            if reg.max_in_flight is not None
        }
        if self._only_registered or any(left <= 0 for left in room.values()):
            kinds = [k for k in self._handlers if room.get(k, 1) > 0]
            if not kinds:
                return kinds, 0
        else:
            kinds = None
        allowed = [left for kind, left in room.items() if kinds is None or kind in kinds]
        return (kinds, min([free, *allowed]))

    async def idle_for(self, capacity: int) -> float:
        """Real seconds to sleep before the next round, if nothing wakes us first."""
        loop = asyncio.get_running_loop()
        now_real, now = loop.time(), self._clock.now()
        wait = self._poll_interval
        if now_real < self._not_before:
            wait = self._not_before - now_real
        elif len(self._jobs) < capacity and isinstance(self._queue, IdleHints):
            try:
                due = await self._queue.next_due()
            except StoreConfigError:
                raise
            except Exception as error:
                self._failed("next_due", error)
                due = None
            # A time after our last claim: sleep until then. One at or before
            # it was due when we claimed and the claim did not return it (its
            # kind is at its cap): claiming again at once would not either.
            if due is not None and due > self._last_claim_at:
                wait = min(wait, due - now)
            look = self._queue.next_look()
            if look is not None:
                wait = min(wait, look)
        return max(MIN_SLEEP, wait)

    def _failed(self, operation: str, error: Exception) -> None:
        """Log a queue error and hold off claiming for a (growing, capped) pause.

        One line per failure: a store outage can last minutes, and a
        traceback per retry would bury everything else in the log. Only an
        error that is none of stepstone's (a bug, not an outage) brings its
        traceback, on the first failure of a streak.
        """
        self._stats.queue_errors += 1
        self._errors += 1
        pause = error_pause(self._errors - 1, self._poll_interval)
        self._not_before = asyncio.get_running_loop().time() + pause
        unexpected = not isinstance(error, StepstoneError) and self._errors == 1
        logger.warning(
            "%s: queue %s failed (%s); retrying in %.2fs",
            self._identity.id,
            operation,
            describe(error),
            pause,
            exc_info=error if unexpected else None,
        )
