"""The windows of one debounce key: which run each submit joins, and its input.

Pure decisions over one object, ``debounce/<digest>``, one per job type and
debounce key: the caller reads it, applies an operation with the time, and
writes the result back by compare-and-swap (:mod:`stepstone.limits.shared`),
so every submit and every run of the key, in any process, sees the others'
writes in one order. The tests drive these functions directly.

A **window** is one run-to-be and the submits that joined it:

- ``first`` and ``last``: the times of its first and latest submit;
- ``due``: when its run starts, ``wait`` after the latest submit, never
  later than ``cap`` (``max_wait`` after the first), and never earlier than
  an earlier submit made it (its run is already due then);
- ``input``: the latest submit's canonical input, the one its run runs;
- ``count``: the submits it took (each submit's answer is its place);
- ``enqueued``: its run's queue record is known to exist; a submit that
  finds it not yet so enqueues it too (the run id is the window's, so a
  second enqueue is a duplicate and changes nothing), which mends a
  submit that died between opening the window and enqueueing its run;
- ``closed``: its run took it: the input is final, and no submit joins it.

The rules:

- **Join or open.** A submit joins the newest window if it is open (not
  closed, and its due time has not come); otherwise it opens a new window
  under a fresh run id, due ``min(wait, max_wait)`` from now.
- **WindowAnswer once due.** A run asking for its window before its due time is
  told to wait until then (it suspends and asks again); at or after it, the
  window closes and the run gets its input. A run whose window is gone (it
  was taken and dropped, or the object was lost) is told so.
- **Dropped when recorded.** Once the run has recorded its input (a memo of
  the run), its window is dropped.
- **Abandoned.** A window never enqueued and ``ABANDONED`` seconds past due
  has no run and no caller holding its answer (the submit that opened it
  died before answering, and no later submit joined it): it is dropped. So
  is a closed one ``CLOSED_KEPT`` seconds past due that its run did not drop,
  and an enqueued one its run never took ``UNTAKEN_KEPT`` past due (the run
  was cancelled, or is dead).
- **Bounded.** At most ``MAX_WINDOWS`` windows wait for their runs (each
  keeps its input): a submit that would open one more is refused
  (``Joined.refused``); that many only build up while no worker takes the
  key's runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from stepstone.runtime import plausible
from stepstone.runtime.store_queue.records import CorruptRecord

MAX_WINDOWS = 64
"""Windows of one key that may wait for their runs at once."""
ABANDONED = 300.0
"""Seconds past due after which a window never enqueued is dropped."""
UNTAKEN_KEPT = 86_400.0
"""Seconds past due an enqueued window whose run never took it is kept
(its run was cancelled, or is dead): then it is dropped, so that it counts
no more toward ``MAX_WINDOWS``."""
CLOSED_KEPT = 3600.0
"""Seconds past due a closed window is kept if its run did not drop it (a
worker died between taking it and recording its input: the run's next
claim takes it again)."""


@dataclass(frozen=True, slots=True)
class Window:
    """One run-to-be of a debounce key and the submits it took."""

    run: str
    first: float
    last: float
    due: float
    cap: float
    """The latest ``due`` may be (``first + max_wait``; inf: no cap)."""
    count: int
    input: bytes
    enqueued: bool = False
    closed: bool = False

    def open_at(self, now: float) -> bool:
        """Whether a submit at ``now`` joins this window."""
        return not self.closed and now < self.due


@dataclass(frozen=True, slots=True)
class Windows:
    """The windows of one key of one job type, the oldest first."""

    job: str
    """The job type's NAME (with ``key``, for people reading the object)."""
    key: str
    """The debounce key, as the submit gave it."""
    windows: tuple[Window, ...] = ()

    def find(self, run: str) -> Window | None:
        for window in self.windows:
            if window.run == run:
                return window
        return None


@dataclass(frozen=True, slots=True)
class Joined:
    """What a submit's join decided."""

    run: str
    """The run the submit is part of."""
    opened: bool
    """The submit opened its window (its run is new)."""
    at: float
    """The time the decision was made at (the submit's time, by the rule)."""
    due: float
    """When the run starts, as things stand after this submit."""
    count: int
    """The submit's place in its window: 1 for the one that opened it."""
    enqueued: bool
    """The run's queue record is known to exist."""
    refused: bool = False
    """No window was open and ``MAX_WINDOWS`` wait for their runs already."""


@dataclass(frozen=True, slots=True)
class WindowAnswer:
    """What a run asking for its window was told."""

    found: bool
    """Its window is there (else: gone; nothing else is set)."""
    until: float | None = None
    """Not due yet: wait until then, and ask again."""
    input: bytes | None = None
    """Due: the window is closed, and this is its run's input."""
    window: Window | None = None


