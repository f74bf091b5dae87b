"""What the pages show, made from what :mod:`stepstone.inspection` reads.

Plain data and formatting, no HTML: the templates lay these out, and
Jinja2's autoescaping (with control characters made visible first, see
:mod:`stepstone.ui.app`) makes every string safe to put in a page. Job-provided
values (inputs, results, memos, progress, error messages) are shown as
indented JSON, cut at ``VALUE_CHARS``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from stepstone.runtime.queue import JobStatus

from ..inspection import Detail, Listed, Memo, decode_value

VALUE_CHARS = 4000
"""A value longer than this as JSON is cut (``stepstone show --json`` has it whole)."""

SINCE = {"15m": 900.0, "1h": 3600.0, "24h": 86400.0, "7d": 604800.0}
"""The runs list's time filter: runs updated within this long."""


def when(ts: float | None) -> str:
    """A timestamp as ``2026-01-31 12:00:00Z``, or ``-``."""
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def took(seconds: float | None) -> str:
    """A duration for people: ``350 ms``, ``4.2 s``, ``3m 05s``, ``2h 10m``."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def ago(ts: float | None, now: float) -> str:
    """How long before ``now``: ``12 s ago``, ``in 3m 00s`` for a time to come."""
    if ts is None:
        return ""
    delta = now - ts
    return f"{took(delta)} ago" if delta >= 0 else f"in {took(-delta)}"


def pretty(value: Any) -> str:
    """A stored value as indented JSON (a string as itself), cut at VALUE_CHARS."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, indent=2, ensure_ascii=False, default=_jsonable)
    if len(text) > VALUE_CHARS:
        return f"{text[:VALUE_CHARS]}\n... ({len(text) - VALUE_CHARS} more characters)"
    return text


def _jsonable(obj: object) -> object:
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    return str(obj)


# -- the runs list ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filters:
    """The runs list's filters, as the query string gives them."""

    state: str = ""
    kind: str = ""
    since: str = ""

    @property
    def status(self) -> JobStatus | None:
        return JobStatus(self.state) if self.state else None

    def keep(self, row: Listed, now: float) -> bool:
        if self.kind and row.name != self.kind:
            return False
        return not self.since or row.updated >= now - SINCE[self.since]


def newest_first(rows: list[Listed]) -> list[Listed]:
    return sorted(rows, key=lambda row: row.updated, reverse=True)


# -- one run -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Step:
    """A recorded step, in the order the steps were recorded."""

    name: str
    recorded_at: float
    seconds: float | None
    """Since the previous record of the run (the attempt's start for the
    first): the step's own time and the job's code before it."""
    value: str
    unreadable: str | None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt, as far as the stored records tell."""

    number: int
    started_at: float | None
    ended_at: float | None
    ended: str
    """How it ended: ``succeeded``, ``failed, retrying``, ``running``, ..."""
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None


@dataclass(slots=True)
class Run:
    """Everything the run page shows."""

    detail: Detail
    steps: list[Step]
    leftovers: dict[str, list[Step]]
    """Memos of earlier incarnations (a run of the same key before a retry
    of the whole run, or a swept one), by incarnation."""
    attempts: list[Attempt]
    earlier_attempts: int
    """Attempts before those listed, of which the records keep nothing."""
    result: str | None = None
    events: list[tuple[float, str]] = field(default_factory=list)


def run_view(found: Detail) -> Run:
    outcome = found.outcome
    started = outcome.started_at if outcome is not None else None
    by_incarnation: dict[str, list[Memo]] = {}
    for memo in found.memos:
        by_incarnation.setdefault(memo.incarnation, []).append(memo)
    current = by_incarnation.pop(found.incarnation or "", [])
    attempts = _attempts(found)
    listed = min((a.number for a in attempts), default=1)
    return Run(
        detail=found,
        steps=_steps(current, started),
        leftovers={inc: _steps(memos, None) for inc, memos in by_incarnation.items()},
        attempts=attempts,
        earlier_attempts=max(0, listed - 1),
        result=None
        if outcome is None or outcome.result is None
        else pretty(decode_value(outcome.result)),
        events=_events(found),
    )


def _steps(memos: list[Memo], started: float | None) -> list[Step]:
    steps = []
    previous = started
    for memo in sorted(memos, key=lambda m: m.modified):
        seconds = None if previous is None else max(0.0, memo.modified - previous)
        value = "" if memo.unreadable else pretty(memo.value)
        steps.append(Step(memo.step, memo.modified, seconds, value, memo.unreadable))
        previous = memo.modified
    return steps


def _attempts(found: Detail) -> list[Attempt]:
    """The attempts the records tell of: the last one (from the outcome, or
    the queue record's last error and lease), and the one before it when a
    retry is waiting."""
    outcome, queued = found.outcome, found.queued
    if outcome is not None and outcome.attempts > 0:
        error = outcome.error
        return [
            Attempt(
                number=outcome.attempts,
                started_at=outcome.started_at,
                ended_at=outcome.finished_at,
                ended=outcome.status.value,
                error_type=None if error is None else error.error_type,
                message=None if error is None else f"{error.kind}: {error.message}",
                traceback=None if error is None else getattr(error, "traceback", None),
            )
        ]
    if queued is None:
        return []
    attempts = []
    if queued.last_error and queued.attempts > 0:
        attempts.append(
            Attempt(
                number=queued.attempts,
                started_at=None,
                ended_at=queued.updated_at,
                ended="dead" if queued.status is JobStatus.DEAD else "failed, retrying",
                message=queued.last_error,
            )
        )
    if queued.status is JobStatus.RUNNING:
        attempts.append(Attempt(queued.attempts + 1, queued.updated_at, None, "running"))
    return attempts


def _events(found: Detail) -> list[tuple[float, str]]:
    """The run's dated facts, oldest first: submitted, last change, finished."""
    outcome, queued = found.outcome, found.queued
    events: list[tuple[float, str]] = []
    submitted = queued.created_at if queued is not None else None
    if submitted is None and outcome is not None:
        submitted = outcome.submitted_at
    if submitted:
        events.append((submitted, "submitted"))
    if queued is not None:
        if queued.wait is not None:
            events.append((queued.updated_at, f"suspended: {queued.status.value}"))
            events.append((queued.run_at, "wakes (at the latest)"))
        elif queued.status is JobStatus.SCHEDULED:
            events.append((queued.run_at, "due"))
        if queued.lease_expires_at is not None and queued.status is JobStatus.RUNNING:
            events.append((queued.lease_expires_at, "lease expires (renewed while it runs)"))
        if queued.dead_reason:
            events.append((queued.updated_at, f"dead: {queued.dead_reason}"))
    if outcome is not None:
        if outcome.started_at:
            events.append((outcome.started_at, f"attempt {outcome.attempts} started"))
        events.append((outcome.finished_at, outcome.status.value))
    return sorted(events, key=lambda event: event[0])
