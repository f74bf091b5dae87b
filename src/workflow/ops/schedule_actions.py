"""Operators' actions on a schedule: pause, resume, backfill, recorded.

``stepstone schedules pause|resume|backfill`` and the schedules page's
buttons act through these: each runs through :func:`stepstone.ops.audited.audited`
(its audit record names the schedule in ``detail``; a backfill's lists the
runs it submitted), and returns the line to show. The actions themselves
are the scheduler's (:class:`stepstone.schedules.Scheduler`): a pause is
kept in the schedule's marker, so every process carrying it obeys.
"""

from __future__ import annotations

from datetime import datetime

from stepstone.ops.audited import Said, audited
from stepstone.records.audit import Actor
from stepstone.records.retention import Runs
from stepstone.schedules import Backfilled, Scheduler

SHOWN_TICKS = 5
"""Ticks a backfill's line names (the audit record lists every run)."""


async def pause(
    runs: Runs, scheduler: Scheduler, actor: Actor, name: str, note: str | None = None
) -> str:
    """Pause schedule ``name`` as ``actor``, with ``note`` saying why."""
    paused = f"paused schedule {name!r}: its ticks are skipped until it is resumed"
    again = f"schedule {name!r} was paused already; the note and who paused it are replaced"

    def said(done: bool) -> Said:
        return Said("done", paused if done else again)

    detail = {"schedule": name} | ({"note": note} if note else {})
    done = await audited(
        runs,
        actor,
        "pause",
        [],
        lambda: scheduler.pause(name, note=note, by=actor.name),
        said,
        detail=detail,
    )
    return said(done).result


async def resume(runs: Runs, scheduler: Scheduler, actor: Actor, name: str) -> str:
    """Resume schedule ``name`` as ``actor``: its next tick runs, not those of the pause."""
    resumed = f"resumed schedule {name!r}: its next tick runs (the ticks of the pause do not)"
    running = f"schedule {name!r} was not paused"

    def said(done: bool) -> Said:
        return Said("done", resumed) if done else Said("refused", running)

    done = await audited(
        runs,
        actor,
        "resume",
        [],
        lambda: scheduler.resume(name),
        said,
        detail={"schedule": name},
    )
    return said(done).result


async def backfill(
    runs: Runs, scheduler: Scheduler, actor: Actor, name: str, start: datetime, end: datetime
) -> Backfilled:
    """Backfill schedule ``name`` from ``start`` to ``end`` as ``actor``."""

    def said(done: Backfilled) -> Said:
        return Said(
            "done",
            backfilled_line(name, done),
            runs=[run_id for _, run_id in done.submitted],
        )

    return await audited(
        runs,
        actor,
        "backfill",
        [],
        lambda: scheduler.backfill(name, start, end),
        said,
        detail={"schedule": name, "from": start.isoformat(), "to": end.isoformat()},
    )


def backfilled_line(name: str, done: Backfilled) -> str:
    """What a backfill did, in a line."""
    shown = ", ".join(tick.isoformat() for tick, _ in done.submitted[:SHOWN_TICKS])
    more = len(done.submitted) - SHOWN_TICKS
    ticks = f" ({shown}{f' and {more} more' if more > 0 else ''})" if done.submitted else ""
    return (
        f"backfilled schedule {name!r}: submitted {len(done.submitted)} tick(s){ticks}; "
        f"{len(done.existing)} had their run already"
    )
