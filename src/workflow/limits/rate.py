"""Rate limits: when may the next run start, so that starts keep to a rate.

Pure: the state is one number per (job type, rate key), read and written by
compare-and-swap (:mod:`stepstone.limits.shared`); the tests drive
:func:`reserve` directly.

The rule is GCRA, the generic cell rate algorithm (a token bucket kept as
one time instead of a count). With ``interval = per / count``, the state is
``tat``, the time the next run would start if runs kept exactly to the rate.
A run that asks at ``now`` is given the start ``max(now, tat - (burst - 1) *
interval)``, and ``tat`` moves on by one interval. Every run gets a start,
in the order it asked: one whose start is later waits for it (suspended,
holding no worker) and then starts without asking again, so waiting runs
never race each other for a token that has come free.

What it guarantees for the starts it gives: over any span of time ``L``, at
most ``ceil(L / interval) + burst - 1`` starts fall in it, so with the
default ``burst=1`` at most ``count`` per ``per``; over a long stretch,
exactly the rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from stepstone.runtime import plausible
from stepstone.runtime.store_queue.records import CorruptRecord


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``count`` runs start per ``per``, across every worker process.

    ``burst`` runs may start at once after a quiet spell; the default, 1,
    spaces every start ``per / count`` apart, so no span of length ``per``
    holds more than ``count`` starts. With ``burst=count`` a quiet type starts
    ``count`` runs at once, and then keeps to the rate.
    """

    count: int
    per: timedelta = timedelta(seconds=1)
    burst: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"a rate limit's count must be an int >= 1, got {self.count!r}")
        if not isinstance(self.per, timedelta) or self.per <= timedelta(0):
            raise ValueError(f"a rate limit's per must be a positive timedelta, got {self.per!r}")
        if not isinstance(self.burst, int) or self.burst < 1:
            raise ValueError(f"a rate limit's burst must be an int >= 1, got {self.burst!r}")

    @property
    def interval(self) -> float:
        """Seconds between starts at the steady rate."""
        return self.per.total_seconds() / self.count

    def most_in(self, span: float) -> int:
        """The most starts any span of ``span`` seconds can hold."""
        return math.ceil(span / self.interval) + self.burst - 1


@dataclass(frozen=True, slots=True)
class RateState:
    job: str
    """The job type's NAME (with ``key``, for people reading the object)."""
    key: str | None
    """The rate key, or None for the job type as a whole."""
    tat: float
    """When the next run would start, at the steady rate (clock time)."""


def reserve(
    state: RateState | None, *, job: str, key: str | None, limit: RateLimit, now: float
) -> tuple[RateState, float]:
    """The new state, and the start of a run that asks at ``now``. A state that
    could not be real (:func:`real`) is started afresh, as if absent."""
    tat = now if state is None or not real(state, limit, now) else max(state.tat, now)
    start = max(now, tat - (limit.burst - 1) * limit.interval)
    return RateState(job, key, tat + limit.interval), start


def real(state: RateState, limit: RateLimit, now: float) -> bool:
    """Whether ``state`` could have been written by runs keeping to ``limit``:
    its ``tat`` a number, and no further ahead of now than the starts of
    ``plausible.MAX_COUNT`` runs waiting (nor than ``plausible.WINDOW``). A
    NaN would switch the limit off, an ``inf`` fail every run, a time
    centuries ahead hold them all."""
    ahead = min(plausible.WINDOW, plausible.MAX_COUNT * limit.interval)
    return math.isfinite(state.tat) and state.tat <= now + ahead


def to_fields(state: RateState) -> dict[str, Any]:
    return {"job": state.job, "key": state.key, "tat": state.tat}


def from_fields(fields: Any, key: str) -> RateState:
    """The state stored under ``key``; raises CorruptRecord naming it."""
    try:
        rate_key = fields["key"]
        return RateState(
            str(fields["job"]), None if rate_key is None else str(rate_key), float(fields["tat"])
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise CorruptRecord(f"not a rate limit state: {exc!r}", key=key) from exc
