"""Runs finished over time as bar charts, drawn by the server as SVG (no
script, no build step): a bar a minute or an hour, stacked by how the runs
ended, its counts in its title. Every label is escaped as in
:mod:`stepstone.ui.draw`; times are dates, never epoch numbers.
"""

from __future__ import annotations

from markupsafe import Markup

from stepstone.ops.glance import date
from stepstone.ops.throughput import FINISHED, Bucket
from stepstone.ui.draw import text

WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 960, 170, 48, 22, 8
"""The picture's size, the count axis's column, the time axis's row, the margin above."""

COLOURS = {"succeeded": "#1a7f37", "failed": "#b42318", "cancelled": "#8c959f"}
UNREAD = "#c9d6e8"
"""Runs whose outcome is not read yet."""


def bars(buckets: list[Bucket], name: str) -> Markup:
    """The chart of ``buckets`` (oldest first), called ``name`` for readers
    of the page who cannot see it."""
    most = max((bucket.finished for bucket in buckets), default=0)
    top = max(1, most)
    inner_w, inner_h = WIDTH - LEFT - 4, HEIGHT - TOP - BOTTOM
    slot = inner_w / max(1, len(buckets))
    parts = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{text(name)}">'
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = TOP + inner_h * (1 - fraction)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - 4}" y2="{y:.1f}" stroke="#dde2e8"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{top * fraction:g}</text>"
        )
    for n, bucket in enumerate(buckets):
        x = LEFT + n * slot + 1
        y = TOP + inner_h
        layers = [(COLOURS[s], bucket.by_status.get(s, 0), s) for s in FINISHED]
        layers.append((UNREAD, bucket.unread, "not read yet"))
        title = ", ".join(f"{count} {what}" for _, count, what in layers if count) or "none"
        end = bucket.start + bucket.width
        parts.append(
            f'<g class="bar" data-finished="{bucket.finished}" '
            f'data-failed="{bucket.by_status.get("failed", 0)}">'
            f"<title>{text(f'{date(bucket.start)} to {date(end)}: {title}')}</title>"
            f'<rect x="{x:.1f}" y="{TOP}" width="{max(1.0, slot - 2):.1f}" height="{inner_h}" '
            'fill="transparent"/>'
        )
        for colour, count, _ in layers:
            if not count:
                continue
            h = inner_h * count / top
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(1.0, slot - 2):.1f}" '
                f'height="{h:.1f}" fill="{colour}"/>'
            )
        parts.append("</g>")
    if buckets:
        first, last = buckets[0].start, buckets[-1].start + buckets[-1].width
        axis = HEIGHT - 6
        parts.append(
            f'<text x="{LEFT}" y="{axis}" class="tick">{text(date(first))}</text>'
            f'<text x="{WIDTH - 4}" y="{axis}" text-anchor="end" class="tick">'
            f"{text(date(last))}</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
