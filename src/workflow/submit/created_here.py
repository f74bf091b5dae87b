"""Keyed runs this process created and checked, for its worker's first claim.

A keyed submit that created its run's record and then found no outcome of
an earlier run of the key (the look after the create,
:mod:`stepstone.submit.submitter`) has proved that the run has no outcome
yet: the earlier run's outcome was written before its ack, which came
before the create. So when this process's worker claims that incarnation
for the first time, it need not look for an outcome again. The submit side
says so here; the execute side asks (:mod:`stepstone.execute.attempts`).
"""

from __future__ import annotations

from collections import OrderedDict

CREATED_HERE = 10_000
"""Runs kept (the newest); an older one's first claim just looks again."""


class CreatedHere:
    """Keyed runs created and checked here that no claim has asked about yet."""

    def __init__(self) -> None:
        self._runs: OrderedDict[str, str] = OrderedDict()

    def add(self, run_id: str, incarnation: str) -> None:
        self._runs[run_id] = incarnation
        if len(self._runs) > CREATED_HERE:
            self._runs.popitem(last=False)

    def take(self, run_id: str, incarnation: str) -> bool:
        """Whether this process created and checked this incarnation of the
        run. Answers True once."""
        return self._runs.pop(run_id, None) == incarnation