def join(
    state: Windows | None,
    *,
    job: str,
    key: str,
    run: str,
    data: bytes,
    wait: float,
    max_wait: float | None,
    now: float,
) -> tuple[Windows, Joined]:
    """A submit of ``data`` at ``now``: it joins the open window, or opens one
    under ``run`` (a fresh id the caller drew)."""
    current = _without_abandoned(state or Windows(job, key), now)
    newest = current.windows[-1] if current.windows else None
    if newest is not None and newest.open_at(now):
        due = max(newest.due, min(now + wait, newest.cap))
        window = replace(newest, last=now, due=due, count=newest.count + 1, input=data)
        windows = (*current.windows[:-1], window)
        joined = Joined(window.run, False, now, due, window.count, window.enqueued)
        return replace(current, windows=windows), joined
    waiting = sum(1 for w in current.windows if not w.closed)
    if waiting >= MAX_WINDOWS:
        return current, Joined(run, False, now, now, 0, False, refused=True)
    cap = math.inf if max_wait is None else now + max_wait
    window = Window(run, now, now, min(now + wait, cap), cap, 1, data)
    joined = Joined(run, True, now, window.due, 1, False)
    return replace(current, windows=(*current.windows, window)), joined


def enqueued(state: Windows | None, *, run: str) -> tuple[Windows | None, None]:
    """``run``'s queue record is known to exist: later submits need not enqueue it."""
    if state is None:
        return None, None
    windows = tuple(replace(w, enqueued=True) if w.run == run else w for w in state.windows)
    return replace(state, windows=windows), None


def take(state: Windows | None, *, run: str, now: float) -> tuple[Windows | None, WindowAnswer]:
    """``run`` is claimed: wait until its window's due time, or close it and
    take its input."""
    window = None if state is None else state.find(run)
    if state is None or window is None:
        return state, WindowAnswer(found=False)
    if not window.closed and now < window.due:
        return state, WindowAnswer(found=True, until=window.due, window=window)
    closed = replace(window, closed=True, enqueued=True)
    windows = tuple(closed if w.run == run else w for w in state.windows)
    return replace(state, windows=windows), WindowAnswer(
        found=True, input=closed.input, window=closed
    )


def drop(state: Windows | None, *, run: str) -> tuple[Windows | None, None]:
    """``run`` recorded its input: its window goes (the object too, if it was the last)."""
    if state is None:
        return None, None
    windows = tuple(w for w in state.windows if not (w.run == run and w.closed))
    return (replace(state, windows=windows) if windows else None), None


def _without_abandoned(state: Windows, now: float) -> Windows:
    windows = tuple(w for w in state.windows if now < w.due + _kept(w))
    return state if len(windows) == len(state.windows) else replace(state, windows=windows)


def _kept(window: Window) -> float:
    if window.closed:
        return CLOSED_KEPT
    return UNTAKEN_KEPT if window.enqueued else ABANDONED


# -- in the store ----------------------------------------------------------------


def to_fields(state: Windows) -> dict[str, Any]:
    return {
        "job": state.job,
        "key": state.key,
        "windows": [
            [
                w.run,
                w.first,
                w.last,
                w.due,
                None if math.isinf(w.cap) else w.cap,
                w.count,
                w.input,
                w.enqueued,
                w.closed,
            ]
            for w in state.windows
        ],
    }


def from_fields(fields: Any, key: str) -> Windows:
    """The windows stored under ``key``; raises CorruptRecord naming it."""
    try:
        windows = []
        for run, first, last, due, cap, count, data, was_enqueued, closed in fields["windows"]:
            if not isinstance(data, bytes):
                raise TypeError(f"input is {plausible.shown(data)}, not bytes")
            windows.append(
                Window(
                    run=str(run),
                    first=finite_time(first, "first"),
                    last=finite_time(last, "last"),
                    due=finite_time(due, "due"),
                    cap=math.inf if cap is None else finite_time(cap, "cap"),
                    count=plausible.count(count, "count"),
                    input=data,
                    enqueued=bool(was_enqueued),
                    closed=bool(closed),
                )
            )
        return Windows(job=str(fields["job"]), key=str(fields["key"]), windows=tuple(windows))
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise CorruptRecord(f"not a debounce key's windows: {exc!r}", key=key) from exc


def finite_time(value: object, field: str) -> float:
    """``value`` as a time (epoch seconds); ValueError naming ``field`` if it is none."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{field} is {plausible.shown(value)}, not a time")
    return float(value)
