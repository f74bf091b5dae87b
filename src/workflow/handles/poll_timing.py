"""When a handle polls the outcome of a run submitted from a process with no worker.

Such a run (an API server's) is polled by what this runner saw of its kind
(:class:`TimeToOutcome`): how long the quicker of its last few took from
submit to outcome (a quarter were quicker still). The first poll comes at
four fifths of it, the next ones 15% of it apart (at most ``MAX_POLL``)
until one and a half times it has passed, then with the backoff. A run that
takes about as long as the last ones costs about three reads instead of one
per doubling, and its outcome is seen within 15% of that time of its
writing, where a doubling backoff may overshoot by as long as it has
already waited (up to ``MAX_POLL``). The quicker runs', not the typical
time, so that a kind whose runs are often quick is polled early enough for
them.
"""

from __future__ import annotations

from collections import deque

from stepstone.handles.handle import Submitted

IDLE_FIRST_POLL = 0.02
"""Seconds before a handle's first poll in a runner with no worker running."""
MAX_POLL = 1.0
"""Polls back off, doubling, to at most this many seconds apart."""
EXPECTED_FIRST = 0.8
"""The first poll of a run just submitted, as a share of the time its kind's
runs took to an outcome (a quarter of the last ``RECENT_RUNS`` seen here took
less) ..."""
EXPECTED_STEP = 0.15
"""... then polls this share of that time apart (at most ``MAX_POLL``) ..."""
EXPECTED_UNTIL = 1.5
"""... until this many times it have passed; then the backoff."""
RECENT_RUNS = 16
"""Runs of a kind whose time to an outcome is kept ..."""
RECENT_FROM = 3
"""... and how many must be seen before their time is used."""


def next_poll(delay: float, expected: float | None, elapsed: float | None) -> float:
    """Seconds from one poll that found nothing to the next: a step of the
    ``expected`` time to an outcome while ``elapsed`` (since the submit) is
    under ``EXPECTED_UNTIL`` of it, else double the last wait (up to
    ``MAX_POLL``)."""
    if expected is not None and elapsed is not None:
        step = min(max(IDLE_FIRST_POLL, EXPECTED_STEP * expected), MAX_POLL)
        if elapsed < EXPECTED_UNTIL * expected:
            return step
        delay = min(delay, step)  # (the first wait, of most of the expected time)
    return min(delay * 2, MAX_POLL)


class TimeToOutcome:
    """How long the last ``RECENT_RUNS`` runs of each kind submitted here took
    to an outcome, as this process's polls saw them: from the submit to the
    poll that found the outcome, or to the middle of that poll and the one
    before it that missed."""

    def __init__(self) -> None:
        self._seen: dict[str, deque[float]] = {}

    def saw(self, run: Submitted, last_miss: float | None, found: float) -> None:
        """A poll at ``found`` found the outcome of ``run``; the poll before
        it, if any, missed at ``last_miss``."""
        written = found if last_miss is None else (last_miss + found) / 2
        seen = self._seen.get(run.kind)
        if seen is None:
            seen = self._seen[run.kind] = deque(maxlen=RECENT_RUNS)
        seen.append(max(0.0, written - run.at))

    def expected(self, kind: str) -> float | None:
        """The time to poll ``kind``'s runs by: a quarter of those seen lately
        took less (the quickest of the first few); None until ``RECENT_FROM``
        were seen."""
        seen = self._seen.get(kind)
        if seen is None or len(seen) < RECENT_FROM:
            return None
        return sorted(seen)[len(seen) // 4]
