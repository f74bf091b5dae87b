"""Whether a keyed submit looks for an outcome before it creates a record.

A keyed submit's look after its create is enough (see
:mod:`stepstone.submit.submitter`); a look before it only saves a create
that would be taken back, for a resubmission of a run that has finished. On
a local store a look costs little and a create taken back a flush, so it
always looks first. On a store billed per request (``ObjectStore.remote``:
S3) a PUT costs as much as about twelve GETs, so it looks first only for a
run this process saw end, and for every key while resubmissions of finished
runs are common enough of late (``LOOK_FIRST_SHARE``) that the creates
taken back would cost more than the looks saved.
"""

from __future__ import annotations

from stepstone.records.run_records import RunRecords

LOOK_FIRST_SHARE = 1 / 16
"""On a remote store, keyed submits look first while at least this share of
late met a finished run."""
RECENT_WEIGHT = 1 / 32
"""How much each keyed submit moves that share (a moving average over
about the last 32)."""


class LookFirst:
    """The look-first rule for one process's keyed submits to ``records``."""

    def __init__(self, records: RunRecords) -> None:
        self._records = records
        self._finished_share = 0.0
        """The share of this process's keyed submits of late that met a
        finished run (a moving average, ``RECENT_WEIGHT``)."""

    def wanted(self, run_id: str) -> bool:
        """Whether a keyed submit of ``run_id`` looks for an outcome first."""
        return (
            not self._records.store.remote
            or self._records.seen_ended(run_id)
            or self._finished_share >= LOOK_FIRST_SHARE
        )

    def met(self, finished: bool) -> None:
        """Count a keyed submit: did it meet a finished run?"""
        self._finished_share += (float(finished) - self._finished_share) * RECENT_WEIGHT
