"""A run's timeline, drawn by the server as an SVG (no script, no build
step): its claims, the waits between them, its steps and its children (each
linked to its page) on one time axis.

Every time on it is a date or a duration; every label a job could have
written (a wait's detail, a step's name) is escaped, control characters
made visible first, as everywhere in the view.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass

from markupsafe import Markup

from stepstone.ops.glance import date, memo_label
from stepstone.ops.reads import Detail
from stepstone.ops.timeline import RanStep, took
from stepstone.records.attempts import AttemptResult
from stepstone.runtime.status import JobStatus
from stepstone.telemetry.escaping import escape_controls

WIDTH, LABELS, LANE, TOP = 960, 90, 26, 8
"""The picture's width, its lane names' column, a lane's height, the margin above."""
TICKS = 5

COLOURS = {
    AttemptResult.SUCCEEDED: "#1a7f37",
    AttemptResult.FAILED: "#b42318",
    AttemptResult.DEAD: "#b42318",
    AttemptResult.SUSPENDED: "#8a6100",
}
"""A claim's fill by how it ended (others: the running blue)."""


CHILD_COLOURS = {
    JobStatus.SUCCEEDED: "#1a7f37",
    JobStatus.FAILED: "#b42318",
    JobStatus.DEAD: "#b42318",
    JobStatus.CANCELLED: "#8c959f",
}
"""A child's fill by its state (live ones: the running blue)."""


@dataclass(frozen=True, slots=True)
class Span:
    lane: int
    start: float
    end: float
    colour: str
    title: str
    href: str | None = None


def run_timeline(
    found: Detail, steps: list[RanStep], now: float, link: Callable[[str], str]
) -> Markup | None:
    """The SVG of ``found``'s claims (lane 1), waits (lane 2), steps (lane 3)
    and children (lane 4, each linked to ``link(its id)``, when it has any);
    None when nothing is dated yet."""
    spans: list[Span] = []
    for child in found.child_spans:
        end = child.finished if child.finished is not None else now
        title = (
            f"child {child.id[:12]} ({child.kind}): {child.status.value}, "
            f"from {date(child.submitted)}, {took(end - child.submitted)}"
        )
        colour = CHILD_COLOURS.get(child.status, "#1f5fbf")
        spans.append(Span(3, child.submitted, end, colour, title, link(child.id)))
    history = [a for a in found.history if a.claimed_at is not None]
    for index, attempt in enumerate(history):
        start = float(attempt.claimed_at or 0.0)
        end = attempt.ended_at if attempt.ended_at is not None else start
        colour = COLOURS.get(attempt.result, "#1f5fbf")
        title = f"claim {attempt.claim}: {attempt.result.value}, {date(start)}, {took(end - start)}"
        spans.append(Span(0, start, end, colour, title))
        if attempt.result is AttemptResult.SUSPENDED and attempt.ended_at is not None:
            after = history[index + 1].claimed_at if index + 1 < len(history) else None
            waiting = after if after is not None else _waiting_until(found, now)
            if waiting is not None:
                what, since = attempt.message or "a wait", attempt.ended_at
                title = f"waiting: {what}, from {date(since)}, {took(waiting - since)}"
                spans.append(Span(1, attempt.ended_at, waiting, "#e7c46a", title))
    queued = found.queued
    if queued is not None and queued.status is JobStatus.RUNNING and queued.lease_expires_at:
        start = max([s.end for s in spans if s.lane == 0], default=queued.updated_at)
        spans.append(Span(0, start, now, "#1f5fbf", f"running since {date(start)}"))
    marks = [
        (step.recorded_at, f"{memo_label(step.memo)}, {date(step.recorded_at)}") for step in steps
    ]
    times = [t for s in spans for t in (s.start, s.end)] + [t for t, _ in marks]
    if not times:
        return None
    first, last = min(times), max(times)
    span = max(last - first, 0.001)
    scale = (WIDTH - LABELS - 10) / span

    def x(at: float) -> float:
        return LABELS + (at - first) * scale

    lanes = (
        ("claims", "waits", "steps", "children")
        if found.child_spans
        else ("claims", "waits", "steps")
    )
    height = TOP + len(lanes) * LANE + 30
    parts = [
        f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="the run over time, {text(date(first))} to {text(date(last))}">'
    ]
    for lane, name in enumerate(lanes):
        y = TOP + lane * LANE
        parts.append(f'<text x="0" y="{y + 16}" class="lane">{name}</text>')
        parts.append(
            f'<line x1="{LABELS}" y1="{y + LANE - 2}" x2="{WIDTH - 10}" y2="{y + LANE - 2}" '
            'stroke="#dde2e8"/>'
        )
    children = [s for s in spans if s.lane == 3]
    for s in spans:
        # Children share their lane, each a thinner bar of its own below the last.
        rows = max(1, len(children))
        y = TOP + s.lane * LANE + 4
        h = LANE - 10
        if s.lane == 3:
            h = max(2, (LANE - 8) // rows)
            y = TOP + s.lane * LANE + 3 + children.index(s) * h
        w = max(2.0, (s.end - s.start) * scale)
        rect = (
            f'<rect class="span lane-{s.lane}" x="{x(s.start):.1f}" y="{y}" width="{w:.1f}" '
            f'height="{h}" rx="2" fill="{s.colour}"><title>{text(s.title)}</title></rect>'
        )
        if s.href is not None:
            rect = f'<a class="child" href="{text(s.href)}">{rect}</a>'
        parts.append(rect)
    for at, title in marks:
        y = TOP + 2 * LANE + 12
        parts.append(
            f'<circle class="step" cx="{x(at):.1f}" cy="{y}" r="5" fill="#1d2330">'
            f"<title>{text(title)}</title></circle>"
        )
    axis = TOP + len(lanes) * LANE + 18
    for n in range(TICKS):
        at = first + span * n / (TICKS - 1)
        label = date(at) if n == 0 else f"+{took(at - first)}"
        anchor = "start" if n == 0 else "end" if n == TICKS - 1 else "middle"
        parts.append(
            f'<text x="{x(at):.1f}" y="{axis}" text-anchor="{anchor}" class="tick">'
            f"{text(label)}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))


def _waiting_until(found: Detail, now: float) -> float | None:
    """The end of the wait under way: now, while the run is suspended."""
    queued = found.queued
    if queued is not None and queued.wait is not None:
        return now
    return None


def text(value: str) -> str:
    """``value`` as SVG text: control characters made visible, then escaped."""
    return html.escape(escape_controls(value), quote=True)
