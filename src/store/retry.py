"""The retry policy for transient store failures: bounded, capped, jittered.

Why here and not in each caller: the engine treats ``StoreUnavailable`` as
"the store is down for now" and backs off at its own, much coarser, level.
Short blips (an S3 503 SlowDown, a reset connection) are cheaper to absorb
inside the store with a few quick retries than to surface as a failed job
step. What is retried is decided by the caller (the S3 store retries only
``StoreUnavailable``; a 412 is an answer and is never retried); this module
only decides *when* and *how often*.

Delays use "full jitter" (a uniform draw between 0 and the capped exponential
delay), which spreads a crowd of clients that failed together instead of
letting them retry in lockstep.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from .errors import StoreUnavailable

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How many times to try an operation and how long to wait between tries.

    ``attempts`` counts every try, the first included (1 = never retry). The
    wait before retry ``n`` (1-based) is uniform in
    ``[0, min(cap, base * 2 ** (n - 1))]`` seconds.
    """

    attempts: int = 5
    base: float = 0.05
    cap: float = 2.0
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base < 0 or self.cap < 0:
            raise ValueError("base and cap must not be negative")

    def ceiling(self, retry: int) -> float:
        """The longest wait before retry number ``retry`` (1-based)."""
        return float(min(self.cap, self.base * 2 ** (retry - 1)))

    def delays(self) -> Iterator[float]:
        """The waits before each retry: ``attempts - 1`` of them."""
        for retry in range(1, self.attempts):
            yield self.rng.uniform(0.0, self.ceiling(retry))

    def worst_case(self) -> float:
        """The most time the waits can add up to (for timeouts and tests)."""
        return sum(self.ceiling(r) for r in range(1, self.attempts))

    async def run(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        retryable: Callable[[BaseException], bool] = lambda e: isinstance(e, StoreUnavailable),
        on_retry: Callable[[int, BaseException], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> T:
        """Await ``operation()`` until it succeeds, fails with a non-retryable
        error, or the attempts run out; then the last error propagates.

        ``on_retry(attempt, error)`` is told about each failure that will be
        retried (the S3 store uses it to remember that a write may have
        landed).
        """
        delays = self.delays()
        attempt = 1
        while True:
            try:
                return await operation()
            except Exception as exc:
                if not retryable(exc):
                    raise
                delay = next(delays, None)
                if delay is None:
                    raise
                if on_retry is not None:
                    on_retry(attempt, exc)
            attempt += 1
            await sleep(delay)


NO_RETRY = RetryPolicy(attempts=1)
"""Try once: for callers that do their own retrying."""
