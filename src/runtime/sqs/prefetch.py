"""Long polls that outlive the claim that started them.

A claim long-polls only when every tier came back empty, and then polls
every tier at once, returning as soon as any answers.
The polls still waiting cannot be withdrawn (cancelling the request could
lose messages SQS already hid for it), so they keep running in the
background, and whatever they bring is kept here for the next claim, which
renews each lease before handing it out.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ..queue import Delivery
from .limits import SQS_MAX_BATCH

Receive = Callable[[int, int, int, int], Coroutine[Any, Any, list[Delivery]]]
"""``receive(tier, n, visibility, wait)``: one ReceiveMessage on a tier's queue."""


class LongPolls:
    """Background long polls, at most one per tier, and the deliveries they brought."""

    def __init__(
        self, receive: Receive, weights: Sequence[int], *, brought: Callable[[], None]
    ) -> None:
        """``brought`` is called when a poll brings deliveries: a worker not
        in a claim at that moment learns there is work to take."""
        self._receive = receive
        self._weights = list(weights)
        self._brought = brought
        self._polls: dict[int, asyncio.Task[list[Delivery]]] = {}
        """Polls still out, by tier index."""
        self._prefetched: list[Delivery] = []
        self._error: BaseException | None = None

    async def poll(self, n: int, visibility: int, order: Sequence[int], wait: int) -> None:
        """Long-poll (``wait`` seconds) every tier of ``order``, splitting ``n``
        between them by weight (at least one each); return once any poll
        brought something, or all came back empty. A tier with a poll still
        out gets no second one. Raises what a poll raised.

        Every tier, even when ``n`` is smaller: a claim of one that polled
        only the heaviest tier waited out the whole ``wait`` while messages
        queued in the others. What the polls bring beyond ``n`` (at most one
        a tier) waits here for the next claim."""
        by_weight = sorted(order, key=lambda i: -self._weights[i])
        idle = [i for i in by_weight if i not in self._polls]
        quotas = split(max(n, len(idle)), [self._weights[i] for i in idle]) if idle else []
        for tier, quota in zip(idle, quotas, strict=True):
            task = asyncio.get_running_loop().create_task(
                self._receive(tier, quota, visibility, wait)
            )
            self._polls[tier] = task
            task.add_done_callback(functools.partial(self._done, tier))
        while not self._prefetched and self._polls and self._error is None:
            await asyncio.wait(set(self._polls.values()), return_when=asyncio.FIRST_COMPLETED)
            await asyncio.sleep(0)  # let the done callbacks run
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _done(self, tier: int, task: asyncio.Task[list[Delivery]]) -> None:
        if self._polls.get(tier) is task:
            del self._polls[tier]
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._error = error
            return
        got = task.result()
        if got:
            self._prefetched.extend(got)
            self._brought()

    def pop(self) -> Delivery | None:
        """The oldest delivery a poll brought, or None."""
        return self._prefetched.pop(0) if self._prefetched else None

    async def wind_down(self) -> list[Delivery]:
        """Wait out every poll (at most its ``wait``) and hand over, and
        forget, all they brought; an error one raised is dropped."""
        if self._polls:
            await asyncio.wait(set(self._polls.values()))
            await asyncio.sleep(0)
        brought, self._prefetched = self._prefetched, []
        self._error = None
        return brought


def split(n: int, weights: Sequence[int]) -> list[int]:
    """Split ``n`` (>= len(weights)) into positive parts near the weights,
    each at most SQS's batch of 10."""
    total = sum(weights)
    parts = [max(1, min(SQS_MAX_BATCH, n * w // total)) for w in weights]
    i = 0
    while sum(parts) < n and any(p < SQS_MAX_BATCH for p in parts):
        if parts[i % len(parts)] < SQS_MAX_BATCH:
            parts[i % len(parts)] += 1
        i += 1
    while sum(parts) > n:
        j = max(range(len(parts)), key=lambda k: parts[k])
        parts[j] -= 1
    return parts
