"""What a handler sees: its hold on the job (:class:`Lease`) and the
attempt it runs (:class:`Attempt`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from stepstone.store.base import urgent

from .. import plausible
from ..clock import Clock
from ..error_text import describe
from ..errors import LeaseLost
from ..queue import Delivery, LeaseQueue

log = logging.getLogger("stepstone.runtime.worker")


def check_lease(seconds: float) -> float:
    """``seconds`` as a lease a claim may hold: positive, and no longer than
    ``plausible.MAX_LEASE`` (a lease is renewed while its run lives; a
    record whose lease ends further ahead is one no run could have written).
    Raises ValueError."""
    if not 0 < seconds <= plausible.MAX_LEASE:
        raise ValueError(
            f"lease must be positive and at most {plausible.MAX_LEASE:g} s, got {seconds}"
        )
    return seconds


class Lease:
    """The worker's hold on one job, as its handler sees it.

    The worker renews it in the background every ``heartbeat`` seconds; a
    handler about to do something long can ask for more with
    :meth:`ensure_at_least`. What is held for as long as the lease (a
    concurrency slot) is renewed with it, after it and apart from it:
    :meth:`also_renew`.
    """

    def __init__(
        self,
        delivery: Delivery,
        queue: LeaseQueue,
        clock: Clock,
        on_lost: Callable[[], None],
    ) -> None:
        self._delivery = delivery
        self._queue = queue
        self._clock = clock
        self._on_lost = on_lost
        self._expires_at = delivery.lease_expires_at
        self._lost = False
        self._also: list[Callable[[float], Awaitable[bool]]] = []
        self._extending: asyncio.Task[None] | None = None

    @property
    def expires_at(self) -> float:
        """When the lease runs out, on the clock, as far as this worker knows."""
        return self._expires_at

    @property
    def lost(self) -> bool:
        """True once a renewal found another token (or none) on the job."""
        return self._lost

    async def ensure_at_least(self, seconds: float) -> None:
        """Make sure at least ``seconds`` of lease remain, renewing now if fewer do.

        Raises LeaseLost if the job is no longer ours (the handler is being
        cancelled anyway; nothing it does from here on will be settled). A
        queue error from the renewal propagates: the lease could not be
        guaranteed, and the handler should not go on as if it had been.
        """
        if seconds > plausible.MAX_LEASE:
            raise ValueError(
                f"a lease is at most {plausible.MAX_LEASE:g} s (renewed while the run lives), "
                f"not {seconds}"
            )
        if self._lost:
            raise LeaseLost(f"lease on job {self._delivery.id} was lost")
        if self._expires_at - self._clock.now() >= seconds:
            return
        if not await self.renew(seconds):
            raise LeaseLost(f"lease on job {self._delivery.id} was lost")

    async def renew(self, at_least: float) -> bool:
        """Renew to ``at_least`` seconds from now; False (and lost) if the token lost the job."""
        if self._lost:
            return False
        with urgent():  # ahead of the process's other sends (a throttled store)
            expires = await self._queue.renew(self._delivery, at_least)
        if expires is None:
            self._lose()
            return False
        self._expires_at = max(self._expires_at, expires)
        if self._also and (self._extending is None or self._extending.done()):
            self._extending = asyncio.create_task(
                self._extend(self._expires_at), name=f"extend lease {self._delivery.id}"
            )
        return True

    def also_renew(self, extend: Callable[[float], Awaitable[bool]]) -> Callable[[], None]:
        """After every renewal, call ``extend(expires_at)`` to carry something
        held with the lease to the same expiry; False from it (that thing was
        taken over) counts as losing the lease. Returns the function that
        stops it.

        The calls run in a task of their own, one renewal's at a time: the
        thing may be an object many processes write (a concurrency key's
        slots) that takes its writes slowly, and the next renewal of the
        lease must not wait for it, or the lease would run out while its
        slot is renewed. A renewal while the last one's calls still run
        starts none (the next one after them will). An error from ``extend``
        is logged; the next renewal calls it again."""
        self._also.append(extend)
        return lambda: self._also.remove(extend) if extend in self._also else None

    async def _extend(self, expires_at: float) -> None:
        for extend in list(self._also):
            if extend not in self._also:
                continue  # stopped meanwhile (its slot released)
            try:
                ours = await extend(expires_at)
            except Exception as error:
                log.warning(
                    "job %s: renewing what is held with its lease failed: %s",
                    self._delivery.id,
                    describe(error),
                )
                return
            if not ours:
                log.warning(
                    "job %s: what it holds with its lease (a concurrency slot) was taken over "
                    "(it had lapsed before its renewal landed); the lease is given up",
                    self._delivery.id,
                )
                self._lose()
                return

    def _lose(self) -> None:
        if not self._lost:
            self._lost = True
            self._on_lost()


@dataclass
class Attempt:
    """One attempt at one job: what a handler receives."""

    delivery: Delivery
    lease: Lease
    stopped: str | None = None
    """Why the worker stopped this attempt (``cancelled``, ``timed out``,
    ``drained``, ``lease lost``), or None while it may go on. An async handler
    is cancelled as well; a synchronous one, which Python cannot interrupt,
    should look before each piece of work it starts (a job's ``ctx.sync``
    calls do)."""

    @property
    def attempt(self) -> int:
        """1 on the first attempt; attempts so far, this one included."""
        return self.delivery.attempt

    @property
    def run_id(self) -> str:
        """The id of the run this attempt belongs to."""
        return self.delivery.id

    @property
    def kind(self) -> str:
        """The job's kind (its type's ``NAME``)."""
        return self.delivery.kind

    @property
    def payload(self) -> bytes:
        """The job's payload, as it was enqueued."""
        return self.delivery.payload

    @property
    def final(self) -> bool:
        """True on the last allowed attempt: a failure now is for good."""
        return self.delivery.attempt >= self.delivery.max_attempts
