"""How results look: tables and text for people, one JSON document for scripts.

Text is for reading at a terminal: times in UTC, long values cut to a line,
and every control character a job may have put in its text (an escape
sequence in an error message) written as an escape, so it cannot clear the
screen or rewrite a line (:func:`stepstone.telemetry.escaping.escape_controls`).
``--json`` prints everything, uncut, as one indented document (JSON escapes
control characters itself); a value JSON cannot hold (bytes, a datetime)
becomes a string rather than an error.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from stepstone.cli.notices import warn
from stepstone.ops.glance import memo_label, memo_note, memo_place, memo_value, user_first
from stepstone.ops.listing import RunSummary
from stepstone.ops.reads import Detail, Unreadable, decode_value
from stepstone.ops.timeline import current_steps, earlier_steps, took
from stepstone.records.attempts import AttemptInfo, AttemptResult
from stepstone.runtime.fairness import fairness_of
from stepstone.telemetry.escaping import escape_controls


def when(ts: float | None) -> str:
    """A timestamp as ``2026-01-31 12:00:00Z``, or ``-``; what is no time
    (records are checked when decoded: this is the last line) as itself."""
    if ts is None:
        return "-"
    try:
        return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    except (OverflowError, ValueError, OSError, TypeError):
        return f"{ts!r} (not a time)"


def short(value: Any, width: int = 200) -> str:
    """``value`` on one line of at most ``width`` characters, control characters
    escaped, cut with an ellipsis."""
    text = escape_controls(value if isinstance(value, str) else _json(value))
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def age(seconds: float) -> str:
    """How long ago, in one unit: ``12s``, ``5m``, ``3h``, ``4d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{max(0, int(seconds))}s"


LS_WIDTH = 100
"""``stepstone ls``'s rows fit in this many characters."""
ID_CHARS = 12
"""``ls`` shows this much of an id; ``show`` takes it (or any unique prefix)."""
NAME_CHARS = 24
VERSION_CHARS = 12


def print_listing(out: TextIO, rows: Sequence[RunSummary], now: float) -> None:
    """``stepstone ls``'s table: newest first, each row within LS_WIDTH; the
    last error gets the room the other columns leave. A VERSION column
    (``Job.VERSION``) when some run has one, a FAIRNESS column (its fairness
    key) when some run has one."""
    versions = any(row.version is not None for row in rows)
    tenants = any(row.fairness_key is not None for row in rows)
    headers = ["ID", "STATUS", "KIND", *(["VERSION"] if versions else [])]
    headers += [*(["FAIRNESS"] if tenants else []), "TRIES", "AGE"]
    headers.append("LAST ERROR")
    cells = [
        [
            row.id[:ID_CHARS],
            row.status.value,
            short(row.kind, NAME_CHARS),
            *([short(row.version or "-", VERSION_CHARS)] if versions else []),
            *([short(row.fairness_key or "-", VERSION_CHARS)] if tenants else []),
            str(row.attempts),
            age(now - row.submitted),
        ]
        for row in rows
    ]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers[:-1])]
    room = LS_WIDTH - sum(widths) - 2 * len(widths)
    errors = [short((row.last_error or "").partition("\n")[0], room) for row in rows]
    table(out, headers, [[*r, error] for r, error in zip(cells, errors, strict=True)])


def _json(value: Any, **kwargs: Any) -> str:
    def default(obj: object) -> object:
        if isinstance(obj, bytes):
            return f"<{len(obj)} bytes>"
        return str(obj)

    return json.dumps(value, default=default, ensure_ascii=False, **kwargs)


def json_text(value: Any) -> str:
    """``value`` as JSON on one line (a ``bytes`` value as its size)."""
    return _json(value)


def emit_json(value: Any) -> None:
    """Print ``value`` as the command's one JSON document."""
    sys.stdout.write(_json(value, indent=2) + "\n")


