"""The schedules page's actions: pause a schedule (with a note saying why),
resume it. As every action of the view (:mod:`stepstone.ui.acting`): an
operator's only, confirmed by a page that changes nothing, done by the
confirmed form's POST with the session's CSRF token, recorded in the audit
log (:mod:`stepstone.ops.schedule_actions`, what ``stepstone schedules
pause|resume`` use), and redirected back to the schedules page with a line
saying what was done.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepstone.errors import InspectError, JobError
from stepstone.ops import schedule_actions
from stepstone.records.audit import Actor
from stepstone.runner import JobRunner
from stepstone.runtime.errors import QueueError
from stepstone.store import StoreError

VERBS = ("pause", "resume")
NOTE_CHARS = 500
"""The longest note a pause takes (the marker keeps no more)."""


@dataclass(frozen=True, slots=True)
class SchedulePlan:
    """A schedule's action as its confirmation shows it and its POST does it."""

    verb: str
    question: str
    button: str
    fields: dict[str, str]
    back: str


async def plan(runner: JobRunner, verb: str, fields: dict[str, str], back: str) -> SchedulePlan:
    """What ``verb`` will do to the schedule ``fields`` names; InspectError when it cannot."""
    if verb not in VERBS:
        raise InspectError(f"no action {verb!r} on a schedule (one of: {', '.join(VERBS)})")
    name = fields.get("schedule", "")
    marker = await runner.scheduler.marker(name)
    known = marker is not None or any(s.name == name for s in runner.scheduler.schedules)
    if not known:
        raise InspectError(f"no schedule {name!r} in this store")
    paused = marker is not None and marker.paused
    if verb == "resume":
        if not paused:
            raise InspectError(f"schedule {name!r} is not paused")
        question = (
            f"Resume schedule {name!r}? Its next tick runs, in every worker carrying it; "
            "the ticks that came while it was paused do not."
        )
        return SchedulePlan(verb, question, "Resume this schedule", {"schedule": name}, back)
    note = fields.get("note", "").strip()
    if len(note) > NOTE_CHARS:
        raise InspectError(f"the note is over {NOTE_CHARS} characters")
    if not note.isprintable():
        raise InspectError("the note must be printable text on one line")
    said = f" with the note {note!r}" if note else ""
    question = (
        f"Pause schedule {name!r}{said}? Every worker carrying it skips its ticks until it "
        "is resumed, and those ticks are not caught up."
    )
    if paused:
        question += " (It is paused already: the note and who paused it are replaced.)"
    fields = {"schedule": name, "note": note}
    return SchedulePlan(verb, question, "Pause this schedule", fields, back)


async def do(runner: JobRunner, confirmed: SchedulePlan, actor: Actor) -> list[str]:
    """The confirmed action, recorded as ``actor``'s: the lines to show."""
    name = confirmed.fields["schedule"]
    try:
        if confirmed.verb == "pause":
            note = confirmed.fields.get("note") or None
            return [await schedule_actions.pause(runner, runner.scheduler, actor, name, note)]
        return [await schedule_actions.resume(runner, runner.scheduler, actor, name)]
    except (JobError, StoreError, QueueError) as exc:
        return [f"nothing was done: {exc}"]
