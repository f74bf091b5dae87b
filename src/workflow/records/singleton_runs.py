"""The live run of one singleton key: which run a submit of the key starts, joins or cancels.

Pure decisions over one object, ``singletons/<digest>``, one per job type and
singleton key (its concurrency key, with ``Job.singleton`` set): the caller
reads it, applies an operation with the time, and writes the result back by
compare-and-swap (:mod:`stepstone.limits.shared`). It names the key's
**live run**, the last run a submit of the key started:

- ``run``: its id, drawn by the submit that started it;
- ``input``: its canonical input, kept until its queue record is known to
  exist (``enqueued``), so that a submit that finds it not enqueued yet (its
  starter died between the two writes) enqueues it, under its id (a second
  enqueue is a duplicate and changes nothing);
- ``since``: when it was started.

The object does not learn when the run ends: a submit that finds a live
run asks the queue whether it still holds the run (and it is not dead);
if not, the run has ended, and the submit clears it (``ended``) and starts
its own. So a run's end costs nothing here, and a worker killed at any
point leaves nothing that needs mending.

- ``start``: a submit with no live run, or that replaces it
  (``CANCEL_RUNNING``), makes its run the live one (answering the one it
  replaced, to cancel); otherwise it is told the live run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from stepstone.records.debounce_windows import finite_time
from stepstone.runtime import plausible
from stepstone.runtime.store_queue.records import CorruptRecord


@dataclass(frozen=True, slots=True)
class LiveRun:
    """The live run of one singleton key of one job type."""

    job: str
    key: str
    run: str
    since: float
    input: bytes | None
    """Its input, while its queue record is not known to exist."""

    @property
    def enqueued(self) -> bool:
        return self.input is None


@dataclass(frozen=True, slots=True)
class Started:
    """What a submit's ``start`` decided."""

    own: bool
    """The submit's run is now the live one."""
    live: LiveRun | None
    """When not ``own``: the live run as the submit found it."""
    replaced: str | None = None
    """When ``own`` by replacing: the run that was live (to cancel)."""


def start(
    state: LiveRun | None,
    *,
    job: str,
    key: str,
    run: str,
    data: bytes,
    replacing: bool,
    now: float,
) -> tuple[LiveRun | None, Started]:
    """A submit of ``run`` (input ``data``) at ``now``: it becomes the live
    run if none is, or if it replaces the live one (``replacing``)."""
    if state is not None and state.run == run:
        return state, Started(own=False, live=state)  # (a keyed run's own resubmit)
    if state is None or replacing:
        live = LiveRun(job, key, run, now, data)
        return live, Started(own=True, live=None, replaced=None if state is None else state.run)
    return state, Started(own=False, live=state)


def enqueued(state: LiveRun | None, *, run: str) -> tuple[LiveRun | None, None]:
    """``run``'s queue record is known to exist: its input need not be kept."""
    if state is None or state.run != run or state.enqueued:
        return state, None
    return replace(state, input=None), None


def ended(state: LiveRun | None, *, run: str) -> tuple[LiveRun | None, None]:
    """``run`` is found ended: the key has no live run (unless another is)."""
    if state is None or state.run != run:
        return state, None
    return None, None


# -- in the store ----------------------------------------------------------------


def to_fields(state: LiveRun) -> dict[str, Any]:
    return {
        "job": state.job,
        "key": state.key,
        "run": state.run,
        "since": state.since,
        "input": state.input,
    }


def from_fields(fields: Any, key: str) -> LiveRun:
    """The live run stored under ``key``; raises CorruptRecord naming it."""
    try:
        data = fields["input"]
        if data is not None and not isinstance(data, bytes):
            raise TypeError(f"input is {plausible.shown(data)}, not bytes")
        return LiveRun(
            job=str(fields["job"]),
            key=str(fields["key"]),
            run=str(fields["run"]),
            since=finite_time(fields["since"], "since"),
            input=data,
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise CorruptRecord(f"not a singleton key's live run: {exc!r}", key=key) from exc