def table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    rows = [[escape_controls(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    for row in (headers, *rows):
        cells = [cell.ljust(w) for cell, w in zip(row, widths, strict=True)]
        out.write("  ".join(cells).rstrip() + "\n")


def warn_unreadable(records: Sequence[Unreadable]) -> None:
    """One warning per record that would not decode, naming its key."""
    for record in records:
        warn(_unreadable(record))


def _unreadable(record: Unreadable) -> str:
    return f"cannot read {record.key}: {record.reason}"


def unreadable_json(records: Sequence[Unreadable]) -> list[dict[str, str]]:
    return [{"key": record.key, "reason": record.reason} for record in records]


def listed_json(row: RunSummary) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "status": row.status,
        "attempts": row.attempts,
        "lapses": row.lapses,
        "updated": row.updated,
        "source": row.source,
        "submitted": row.submitted,
        "last_error": row.last_error,
        "version": row.version,
        "key": row.key,
        "attributes": dict(row.attributes),
        "fairness_key": row.fairness_key,
    }


def _debounce_json(found: Detail) -> dict[str, Any] | None:
    shown = found.debounce
    if shown is None:
        return None
    window = shown.window
    return {
        "key": shown.key,
        "object": shown.object_key,
        "unreadable": shown.unreadable,
        "window": None
        if window is None
        else {
            "due": window.due,
            "submits": window.count,
            "first": window.first,
            "last": window.last,
            "closed": window.closed,
        },
    }


def detail_json(found: Detail) -> dict[str, Any]:
    queued = found.queued
    outcome = found.outcome
    return {
        "id": found.id,
        "kind": found.kind,
        "status": found.status or "unknown",
        "version": found.version,
        "key": found.key,
        "attributes": found.attributes,
        "replay_of": found.replay_of,
        "from_step": found.from_step,
        "input": found.input,
        "queue": None
        if queued is None
        else {
            "status": queued.status.value,
            "kind": queued.kind,
            "priority": queued.priority,
            "attempts": found.attempts,
            "max_attempts": queued.max_attempts,
            "lapses": queued.lapses,
            "run_at": queued.run_at,
            "created_at": queued.created_at,
            "updated_at": queued.updated_at,
            "lease_expires_at": queued.lease_expires_at,
            "last_error": queued.last_error,
            "dead_reason": queued.dead_reason,
            "waiting_for": None if queued.wait is None else queued.wait.shown,
            "headers": dict(queued.headers),
            "debounce": _debounce_json(found),
            "fairness_key": fairness_of(queued.headers)[0] or None,
            "fairness_weight": fairness_of(queued.headers)[1],
        },
        "outcome": None
        if outcome is None
        else {
            "status": outcome.status.value,
            "attempts": outcome.attempts,
            "lapses": outcome.lapses,
            "finished_at": outcome.finished_at,
            "result": decode_value(outcome.result),
            "error": None
            if outcome.error is None
            else {
                "reason": outcome.error.reason,
                "message": outcome.error.message,
                "type": outcome.error.error_type,
                "traceback": outcome.error.traceback,
            },
        },
        "progress": found.progress,
        "incarnation": found.incarnation,
        "parent": found.parent,
        "children": found.children,
        "attempts": [attempt_json(attempt) for attempt in found.history],
        "replaced_attempts": [attempt_json(attempt) for attempt in found.replaced_history],
        "steps": [
            {
                "step": step.name,
                "key": step.memo.step_key,
                "position": step.memo.position,
                "claim": step.claim,
                "recorded_at": step.recorded_at,
                "seconds": step.seconds,
            }
            for step in current_steps(found)
        ],
        "memos": [
            {
                "step": memo.step,
                "key": memo.step_key,
                "position": memo.position,
                "call": None if memo.call is None else memo.call.call,
                "incarnation": memo.incarnation,
                "current": memo.incarnation == found.incarnation,
                "size": memo.size,
                "recorded_at": memo.modified,
                "value": memo.value,
                "unreadable": memo.unreadable,
            }
            for memo in found.memos
        ],
        "unreadable": unreadable_json(found.unreadable_records()),
    }


def attempt_json(attempt: AttemptInfo) -> dict[str, Any]:
    return {
        "claim": attempt.claim,
        "attempt": attempt.number,
        "result": attempt.result.value,
        "claimed_at": attempt.claimed_at,
        "ended_at": attempt.ended_at,
        "seconds": attempt.seconds,
        "worker": attempt.worker,
        "host": attempt.host,
        "pid": attempt.pid,
        "error_type": attempt.error_type,
        "message": attempt.message,
        "traceback": attempt.traceback,
    }


def _traceback(out: TextIO, text: str, indent: str = "  ") -> None:
    """A failed attempt's traceback, indented under its error, line by line:
    the job's frames, stepstone's folded (:func:`stepstone.ops.glance.user_first`)."""
    folded = user_first(text)
    out.write(f"{indent}traceback:\n")
    if folded.count:
        out.write(f"{indent}  ({folded.count} frame(s) of stepstone above these: show --json)\n")
    for text_line in folded.shown.splitlines():
        out.write(f"{indent}  {escape_controls(text_line)}\n")


def print_detail(out: TextIO, found: Detail) -> None:
    def line(label: str, value: object, indent: str = "  ") -> None:
        out.write(f"{indent}{label:<12} {escape_controls(str(value))}\n")

    out.write(f"run {found.id}\n")
    line("status", found.status or "unknown")
    line("kind", found.kind or "-")
    if found.version is not None:
        line("version", found.version)
    if found.key is not None:
        line("key", short(found.key))
    if found.attributes:
        line(
            "attributes", short(", ".join(f"{n}={v}" for n, v in sorted(found.attributes.items())))
        )
    if found.replay_of is not None:
        start = "the start" if found.from_step is None else f"step {found.from_step!r}"
        line("replay of", short(f"incarnation {found.replay_of}, from {start}"))
    if found.parent is not None:
        line("parent", found.parent)
    if found.children:
        shown = ", ".join(child[:12] for child in found.children[:5])
        more = f", ... ({len(found.children)})" if len(found.children) > 5 else ""
        line("children", f"{shown}{more}; a cancel takes the live ones it created with it")
    if found.input is not None:
        line("input", short(found.input))
    elif found.outcome is not None and found.outcome.input_size:
        line("input", f"not kept: {found.outcome.input_size} bytes, over what an outcome keeps")
    unreadable = found.unreadable
    if "progress" in unreadable:
        line("progress", _unreadable(unreadable["progress"]))
    else:
        line("progress", "-" if found.progress is None else short(found.progress))
    queued = found.queued
    if "queue" in unreadable:
        out.write(f"queue: {escape_controls(_unreadable(unreadable['queue']))}\n")
    elif queued is None:
        out.write("queue: no record (finished, cancelled, or never enqueued)\n")
    else:
        out.write("queue:\n")
        line("status", queued.status.value)
        line("attempts", f"{found.attempts} of {queued.max_attempts}")
        if queued.lapses:
            line("lapses", _lapses(queued.lapses))
        line("priority", queued.priority)
        fairness_key, weight = fairness_of(queued.headers)
        if fairness_key:
            line("fairness key", fairness_key + ("" if weight == 1 else f" (weight {weight})"))
        if queued.wait is not None:
            line("waiting for", short(queued.wait.shown) or "-")
            line("wakes at", when(queued.run_at))
        else:
            line("run at", when(queued.run_at))
        if found.debounce is not None:
            if found.debounce.key is not None:
                line("debounce key", short(found.debounce.key))
            line("debounced", found.debounce.describe(time.time()))
        line("created", when(queued.created_at))
        line("updated", when(queued.updated_at))
        if queued.lease_expires_at is not None:
            line("lease until", when(queued.lease_expires_at))
        if queued.last_error:
            # A failed attempt's traceback follows its message on later lines.
            message, _, trace = queued.last_error.partition("\n")
            line("last error", short(message))
            if trace and (found.outcome is None or found.outcome.error is None):
                _traceback(out, trace)
        if queued.dead_reason:
            line("dead reason", short(queued.dead_reason))
        if queued.headers:
            line("headers", short(dict(queued.headers)))
    outcome = found.outcome
    if "outcome" in unreadable:
        out.write(f"outcome: {escape_controls(_unreadable(unreadable['outcome']))}\n")
    elif outcome is None:
        out.write("outcome: none yet\n")
    else:
        out.write("outcome:\n")
        line("status", outcome.status.value)
        line("attempts", outcome.attempts)
        if outcome.lapses:
            line("lapses", _lapses(outcome.lapses))
        line("finished", when(outcome.finished_at))
        if outcome.error is not None:
            line("error", f"{outcome.error.reason}: {short(outcome.error.message)}")
            if outcome.error.error_type:
                line("error type", outcome.error.error_type)
            if outcome.error.traceback:
                _traceback(out, outcome.error.traceback)
        if outcome.result is not None:
            line("result", short(decode_value(outcome.result)))
    print_attempts(out, found)
    if found.replay_of is not None and found.replaced_history:
        print_attempts(
            out, found, found.replaced_history, f"of the replaced incarnation {found.replay_of}"
        )
    _print_steps(out, found)


def _lapses(n: int) -> str:
    return f"{n} lease(s) lost to workers that died or hung (no attempt spent)"


def print_attempts(
    out: TextIO, found: Detail, history: list[AttemptInfo] | None = None, of: str = ""
) -> None:
    """Each claim of the run (or of ``history``, ``of`` saying whose): when,
    how long, how it ended, by which worker, and its error; the traceback of
    the last failed claim the outcome above does not show (the others' are
    in ``--json``)."""
    history = found.history if history is None else history
    title = f"attempts {escape_controls(of)}".rstrip()
    if not history:
        out.write(f"{title}: none recorded yet\n")
        return
    out.write(f"{title} ({len(history)}, by claim):\n")
    shown_above = found.outcome.claims if found.outcome is not None and not of else None
    traced = [a for a in history if a.traceback and a.claim != shown_above]
    for attempt in history:
        claim = "?" if attempt.claim is None else str(attempt.claim)
        number = "-" if attempt.number is None else str(attempt.number)
        worker = "" if attempt.worker is None else f"  {attempt.worker} on {attempt.host}"
        worker += "" if attempt.pid is None else f" (pid {attempt.pid})"
        out.write(
            escape_controls(
                f"  {claim:>3}  attempt {number:<3} {attempt.result.value:<10} "
                f"{when(attempt.claimed_at)}  {took(attempt.seconds):>8}{worker}"
            )
            + "\n"
        )
        if attempt.message and attempt.result is AttemptResult.SUSPENDED:
            out.write(f"       waiting: {short(attempt.message)}\n")
        elif attempt.message:
            out.write(f"       {short(attempt.message)}\n")
        if traced and attempt is traced[-1]:
            _traceback(out, attempt.traceback or "", indent="       ")
        elif attempt in traced:
            out.write("       (its traceback: stepstone show --json)\n")


def _print_steps(out: TextIO, found: Detail) -> None:
    """The steps of the run in the order they ran, with the time each took;
    memos left by an earlier run of the key after them."""
    steps = current_steps(found)
    if steps:
        incarnation = escape_controls(found.incarnation or "")
        out.write(f"steps ({len(steps)}, in the order they ran; incarnation {incarnation}):\n")
        rows, notes = [], []
        for step in steps:
            memo = step.memo
            value = short(memo_value(memo), 80)
            if memo.unreadable is not None:
                value = f"<cannot read {memo.key}: {memo.unreadable}>"
            claim = "-" if step.claim is None else str(step.claim)
            place = memo_place(memo)
            rows.append([place, memo_label(memo), claim, took(step.seconds), value])
            note = memo_note(memo)
            if note is not None:
                notes.append(f"  {place} {memo_label(memo)}: {note}")
        table(out, ["  #", "STEP", "CLAIM", "TOOK", "VALUE"], [["  " + r[0], *r[1:]] for r in rows])
        for note in notes:
            out.write(escape_controls(note) + "\n")
    else:
        out.write("steps: none recorded\n")
    for incarnation, memos in earlier_steps(found).items():
        out.write(
            f"memos of an earlier run ({len(memos)}, incarnation {escape_controls(incarnation)}):\n"
        )
        for memo in memos:
            out.write(f"  {escape_controls(memo_label(memo))}  {short(memo_value(memo), 80)}\n")
