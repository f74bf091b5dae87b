"""The schedules as their markers and the application tell them: the
schedules page.

A schedule is known from its marker, ``schedules/<name>``
(:mod:`stepstone.records.schedule_marker`: its last tick, how it ticks, its
missed-tick policy, its next tick, the run the tick submitted), and, when
the view runs the application's runner (``--app``), from its definition,
which says how it ticks now. What one refresh reads is bounded: one listing
page of markers (``MAX_SCHEDULES``), a GET of each (none larger than a
marker can be), and for each last run its outcome record, and its queue
record when it has no outcome.

A schedule whose next tick is more than ``OVERDUE_AFTER`` past is overdue:
no process carrying it has submitted that tick (none runs, or they cannot
reach the store). A paused schedule is never overdue: its ticks are
skipped, and its row says who paused it, when and why; every row says
which tick was skipped last and why (paused, missed while no worker ran,
its overlap policy), and how many ticks wait behind its live run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stepstone.ops.reads import Inspected, Unreadable, bounded, read_outcome, read_queued
from stepstone.records.layout import step_name
from stepstone.records.schedule_marker import (
    MAX_MARKER_BYTES,
    Marker,
    decode_marker,
    tick_run_id,
)
from stepstone.schedules import SCHEDULE_CLOCK_SKEW, Schedule, describe
from stepstone.store import NotFound

MAX_SCHEDULES = 1000
"""Markers one read lists at most (one listing page)."""
OVERDUE_AFTER = 60.0 + SCHEDULE_CLOCK_SKEW
"""Seconds past its next tick after which a schedule is shown overdue."""


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """One schedule as the page shows it."""

    name: str
    spec: str | None
    """How it ticks (None: its marker predates saying so, and the view has no app)."""
    missed: str | None
    overlap: str | None
    """Its overlap policy (None: its marker predates saying so, and the view has no app)."""
    last_tick: float | None
    """The last tick submitted or skipped (None: none yet)."""
    since: float | None
    """Where its processes started it, while no tick has come (its first marker)."""
    last_run: str | None
    """The run the schedule started last (the run the last tick submitted,
    for a marker from before markers said)."""
    run_state: str | None
    """That run's state now (None: no record of it, swept or never made)."""
    next_tick: float | None
    overdue: bool
    in_app: bool
    """The view's application carries it (else it is known from its marker only)."""
    paused: bool = False
    paused_at: float | None = None
    paused_by: str | None = None
    note: str | None = None
    """What the operator who paused it said."""
    skipped_tick: float | None = None
    """The last tick skipped (not run), and why (``skipped_why``)."""
    skipped_why: str | None = None
    buffered: int = 0
    """Ticks waiting for the live run to end (``buffer_one``, ``buffer_all``)."""


@dataclass(frozen=True, slots=True)
class ScheduleList:
    rows: list[ScheduleRow]
    unreadable: list[Unreadable]
    more: bool


async def read_schedules(runner: Inspected, schedules: Sequence[Schedule]) -> ScheduleList:
    """Each schedule the store has a marker of or ``schedules`` defines, by name."""
    now = runner.clock.now()
    listed = await runner.store.list(runner.layout.schedules(), limit=MAX_SCHEDULES + 1)
    more = len(listed) > MAX_SCHEDULES

    async def one(key: str) -> tuple[str, Marker | str | None]:
        try:
            stored = await runner.store.get(key)
        except NotFound:
            return key, None
        try:
            return key, decode_marker(stored.data, now=now)
        except Exception as exc:  # what the decoder says of anything that is no marker
            return key, f"its marker cannot be used ({exc})"

    markers: dict[str, Marker] = {}
    unreadable = [
        Unreadable(info.key, f"{info.size} bytes is too large for a schedule marker")
        for info in listed[:MAX_SCHEDULES]
        if info.size > MAX_MARKER_BYTES
    ]
    sized = [info for info in listed[:MAX_SCHEDULES] if info.size <= MAX_MARKER_BYTES]
    for key, found in await bounded(one(info.key) for info in sized):
        if isinstance(found, str):
            unreadable.append(Unreadable(key, found))
        elif found is not None:
            markers[key] = found
    defined = {runner.layout.schedule(schedule.name): schedule for schedule in schedules}
    keys = sorted(set(markers) | set(defined))
    rows = await bounded(_row(runner, key, markers.get(key), defined.get(key), now) for key in keys)
    return ScheduleList(sorted(rows, key=lambda row: row.name), unreadable, more)


async def _row(
    runner: Inspected, key: str, marker: Marker | None, schedule: Schedule | None, now: float
) -> ScheduleRow:
    name = schedule.name if schedule is not None else marker.name if marker else None
    if name is None:  # a marker from before markers named their schedule: its key does
        name = step_name(key.rsplit("/", 1)[-1])
    last = None if marker is None or marker.first else marker.tick
    run = None if marker is None or marker.first else _last_run(marker, name)
    if schedule is not None:
        after = now if marker is None else marker.tick
        next_tick: float | None = next(schedule.ticks_after(after)).timestamp()
    else:
        next_tick = None if marker is None else marker.next_tick
    return ScheduleRow(
        name=name,
        spec=describe(schedule) if schedule is not None else marker.spec if marker else None,
        missed=schedule.missed if schedule is not None else marker.missed if marker else None,
        overlap=schedule.overlap if schedule is not None else marker.overlap if marker else None,
        last_tick=last,
        since=marker.tick if marker is not None and marker.first else None,
        last_run=run,
        run_state=None if run is None else await _state(runner, run),
        next_tick=next_tick,
        overdue=(
            marker is not None
            and not marker.paused
            and next_tick is not None
            and next_tick < now - OVERDUE_AFTER
        ),
        in_app=schedule is not None,
        paused=marker is not None and marker.paused,
        paused_at=None if marker is None else marker.paused_at,
        paused_by=None if marker is None else marker.paused_by,
        note=None if marker is None else marker.note,
        skipped_tick=None if marker is None else marker.skipped_tick,
        skipped_why=None if marker is None else marker.skipped_why,
        buffered=0 if marker is None else len(marker.buffered),
    )


def _last_run(marker: Marker | None, name: str) -> str | None:
    """The run the marker's tick submitted: as it says; for a marker from
    before markers said, the tick's run id (the page shows whether it exists)."""
    if marker is None:
        return None
    if marker.latest is not None:
        return marker.latest
    if marker.name is None:
        return tick_run_id(name, marker.tick)
    return marker.run


async def _state(runner: Inspected, run_id: str) -> str | None:
    outcome = await read_outcome(runner, run_id)
    if isinstance(outcome, Unreadable):
        return "unreadable"
    if outcome is not None:
        return outcome.status.value
    queued = await read_queued(runner, run_id)
    if isinstance(queued, Unreadable):
        return "unreadable"
    return None if queued is None else queued.status.value
