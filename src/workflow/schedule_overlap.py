"""What a schedule does with the ticks due at one look: its overlap policy.

A schedule's ``overlap=`` says what a tick does while the run the schedule
started last is still live (not ended: running, waiting, retrying), with
Temporal's ScheduleOverlapPolicy's names and meanings:

- ``"allow_all"`` (the default): every tick starts its run, whatever is live.
- ``"skip"``: a tick while the last run is live is skipped (not run).
- ``"buffer_one"``: at most one tick waits behind the live run and starts as
  soon as it ends; a tick while one waits already is skipped.
- ``"buffer_all"``: every tick waits, in order, each starting when the run
  before it ends (at most :data:`MAX_BUFFERED` wait; those after are skipped).
- ``"cancel_other"``: the live run is cancelled and the tick's run starts.
  Of several ticks due at one look (a catch-up) only the newest starts: the
  others are skipped, superseded, rather than started only to be cancelled.

Temporal's ``TERMINATE_OTHER`` is not offered apart: a cancel here records
the run's outcome at once and stops its attempt within ``cancel_check``,
which is what terminating means there.

:func:`decide` is the rule, with no store and no clock: the scheduler
(:mod:`stepstone.schedules`) reads the marker, asks whether its last run is
live, calls it, and writes what it says into the marker before it starts
anything, so every process decides each tick once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from stepstone.records.schedule_marker import MAX_BUFFERED

Overlap = Literal["skip", "buffer_one", "buffer_all", "cancel_other", "allow_all"]

__all__ = ["MAX_BUFFERED", "Decision", "Overlap", "decide"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What one look does: the ticks it starts (oldest first), whether it
    cancels the live run first, the ticks left waiting, and those skipped
    with why (oldest first)."""

    start: list[float] = field(default_factory=list)
    cancel_live: bool = False
    buffered: list[float] = field(default_factory=list)
    skipped: list[tuple[float, str]] = field(default_factory=list)


def decide(
    overlap: Overlap,
    *,
    live: bool,
    buffered: Sequence[float],
    due: Sequence[float],
    shown: dict[float, str] | None = None,
) -> Decision:
    """The decision for the ticks ``due`` (oldest first, each newer than
    every one ``buffered``), given whether the last run started is ``live``
    and the ticks waiting behind it. ``shown`` names ticks for the reasons
    (their times for people); a tick not in it is named by its number."""
    names = shown or {}

    def named(tick: float) -> str:
        return names.get(tick, f"{tick:.6f}")

    if overlap == "allow_all":
        return Decision(start=[*buffered, *due])
    waiting = list(buffered)
    start: float | None = None
    skipped: list[tuple[float, str]] = []
    if not live and waiting:
        start = waiting.pop(0)
        live = True
    cancel_live = False
    for tick in due:
        if not live:
            start, live = tick, True
            continue
        running = "the run started last" if start is None else f"the run of {named(start)}"
        if overlap == "skip":
            skipped.append((tick, f"overlap skip: {running} was still live"))
        elif overlap == "buffer_one":
            if waiting:
                why = f"overlap buffer_one: {running} was still live and {named(waiting[0])} waits"
                skipped.append((tick, why))
            else:
                waiting.append(tick)
        elif overlap == "buffer_all":
            if len(waiting) < MAX_BUFFERED:
                waiting.append(tick)
            else:
                skipped.append((tick, f"overlap buffer_all: {MAX_BUFFERED} ticks wait already"))
        else:  # cancel_other
            if start is None:
                cancel_live = True
            else:
                skipped.append((start, f"overlap cancel_other: superseded by {named(tick)}"))
            start = tick
    return Decision(
        start=[] if start is None else [start],
        cancel_live=cancel_live,
        buffered=waiting,
        skipped=sorted(skipped),
    )
