"""How long a failed job waits before its next attempt.

The delay grows with the attempt number (exponential or Fibonacci), is capped,
and is spread by jitter so jobs that failed together (a dependency went down)
do not all come back in the same instant and knock it over again.

The jitter is deterministic: a hash of the job id and the attempt picks where
in the spread the delay lands. The same job failing the same attempt always
waits the same time, which keeps tests exact and makes a job's schedule
explainable after the fact, while different jobs still land apart.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

_HASH_SPAN = float(1 << 64)


@dataclass(frozen=True)
class Backoff:
    """A retry schedule. ``Backoff()`` is 1 s, 2 s, 4 s, ... capped at 5 minutes.

    ``base`` is the first delay (0 retries at once), ``cap`` the largest,
    ``jitter`` the fraction of each delay that may be taken off (0 = exact,
    1 = anywhere from 0 up to the full delay).
    """

    base: float = 1.0
    cap: float = 300.0
    jitter: float = 0.5
    strategy: Literal["exponential", "fibonacci"] = "exponential"

    def __post_init__(self) -> None:
        if self.base < 0 or self.cap < 0:
            raise ValueError(f"backoff base and cap must be >= 0, got {self.base}, {self.cap}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"backoff jitter must be in [0, 1], got {self.jitter}")
        if self.strategy not in ("exponential", "fibonacci"):
            raise ValueError(
                f"backoff strategy must be 'exponential' or 'fibonacci', got {self.strategy!r}"
            )

    def undelayed(self, attempt: int) -> float:
        """The delay after failed ``attempt`` (1-based) before jitter, capped.

        Exponential: base, 2*base, 4*base, ...; Fibonacci: base, base, 2*base,
        3*base, 5*base, ... Computed by stepping up to the cap rather than with
        ``2 ** attempt``, so a job with thousands of attempts cannot overflow.
        """
        if self.base == 0 or self.cap == 0:
            return 0.0
        value, previous = self.base, 0.0
        for _ in range(max(1, attempt) - 1):
            if value >= self.cap:
                break
            if self.strategy == "exponential":
                value *= 2
            else:
                value, previous = value + previous, value
        return min(value, self.cap)

    def delay(self, attempt: int, run_id: str) -> float:
        """Seconds to wait after failed ``attempt`` of ``run_id``: the undelayed
        delay with a deterministic share of up to ``jitter`` of it taken off."""
        full = self.undelayed(attempt)
        if full == 0 or self.jitter == 0:
            return full
        return full * (1.0 - self.jitter * _unit(run_id, attempt))


def _unit(run_id: str, attempt: int) -> float:
    """A number in [0, 1) fixed by (run_id, attempt): blake2b, not ``hash()``,
    which is salted per process and would differ between workers."""
    digest = hashlib.blake2b(f"{run_id}\x00{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPAN
