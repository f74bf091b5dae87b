"""How results look: tables and text for people, one JSON document for scripts.

Text is for reading at a terminal: times in UTC, long values cut to a line.
``--json`` prints everything, uncut, as one indented document; a value JSON
cannot hold (bytes, a datetime) becomes a string rather than an error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from ..inspection import Detail, Listed, decode_value


def when(ts: float | None) -> str:
    """A timestamp as ``2026-01-31 12:00:00Z``, or ``-``."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def short(value: Any, width: int = 200) -> str:
    """``value`` on one line of at most ``width`` characters."""
    text = value if isinstance(value, str) else _json(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def _json(value: Any, **kwargs: Any) -> str:
    def default(obj: object) -> object:
        if isinstance(obj, bytes):
            return f"<{len(obj)} bytes>"
        return str(obj)

    return json.dumps(value, default=default, ensure_ascii=False, **kwargs)


def emit_json(value: Any) -> None:
    """Print ``value`` as the command's one JSON document."""
    sys.stdout.write(_json(value, indent=2) + "\n")


def table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in (headers, *rows):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        out.write("  ".join(cells).rstrip() + "\n")


def listed_json(row: Listed) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "state": row.state,
        "attempts": row.attempts,
        "updated": row.updated,
        "source": row.source,
        "last_error": row.last_error,
    }


def detail_json(found: Detail) -> dict[str, Any]:
    queued = found.queued
    outcome = found.outcome
    return {
        "id": found.id,
        "name": found.name,
        "state": found.state or "unknown",
        "input": found.input,
        "queue": None
        if queued is None
        else {
            "status": queued.status.value,
            "kind": queued.kind,
            "priority": queued.priority,
            "attempts": queued.attempts,
            "max_attempts": queued.max_attempts,
            "run_at": queued.run_at,
            "created_at": queued.created_at,
            "updated_at": queued.updated_at,
            "lease_expires_at": queued.lease_expires_at,
            "last_error": queued.last_error,
            "dead_reason": queued.dead_reason,
            "waiting_for": None if queued.wait is None else queued.wait.detail,
            "headers": dict(queued.headers),
        },
        "outcome": None
        if outcome is None
        else {
            "status": outcome.status.value,
            "attempts": outcome.attempts,
            "finished_at": outcome.finished_at,
            "result": decode_value(outcome.result),
            "error": None
            if outcome.error is None
            else {
                "kind": outcome.error.kind,
                "message": outcome.error.message,
                "type": outcome.error.error_type,
            },
        },
        "progress": found.progress,
        "incarnation": found.incarnation,
        "memos": [
            {
                "step": memo.step,
                "key": memo.step_key,
                "incarnation": memo.incarnation,
                "current": memo.incarnation == found.incarnation,
                "size": memo.size,
                "recorded_at": memo.modified,
                "value": memo.value,
            }
            for memo in found.memos
        ],
    }


def print_detail(out: TextIO, found: Detail) -> None:
    def line(label: str, value: object, indent: str = "  ") -> None:
        out.write(f"{indent}{label:<12} {value}\n")

    out.write(f"job {found.id}\n")
    line("state", found.state or "unknown")
    line("name", found.name or "-")
    if found.input is not None:
        line("input", short(found.input))
    line("progress", "-" if found.progress is None else short(found.progress))
    queued = found.queued
    if queued is None:
        out.write("queue: no record (finished, cancelled, or never enqueued)\n")
    else:
        out.write("queue:\n")
        line("status", queued.status.value)
        line("attempts", f"{queued.attempts} of {queued.max_attempts}")
        line("priority", queued.priority)
        if queued.wait is not None:
            line("waiting for", short(queued.wait.detail) or "-")
            line("wakes at", when(queued.run_at))
        else:
            line("run at", when(queued.run_at))
        line("created", when(queued.created_at))
        line("updated", when(queued.updated_at))
        if queued.lease_expires_at is not None:
            line("lease until", when(queued.lease_expires_at))
        if queued.last_error:
            line("last error", short(queued.last_error))
        if queued.dead_reason:
            line("dead reason", short(queued.dead_reason))
        if queued.headers:
            line("headers", short(dict(queued.headers)))
    outcome = found.outcome
    if outcome is None:
        out.write("outcome: none yet\n")
    else:
        out.write("outcome:\n")
        line("status", outcome.status.value)
        line("attempts", outcome.attempts)
        line("finished", when(outcome.finished_at))
        if outcome.error is not None:
            line("error", f"{outcome.error.kind}: {short(outcome.error.message)}")
            if outcome.error.error_type:
                line("error type", outcome.error.error_type)
        if outcome.result is not None:
            line("result", short(decode_value(outcome.result)))
    if not found.memos:
        out.write("memos: none\n")
        return
    by_incarnation: dict[str, list[Any]] = {}
    for memo in found.memos:
        by_incarnation.setdefault(memo.incarnation, []).append(memo)
    for incarnation, memos in by_incarnation.items():
        which = "current" if incarnation == found.incarnation else "an earlier run"
        out.write(f"memos ({len(memos)}, incarnation {incarnation}, {which}):\n")
        width = max(len(m.step) for m in memos)
        for memo in memos:
            value = "<undecodable>" if memo.undecodable else short(memo.value, 120)
            out.write(f"  {memo.step:<{width}}  {value}\n")
